//! Checks on template.yaml that cfn-lint cannot make: the settings that must agree across
//! functions do agree, every function waits for the migrations and may read the database
//! secret, and the optional RDS Proxy comes with its pinning alarm. Provider feedback (issue
//! 15) is wired end to end: the worker's configuration set publishes to the topic the feedback
//! function listens on, the SMS delivery-status logs are subscribed to it, and the bounce and
//! complaint rates it counts are alarmed on.
//!
//! The sweep window must be longer than the worker function's timeout (DESIGN.md, invariant 4).
//! The sweeper enforces `STUCK_AFTER_SECS > WORKER_TIMEOUT_SECS` at start, but only a template
//! that gives the worker's `Timeout` and the sweeper's `WORKER_TIMEOUT_SECS` from one parameter
//! makes the value the sweeper checks the value Lambda enforces.

use std::path::PathBuf;

use serde_yaml_ng::Value;

fn template() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../template.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).expect("template.yaml is valid YAML")
}

fn get<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    let mut current = value;
    for (i, key) in path.iter().enumerate() {
        current = current
            .get(*key)
            .unwrap_or_else(|| panic!("template.yaml has no {}", path[..=i].join(".")));
    }
    current
}

/// The parameter a value refers to: `!Ref Name`, `{Ref: Name}`, or a `!Sub "${Name}"` that is
/// nothing but the reference.
fn parameter_ref(value: &Value) -> Option<String> {
    match value {
        Value::Tagged(tagged) if tagged.tag == "!Ref" => tagged.value.as_str().map(str::to_owned),
        Value::Tagged(tagged) if tagged.tag == "!Sub" => tagged
            .value
            .as_str()
            .and_then(|s| s.strip_prefix("${"))
            .and_then(|s| s.strip_suffix('}'))
            .filter(|name| !name.contains(['$', '{', '}', '.']))
            .map(str::to_owned),
        Value::Mapping(map) if map.len() == 1 => {
            map.get("Ref").and_then(Value::as_str).map(str::to_owned)
        }
        _ => None,
    }
}

fn number(value: &Value) -> u64 {
    match value {
        Value::Number(n) => n.as_u64().expect("a whole number"),
        Value::String(s) => s.parse().expect("a whole number"),
        other => panic!("expected a number, found {other:?}"),
    }
}

fn parameter_default(template: &Value, name: &str) -> u64 {
    let parameter = get(template, &["Parameters", name]);
    assert_eq!(
        get(parameter, &["Type"]).as_str(),
        Some("Number"),
        "parameter {name} must be a Number"
    );
    number(get(parameter, &["Default"]))
}

fn env_var<'a>(template: &'a Value, function: &str, name: &str) -> &'a Value {
    get(
        template,
        &[
            "Resources",
            function,
            "Properties",
            "Environment",
            "Variables",
            name,
        ],
    )
}

/// The logical ids of every `AWS::Serverless::Function`, sorted.
fn functions(template: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = get(template, &["Resources"])
        .as_mapping()
        .expect("Resources is a mapping")
        .iter()
        .filter(|(_, r)| get(r, &["Type"]).as_str() == Some("AWS::Serverless::Function"))
        .map(|(name, _)| name.as_str().expect("a logical id"))
        .collect();
    names.sort();
    names
}

/// A function's environment variable as deployed: its own, else the Globals'.
fn effective_env<'a>(template: &'a Value, function: &str, name: &str) -> Option<&'a Value> {
    let own = get(template, &["Resources", function, "Properties"])
        .get("Environment")
        .and_then(|e| e.get("Variables"))
        .and_then(|v| v.get(name));
    own.or_else(|| {
        get(
            template,
            &["Globals", "Function", "Environment", "Variables"],
        )
        .get(name)
    })
}

/// `!Tag value` (short form) as (tag, value).
fn tagged(value: &Value) -> Option<(String, &Value)> {
    match value {
        Value::Tagged(t) => Some((t.tag.to_string(), &t.value)),
        _ => None,
    }
}

/// Whether `value` is `!<tag> <text>` (e.g. `!Ref DatabaseProxy`, `!GetAtt X.Arn`).
fn is(value: &Value, tag: &str, text: &str) -> bool {
    tagged(value).is_some_and(|(t, v)| t == tag && v.as_str() == Some(text))
}

fn as_list(value: &Value) -> Vec<&Value> {
    match value {
        Value::Sequence(items) => items.iter().collect(),
        other => vec![other],
    }
}

/// The logical ids of every resource of this type, sorted.
fn resources_of<'a>(template: &'a Value, kind: &str) -> Vec<&'a str> {
    let mut names: Vec<&str> = get(template, &["Resources"])
        .as_mapping()
        .expect("Resources is a mapping")
        .iter()
        .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some(kind))
        .map(|(name, _)| name.as_str().expect("a logical id"))
        .collect();
    names.sort();
    names
}

/// The resource a `!Ref` names, checked to be of type `kind`.
fn referenced<'a>(template: &'a Value, reference: &Value, kind: &str) -> &'a str {
    let name = parameter_ref(reference)
        .unwrap_or_else(|| panic!("expected a !Ref to an {kind}, found {reference:?}"));
    let (id, resource) = get(template, &["Resources"])
        .as_mapping()
        .unwrap()
        .iter()
        .find(|(id, _)| id.as_str() == Some(name.as_str()))
        .unwrap_or_else(|| panic!("!Ref {name}: no such resource"));
    assert_eq!(
        get(resource, &["Type"]).as_str(),
        Some(kind),
        "{name} must be an {kind}"
    );
    id.as_str().unwrap()
}

/// A statement's actions (one string or a list).
fn actions(statement: &Value) -> Vec<&str> {
    statement
        .get("Action")
        .map(as_list)
        .unwrap_or_default()
        .into_iter()
        .filter_map(Value::as_str)
        .collect()
}

/// A parameter's default as a number (Number parameters may have fractions: 0.1).
fn parameter_default_f64(template: &Value, name: &str) -> f64 {
    match get(template, &["Parameters", name, "Default"]) {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => s.parse().expect("a number"),
        other => panic!("{name}: expected a number, found {other:?}"),
    }
}

/// A metric an alarm reads; a dimension's value is its text, or `!Ref Name`.
#[derive(Debug, PartialEq)]
struct Watched {
    namespace: String,
    metric: String,
    dimensions: Vec<(String, String)>,
}

impl Watched {
    fn new(namespace: &str, metric: &str, dimensions: &[(&str, &str)]) -> Self {
        Self {
            namespace: namespace.to_owned(),
            metric: metric.to_owned(),
            dimensions: dimensions
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }
}

/// What an alarm reads: its single metric, or the `MetricStat`s of a metric-math alarm.
fn alarm_metrics(alarm: &Value) -> Vec<Watched> {
    let properties = get(alarm, &["Properties"]);
    let single = properties.get("MetricName").map(|_| properties);
    let stats = properties
        .get("Metrics")
        .map(as_list)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.get("MetricStat"))
        .map(|stat| get(stat, &["Metric"]));
    single
        .into_iter()
        .chain(stats)
        .map(|m| {
            let text = |key: &str| get(m, &[key]).as_str().unwrap_or_default().to_owned();
            let dimensions = m
                .get("Dimensions")
                .map(as_list)
                .unwrap_or_default()
                .into_iter()
                .map(|d| {
                    // (as_str would see through a tag: `!Ref X` is not the text X)
                    let value = get(d, &["Value"]);
                    let value = match parameter_ref(value) {
                        Some(name) => format!("!Ref {name}"),
                        None => sub_text(value).unwrap_or_default().to_owned(),
                    };
                    (get(d, &["Name"]).as_str().unwrap().to_owned(), value)
                })
                .collect();
            Watched {
                namespace: text("Namespace"),
                metric: text("MetricName"),
                dimensions,
            }
        })
        .collect()
}

/// The text of an `!Sub` string (or a plain string).
fn sub_text(value: &Value) -> Option<&str> {
    match tagged(value) {
        Some((tag, inner)) if tag == "!Sub" => inner.as_str(),
        Some(_) => None,
        None => value.as_str(),
    }
}

#[test]
fn worker_timeout_and_sweeper_worker_timeout_secs_come_from_one_parameter() {
    let t = template();
    let timeout = get(
        &t,
        &["Resources", "WorkerFunction", "Properties", "Timeout"],
    );
    let from_timeout = parameter_ref(timeout)
        .unwrap_or_else(|| panic!("WorkerFunction Timeout must be a parameter, found {timeout:?}"));
    let secs = env_var(&t, "SweeperFunction", "WORKER_TIMEOUT_SECS");
    let from_env = parameter_ref(secs).unwrap_or_else(|| {
        panic!("SweeperFunction WORKER_TIMEOUT_SECS must be a parameter, found {secs:?}")
    });
    assert_eq!(
        from_timeout, from_env,
        "the worker's Timeout and the sweeper's WORKER_TIMEOUT_SECS must come from the same parameter"
    );
    assert_eq!(from_timeout, "WorkerTimeoutSeconds");
    assert_eq!(parameter_default(&t, &from_timeout), 120);
}

#[test]
fn sweep_window_default_is_longer_than_the_worker_timeout_default() {
    let t = template();
    let stuck = env_var(&t, "SweeperFunction", "STUCK_AFTER_SECS");
    let stuck_param = parameter_ref(stuck)
        .unwrap_or_else(|| panic!("STUCK_AFTER_SECS must be a parameter, found {stuck:?}"));
    let window = parameter_default(&t, &stuck_param);
    let worker_timeout = parameter_default(&t, "WorkerTimeoutSeconds");
    assert_eq!(window, 600);
    assert!(
        window > worker_timeout,
        "STUCK_AFTER_SECS default ({window}) must exceed WorkerTimeoutSeconds default ({worker_timeout})"
    );
}

#[test]
fn deployed_ingest_never_honours_the_organization_header() {
    let t = template();
    assert_eq!(
        env_var(&t, "IngestFunction", "ALLOW_ORG_HEADER").as_str(),
        Some("false")
    );
    for function in functions(&t) {
        if function == "IngestFunction" {
            continue;
        }
        assert!(
            effective_env(&t, function, "ALLOW_ORG_HEADER").is_none(),
            "{function} sets ALLOW_ORG_HEADER"
        );
    }
    let globals = get(&t, &["Globals", "Function", "Environment", "Variables"]);
    assert!(
        globals.get("ALLOW_ORG_HEADER").is_none(),
        "Globals set ALLOW_ORG_HEADER"
    );
}

#[test]
fn every_function_is_an_arm64_cargo_lambda_build_of_its_own_package() {
    let t = template();
    let globals = get(&t, &["Globals", "Function"]);
    assert_eq!(get(globals, &["Runtime"]).as_str(), Some("provided.al2023"));
    assert_eq!(get(globals, &["Handler"]).as_str(), Some("bootstrap"));
    assert_eq!(
        get(globals, &["Architectures"])
            .as_sequence()
            .map(|a| a.len()),
        Some(1)
    );
    assert_eq!(get(globals, &["Architectures"])[0].as_str(), Some("arm64"));
    // (resource, folder, package = binary): the migrator is not `migrate`, which is the name
    // of shared's binary behind `make migrate` (cargo lambda builds every binary by name)
    let expected = [
        ("IngestFunction", "ingest", "ingest"),
        ("WorkerFunction", "worker", "worker"),
        ("SweeperFunction", "sweeper", "sweeper"),
        ("FeedbackFunction", "feedback", "feedback"),
        ("MigrateFunction", "migrate", "migrator"),
    ];
    let mut listed: Vec<&str> = expected.iter().map(|(r, _, _)| *r).collect();
    listed.sort();
    assert_eq!(functions(&t), listed, "a function missing from this list");
    for (resource, folder, package) in expected {
        let r = get(&t, &["Resources", resource]);
        assert_eq!(
            get(r, &["Metadata", "BuildMethod"]).as_str(),
            Some("rust-cargolambda")
        );
        assert_eq!(
            get(r, &["Metadata", "BuildProperties", "Binary"]).as_str(),
            Some(package)
        );
        let code_uri = format!("functions/{folder}");
        assert_eq!(
            get(r, &["Properties", "CodeUri"]).as_str(),
            Some(code_uri.as_str())
        );
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(&code_uri)
            .join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        assert!(
            text.contains(&format!("name = \"{package}\"")),
            "{} must be the package {package}",
            manifest.display()
        );
    }
}

#[test]
fn the_email_sender_is_a_required_parameter() {
    let t = template();
    let from = env_var(&t, "WorkerFunction", "EMAIL_FROM");
    let param = parameter_ref(from).expect("EMAIL_FROM must be a parameter");
    let parameter = get(&t, &["Parameters", &param]);
    assert!(
        parameter.get("Default").is_none(),
        "EMAIL_FROM must have no default: the deployer names the sender"
    );
}

/// Every route the ingest handler serves is an HttpApi route of the ingest function.
#[test]
fn every_template_route_reaches_a_handler_and_nothing_else_does() {
    let template = template();
    let events = get(
        &template,
        &["Resources", "IngestFunction", "Properties", "Events"],
    );
    let deployed: std::collections::BTreeSet<(String, String)> = events
        .as_mapping()
        .expect("Events is a mapping")
        .values()
        .filter(|event| get(event, &["Type"]).as_str() == Some("HttpApi"))
        .map(|event| {
            let method = get(event, &["Properties", "Method"]).as_str().unwrap();
            let path = get(event, &["Properties", "Path"]).as_str().unwrap();
            (method.to_owned(), path.to_owned())
        })
        .collect();
    assert!(!deployed.is_empty());
    // every method on every path shape the API could have: the router must answer exactly
    // the deployed ones (they get as far as asking for the organization: 401), and refuse
    // the rest (404 or 405) before that
    let paths = [
        "/notifications",
        "/notifications/batch",
        "/notifications/{id}",
        "/notifications/{id}/cancel",
        "/notifications/{id}/requeue",
        "/notifications/{id}/retry",
        "/notifications/batch/{id}",
        "/suppressions",
        "/suppressions/{recipient}",
        "/suppressions/{recipient}/extra",
        "/organizations",
        "/",
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // never connects: every request here is answered before any store call
    let store = shared::store::PgStore::new(
        shared::db::DbConfig::new("postgres://nobody@127.0.0.1:9/none?sslmode=disable", None)
            .unwrap(),
    );
    let ingest = shared::ingest::Ingest::new(
        std::sync::Arc::new(store),
        shared::ingest::IngestConfig::default(),
    );
    let id = uuid::Uuid::new_v4().to_string();
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
        for path in paths {
            // a recipient as a caller sends it: URL-encoded
            let concrete = path
                .replace("{id}", &id)
                .replace("{recipient}", "a%40example.com");
            let request = integration_tests::apigw::ApiRequest::new(
                integration_tests::apigw::Version::V2,
                method,
                &concrete,
            )
            .build();
            let status = runtime.block_on(ingest.handle(request)).status().as_u16();
            let is_deployed = deployed.contains(&(method.to_owned(), path.to_owned()));
            if is_deployed {
                assert_eq!(
                    status, 401,
                    "{method} {path} is deployed: it must reach a handler"
                );
            } else {
                assert!(
                    status == 404 || status == 405,
                    "{method} {path} is not in the template, yet the router answers {status}"
                );
            }
        }
    }
}

/// Migrations run once per deploy (the Migrations custom resource), never at a cold start.
#[test]
fn no_deployed_function_migrates_at_cold_start() {
    let t = template();
    for function in functions(&t) {
        assert_eq!(
            effective_env(&t, function, "MIGRATE_ON_START").and_then(Value::as_str),
            Some("false"),
            "{function}: MIGRATE_ON_START must be the string 'false'"
        );
    }
}

#[test]
fn every_app_function_waits_for_the_migrations_of_its_deploy() {
    let t = template();
    let migrations = get(&t, &["Resources", "Migrations"]);
    assert_eq!(
        get(migrations, &["Type"]).as_str(),
        Some("Custom::Migrations")
    );
    let properties = get(migrations, &["Properties"]);
    assert!(
        is(
            get(properties, &["ServiceToken"]),
            "!GetAtt",
            "MigrateFunction.Arn"
        ),
        "the migrator serves the resource"
    );
    // a property that changes with the migrator's code, or an Update would never come
    assert!(
        properties
            .as_mapping()
            .unwrap()
            .values()
            .any(|v| is(v, "!Ref", "MigrateFunction.Version")),
        "a property must be !Ref MigrateFunction.Version"
    );
    assert_eq!(
        get(
            &t,
            &[
                "Resources",
                "MigrateFunction",
                "Properties",
                "AutoPublishAlias"
            ]
        )
        .as_str(),
        Some("live"),
        "without AutoPublishAlias there is no MigrateFunction.Version"
    );
    // CloudFormation gives up on an answer before waiting an hour, and never before the
    // migrator's longest timeout
    let service_timeout = number(get(properties, &["ServiceTimeout"]));
    let longest = number(get(
        &t,
        &["Parameters", "MigrateTimeoutSeconds", "MaxValue"],
    ));
    assert!(
        longest < service_timeout && service_timeout < 3600,
        "ServiceTimeout {service_timeout}"
    );
    assert!(
        as_list(get(migrations, &["DependsOn"]))
            .iter()
            .any(|d| d.as_str() == Some("MigrateLogGroup")),
        "the migrator's log group must exist before its first invocation"
    );

    for function in functions(&t) {
        if function == "MigrateFunction" {
            continue;
        }
        let depends = get(&t, &["Resources", function])
            .get("DependsOn")
            .map(as_list)
            .unwrap_or_default();
        assert!(
            depends.iter().any(|d| d.as_str() == Some("Migrations")),
            "{function} must DependsOn Migrations, so its new code never meets an old schema"
        );
    }
}

#[test]
fn every_function_reads_the_database_secret_and_may() {
    let t = template();
    let globals = get(&t, &["Globals", "Function", "Environment", "Variables"]);
    assert!(
        is(
            get(globals, &["DATABASE_SECRET_ARN"]),
            "!Ref",
            "DatabaseSecretArn"
        ),
        "DATABASE_SECRET_ARN must be the DatabaseSecretArn parameter"
    );
    for function in functions(&t) {
        assert!(
            effective_env(&t, function, "DATABASE_URL").is_none(),
            "{function}: no DATABASE_URL in a deployment (it would put the password in the configuration)"
        );
        let policies = get(&t, &["Resources", function, "Properties", "Policies"]);
        assert!(
            as_list(policies)
                .iter()
                .any(|p| is(p, "!Ref", "DatabaseSecretReadPolicy")),
            "{function} must have DatabaseSecretReadPolicy"
        );
    }
    let statements = get(
        &t,
        &[
            "Resources",
            "DatabaseSecretReadPolicy",
            "Properties",
            "PolicyDocument",
            "Statement",
        ],
    );
    assert!(
        as_list(statements).iter().any(|s| {
            s.get("Effect").and_then(Value::as_str) == Some("Allow")
                && s.get("Action").and_then(Value::as_str) == Some("secretsmanager:GetSecretValue")
                && s.get("Resource")
                    .is_some_and(|r| is(r, "!Ref", "DatabaseSecretArn"))
        }),
        "DatabaseSecretReadPolicy must allow secretsmanager:GetSecretValue on DatabaseSecretArn"
    );
}

#[test]
fn the_rds_proxy_is_optional_and_its_pinning_alarm_watches_it() {
    let t = template();
    let parameter = get(&t, &["Parameters", "UseRdsProxy"]);
    assert_eq!(get(parameter, &["Default"]).as_str(), Some("false"));
    let (tag, args) = tagged(get(&t, &["Conditions", "RdsProxyEnabled"])).unwrap();
    assert_eq!(tag, "!Equals");
    assert!(is(&args[0], "!Ref", "UseRdsProxy") && args[1].as_str() == Some("true"));

    for resource in [
        "DatabaseProxy",
        "DatabaseProxyRole",
        "DatabaseProxyTargetGroup",
        "DatabaseProxyPinningAlarm",
    ] {
        assert_eq!(
            get(&t, &["Resources", resource, "Condition"]).as_str(),
            Some("RdsProxyEnabled"),
            "{resource} exists only with UseRdsProxy=true"
        );
    }

    let proxy = get(&t, &["Resources", "DatabaseProxy", "Properties"]);
    assert_eq!(get(proxy, &["EngineFamily"]).as_str(), Some("POSTGRESQL"));
    assert_eq!(get(proxy, &["RequireTLS"]).as_bool(), Some(true));
    assert!(is(
        get(proxy, &["RoleArn"]),
        "!GetAtt",
        "DatabaseProxyRole.Arn"
    ));
    let auth = &as_list(get(proxy, &["Auth"]))[0];
    assert_eq!(get(auth, &["AuthScheme"]).as_str(), Some("SECRETS"));
    assert!(is(get(auth, &["SecretArn"]), "!Ref", "DatabaseSecretArn"));
    let role_policies = get(
        &t,
        &[
            "Resources",
            "DatabaseProxyRole",
            "Properties",
            "ManagedPolicyArns",
        ],
    );
    assert!(
        as_list(role_policies)
            .iter()
            .any(|p| is(p, "!Ref", "DatabaseSecretReadPolicy")),
        "the proxy's role must be allowed to read the secret"
    );
    let target_group = get(&t, &["Resources", "DatabaseProxyTargetGroup", "Properties"]);
    assert!(is(
        get(target_group, &["DBProxyName"]),
        "!Ref",
        "DatabaseProxy"
    ));

    // with the proxy, the functions connect to it
    let host = get(
        &t,
        &[
            "Globals",
            "Function",
            "Environment",
            "Variables",
            "DATABASE_HOST",
        ],
    );
    let (tag, args) = tagged(host).expect("DATABASE_HOST is an !If");
    assert_eq!(tag, "!If");
    assert_eq!(args[0].as_str(), Some("RdsProxyEnabled"));
    assert!(is(&args[1], "!GetAtt", "DatabaseProxy.Endpoint"));

    let alarm = get(
        &t,
        &["Resources", "DatabaseProxyPinningAlarm", "Properties"],
    );
    assert_eq!(get(alarm, &["Namespace"]).as_str(), Some("AWS/RDS"));
    assert_eq!(
        get(alarm, &["MetricName"]).as_str(),
        Some("DatabaseConnectionsCurrentlySessionPinned")
    );
    let dimensions = as_list(get(alarm, &["Dimensions"]));
    assert_eq!(dimensions.len(), 1);
    assert_eq!(get(dimensions[0], &["Name"]).as_str(), Some("ProxyName"));
    assert!(is(get(dimensions[0], &["Value"]), "!Ref", "DatabaseProxy"));
    assert_eq!(number(get(alarm, &["Threshold"])), 0);
    assert_eq!(
        get(alarm, &["ComparisonOperator"]).as_str(),
        Some("GreaterThanThreshold")
    );
}

/// The feedback function's metrics that an alarm reads: the rates SES judges the account by,
/// and events it could not read. The sweeper's `FeedbackDropped` has none: the SMS
/// delivery-status logs carry every SMS of the account, including other senders' ones,
/// which never match.
const ALARMED_FEEDBACK_METRICS: [&str; 4] =
    ["Deliveries", "Bounces", "Complaints", "FeedbackMalformed"];

/// Every job metric the worker and the sweeper emit, and the feedback metrics above, have an
/// alarm on them (a single-metric alarm or a term of a metric-math one): nothing dies,
/// expires, is held, bounces or is complained about silently.
#[test]
fn every_job_metric_has_an_alarm() {
    let t = template();
    let alarmed: Vec<Watched> = resources_of(&t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .flat_map(|alarm| alarm_metrics(get(&t, &["Resources", alarm])))
        .collect();
    for metric in shared::worker::JOB_METRICS
        .into_iter()
        .chain(ALARMED_FEEDBACK_METRICS)
    {
        let wanted = Watched::new(
            shared::worker::METRIC_NAMESPACE,
            metric,
            &[("Service", shared::worker::SERVICE)],
        );
        assert!(
            alarmed.contains(&wanted),
            "no alarm on {metric} (namespace {}, dimension Service={})",
            shared::worker::METRIC_NAMESPACE,
            shared::worker::SERVICE
        );
    }
}

/// Every function logs to a group the stack creates (so its retention is `LogRetentionDays`,
/// not forever) and has an alarm on its failed invocations. The migrator has none: its
/// failures fail the deploy, and the stack's events show them.
#[test]
fn every_function_has_a_log_group_with_retention_and_an_errors_alarm() {
    let t = template();
    let groups = resources_of(&t, "AWS::Logs::LogGroup");
    let alarms = resources_of(&t, "AWS::CloudWatch::Alarm");
    for function in functions(&t) {
        let name = format!("/aws/lambda/${{{function}}}");
        let group = groups
            .iter()
            .map(|g| get(&t, &["Resources", g, "Properties"]))
            .find(|p| sub_text(get(p, &["LogGroupName"])) == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{function} has no log group named !Sub {name}"));
        assert!(
            is(get(group, &["RetentionInDays"]), "!Ref", "LogRetentionDays"),
            "{function}'s log group must be kept LogRetentionDays"
        );
        if function == "MigrateFunction" {
            continue;
        }
        let reference = format!("!Ref {function}");
        let errors = Watched::new("AWS/Lambda", "Errors", &[("FunctionName", &reference)]);
        assert!(
            alarms
                .iter()
                .any(|a| alarm_metrics(get(&t, &["Resources", a])).contains(&errors)),
            "no alarm on AWS/Lambda Errors of {function}"
        );
    }
}

/// Every alarm notifies `AlarmTopicArn` when one is given, on firing and on recovery.
#[test]
fn every_alarm_notifies_the_alarm_topic() {
    let t = template();
    for alarm in resources_of(&t, "AWS::CloudWatch::Alarm") {
        for key in ["AlarmActions", "OKActions"] {
            let actions = get(&t, &["Resources", alarm, "Properties", key]);
            let (tag, args) = tagged(actions).unwrap_or_else(|| panic!("{alarm} {key}: an !If"));
            assert_eq!(tag, "!If", "{alarm} {key}");
            assert_eq!(args[0].as_str(), Some("HasAlarmTopic"), "{alarm} {key}");
            assert!(
                is(as_list(&args[1])[0], "!Ref", "AlarmTopicArn"),
                "{alarm} {key}: notify AlarmTopicArn"
            );
        }
    }
}

/// The SES event types the configuration set publishes: every one the feedback function
/// reads (`Open` and `Click` would need tracking, and say nothing about delivery).
const SES_EVENT_TYPES: [&str; 7] = [
    "send",
    "reject",
    "bounce",
    "complaint",
    "delivery",
    "deliveryDelay",
    "renderingFailure",
];

#[test]
fn every_email_is_sent_with_the_stacks_configuration_set_whose_events_reach_feedback() {
    let t = template();
    // the worker sends with the stack's own configuration set ...
    let set = referenced(
        &t,
        env_var(&t, "WorkerFunction", "SES_CONFIGURATION_SET"),
        "AWS::SES::ConfigurationSet",
    );
    assert!(
        t.get("Parameters")
            .and_then(|p| p.get("SesConfigurationSet"))
            .is_none(),
        "the stack owns the configuration set: no parameter may name another"
    );
    // ... and may: SES v2 authorises SendEmail against the configuration set too
    let set_arn = format!(
        "arn:${{AWS::Partition}}:ses:${{AWS::Region}}:${{AWS::AccountId}}:configuration-set/${{{set}}}"
    );
    let policies = get(
        &t,
        &["Resources", "WorkerFunction", "Properties", "Policies"],
    );
    let send_email: Vec<&Value> = as_list(policies)
        .into_iter()
        .filter_map(|p| p.get("Statement"))
        .flat_map(as_list)
        .filter(|s| actions(s).contains(&"ses:SendEmail"))
        .collect();
    assert!(!send_email.is_empty(), "the worker may not ses:SendEmail");
    assert!(
        send_email.iter().any(|s| {
            s.get("Resource")
                .map(as_list)
                .unwrap_or_default()
                .into_iter()
                .any(|r| sub_text(r) == Some(set_arn.as_str()))
        }),
        "the worker's ses:SendEmail must name !Sub {set_arn}"
    );

    // its SNS event destination publishes every event type to a topic ...
    let destination = resources_of(&t, "AWS::SES::ConfigurationSetEventDestination")
        .into_iter()
        .map(|d| get(&t, &["Resources", d, "Properties"]))
        .find(|p| {
            is(get(p, &["ConfigurationSetName"]), "!Ref", set)
                && get(p, &["EventDestination"])
                    .get("SnsDestination")
                    .is_some()
        })
        .unwrap_or_else(|| panic!("{set} has no SNS event destination"));
    let destination = get(destination, &["EventDestination"]);
    assert_eq!(get(destination, &["Enabled"]).as_bool(), Some(true));
    let mut types: Vec<&str> = as_list(get(destination, &["MatchingEventTypes"]))
        .into_iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    types.sort();
    let mut expected = SES_EVENT_TYPES.to_vec();
    expected.sort();
    assert_eq!(types, expected, "the event types SES publishes");
    let topic = referenced(
        &t,
        get(destination, &["SnsDestination", "TopicARN"]),
        "AWS::SNS::Topic",
    );

    // ... the feedback function is subscribed to ...
    let events = get(
        &t,
        &["Resources", "FeedbackFunction", "Properties", "Events"],
    );
    assert!(
        events.as_mapping().unwrap().values().any(|e| {
            get(e, &["Type"]).as_str() == Some("SNS")
                && is(get(e, &["Properties", "Topic"]), "!Ref", topic)
        }),
        "FeedbackFunction must be subscribed to {topic}"
    );

    // ... and SES of this account may publish to
    let allowed = resources_of(&t, "AWS::SNS::TopicPolicy")
        .into_iter()
        .map(|p| get(&t, &["Resources", p, "Properties"]))
        .filter(|p| {
            as_list(get(p, &["Topics"]))
                .into_iter()
                .any(|v| is(v, "!Ref", topic))
        })
        .flat_map(|p| as_list(get(p, &["PolicyDocument", "Statement"])))
        .any(|s| {
            s.get("Effect").and_then(Value::as_str) == Some("Allow")
                && s.get("Principal")
                    .and_then(|p| p.get("Service"))
                    .and_then(Value::as_str)
                    == Some("ses.amazonaws.com")
                && actions(s).contains(&"sns:Publish")
                && s.get("Condition")
                    .and_then(|c| c.get("StringEquals"))
                    .and_then(|c| c.get("aws:SourceAccount"))
                    .is_some_and(|a| is(a, "!Ref", "AWS::AccountId"))
        });
    assert!(
        allowed,
        "{topic} needs a policy letting ses.amazonaws.com sns:Publish for this account (aws:SourceAccount)"
    );
}

/// The log groups SNS writes SMS delivery status to, SUCCESS and FAILURE.
const SMS_DELIVERY_LOG_GROUPS: [&str; 2] = [
    "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber",
    "sns/${AWS::Region}/${AWS::AccountId}/DirectPublishToPhoneNumber/Failure",
];

/// A subscription filter's log group name, through an `!If` between the stack's own group
/// (`!Ref`) and an existing one (`!Sub`): both branches must name the same group. Returns the
/// name and, when the stack may create it, that group's logical id and its condition.
fn filtered_group<'a>(t: &'a Value, name: &'a Value) -> (&'a str, Option<(&'a str, &'a str)>) {
    if let Some(text) = sub_text(name) {
        return (text, None);
    }
    let (tag, args) = tagged(name).expect("LogGroupName is an !Sub or an !If");
    assert_eq!(tag, "!If", "LogGroupName: {name:?}");
    let condition = args[0].as_str().unwrap();
    let group = referenced(t, &args[1], "AWS::Logs::LogGroup");
    let properties = get(t, &["Resources", group, "Properties"]);
    let created = sub_text(get(properties, &["LogGroupName"])).unwrap();
    let existing = sub_text(&args[2]).expect("the existing group's name is an !Sub");
    assert_eq!(created, existing, "both branches name the same group");
    assert_eq!(
        get(t, &["Resources", group, "Condition"]).as_str(),
        Some(condition),
        "{group} exists exactly when the filter refers to it"
    );
    assert!(
        is(
            get(properties, &["RetentionInDays"]),
            "!Ref",
            "LogRetentionDays"
        ),
        "{group} must be kept LogRetentionDays"
    );
    (created, Some((group, condition)))
}

#[test]
fn the_sms_delivery_status_logs_are_subscribed_to_feedback_which_they_may_invoke() {
    let t = template();
    let filters = resources_of(&t, "AWS::Logs::SubscriptionFilter");
    for group_name in SMS_DELIVERY_LOG_GROUPS {
        let (filter, created) = filters
            .iter()
            .find_map(|f| {
                let name = get(&t, &["Resources", f, "Properties", "LogGroupName"]);
                let (n, created) = filtered_group(&t, name);
                (n == group_name).then_some((*f, created))
            })
            .unwrap_or_else(|| panic!("no subscription filter on {group_name}"));
        // the stack creates the group unless told it exists already
        let (_, condition) =
            created.unwrap_or_else(|| panic!("{filter}: the stack never creates {group_name}"));
        let (tag, args) = tagged(get(&t, &["Conditions", condition])).unwrap();
        assert!(
            tag == "!Equals"
                && is(&args[0], "!Ref", "CreateSmsDeliveryLogGroups")
                && args[1].as_str() == Some("true"),
            "{condition} must be CreateSmsDeliveryLogGroups = 'true'"
        );

        let resource = get(&t, &["Resources", filter]);
        assert!(
            is(
                get(resource, &["Properties", "DestinationArn"]),
                "!GetAtt",
                "FeedbackFunction.Arn"
            ),
            "{filter} must deliver to the feedback function"
        );
        // the permission must exist before the filter: CloudWatch Logs tests it on creation
        let source_arn = format!(
            "arn:${{AWS::Partition}}:logs:${{AWS::Region}}:${{AWS::AccountId}}:log-group:{group_name}:*"
        );
        let depends = resource.get("DependsOn").map(as_list).unwrap_or_default();
        let permitted = depends.iter().filter_map(|d| d.as_str()).any(|d| {
            let Some(p) = t.get("Resources").and_then(|r| r.get(d)) else {
                return false;
            };
            let props = get(p, &["Properties"]);
            get(p, &["Type"]).as_str() == Some("AWS::Lambda::Permission")
                && get(props, &["Action"]).as_str() == Some("lambda:InvokeFunction")
                && get(props, &["Principal"]).as_str() == Some("logs.amazonaws.com")
                && is(
                    get(props, &["FunctionName"]),
                    "!GetAtt",
                    "FeedbackFunction.Arn",
                )
                && sub_text(get(props, &["SourceArn"])) == Some(source_arn.as_str())
        });
        assert!(
            permitted,
            "{filter} must DependsOn a Lambda permission for logs.amazonaws.com on FeedbackFunction with SourceArn !Sub {source_arn}"
        );
        assert!(
            depends
                .iter()
                .any(|d| d.as_str() == Some("FeedbackLogGroup")),
            "{filter}: the function's log group first (an invocation would create it)"
        );
    }
    assert_eq!(
        get(&t, &["Parameters", "CreateSmsDeliveryLogGroups", "Default"]).as_str(),
        Some("true")
    );

    // the role the README's `aws sns set-sms-attributes` gives SNS, and its output
    let role = get(&t, &["Resources", "SmsDeliveryStatusRole"]);
    assert_eq!(get(role, &["Type"]).as_str(), Some("AWS::IAM::Role"));
    let trust = as_list(get(
        role,
        &["Properties", "AssumeRolePolicyDocument", "Statement"],
    ));
    assert!(
        trust.iter().any(|s| {
            s.get("Principal")
                .and_then(|p| p.get("Service"))
                .and_then(Value::as_str)
                == Some("sns.amazonaws.com")
                && actions(s).contains(&"sts:AssumeRole")
        }),
        "SNS must be able to assume SmsDeliveryStatusRole"
    );
    let granted: Vec<&str> = as_list(get(role, &["Properties", "Policies"]))
        .into_iter()
        .flat_map(|p| as_list(get(p, &["PolicyDocument", "Statement"])))
        .flat_map(actions)
        .collect();
    for action in [
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "logs:PutMetricFilter",
        "logs:PutRetentionPolicy",
    ] {
        assert!(
            granted.contains(&action),
            "SmsDeliveryStatusRole lacks {action}"
        );
    }
    assert!(is(
        get(&t, &["Outputs", "SmsDeliveryStatusRoleArn", "Value"]),
        "!GetAtt",
        "SmsDeliveryStatusRole.Arn"
    ));
}

/// The identifiers an expression refers to, among `ids`, through the expressions it uses.
fn uses<'a>(expressions: &[(&'a str, &'a str)], expression: &'a str, out: &mut Vec<&'a str>) {
    for word in expression.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if out.contains(&word) {
            continue;
        }
        if let Some((id, inner)) = expressions.iter().find(|(id, _)| *id == word) {
            out.push(id);
            uses(expressions, inner, out);
        }
    }
}

/// The bounce and complaint rates SES judges the account by, computed from the counts the
/// feedback function emits: each alarm's result uses every one of its metrics, which are the
/// feedback function's by namespace, name and dimension.
#[test]
fn the_bounce_and_complaint_rate_alarms_divide_the_feedback_counts() {
    let t = template();
    for (alarm, counts, threshold, default) in [
        (
            "BounceRateAlarm",
            ["Bounces", "Deliveries"],
            "BounceRateAlarmThreshold",
            5.0,
        ),
        (
            "ComplaintRateAlarm",
            ["Complaints", "Deliveries"],
            "ComplaintRateAlarmThreshold",
            0.1,
        ),
    ] {
        let properties = get(&t, &["Resources", alarm, "Properties"]);
        let metrics = as_list(get(properties, &["Metrics"]));
        // (id, metric name) of each MetricStat, (id, text) of each expression
        let mut stats = Vec::new();
        let mut expressions = Vec::new();
        for m in &metrics {
            let id = get(m, &["Id"]).as_str().unwrap();
            match (m.get("MetricStat"), m.get("Expression")) {
                (Some(stat), None) => {
                    let metric = get(stat, &["Metric"]);
                    assert_eq!(
                        get(metric, &["Namespace"]).as_str(),
                        Some(shared::worker::METRIC_NAMESPACE),
                        "{alarm} {id}"
                    );
                    let dimensions = as_list(get(metric, &["Dimensions"]));
                    assert!(
                        dimensions.len() == 1
                            && get(dimensions[0], &["Name"]).as_str() == Some("Service")
                            && sub_text(get(dimensions[0], &["Value"]))
                                == Some(shared::worker::SERVICE),
                        "{alarm} {id}: dimension Service={}",
                        shared::worker::SERVICE
                    );
                    assert_eq!(get(stat, &["Stat"]).as_str(), Some("Sum"), "{alarm} {id}");
                    stats.push((id, get(metric, &["MetricName"]).as_str().unwrap()));
                }
                (None, Some(expression)) => {
                    let text = sub_text(expression).expect("an expression is text");
                    expressions.push((id, text));
                }
                _ => panic!("{alarm} {id}: a MetricStat or an Expression"),
            }
        }
        let mut names: Vec<&str> = stats.iter().map(|(_, n)| *n).collect();
        names.sort();
        assert_eq!(names, counts, "{alarm} reads exactly these metrics");

        let returned: Vec<&&Value> = metrics
            .iter()
            .filter(|m| m.get("ReturnData").and_then(Value::as_bool) != Some(false))
            .collect();
        assert_eq!(returned.len(), 1, "{alarm}: one result (ReturnData)");
        let result =
            sub_text(get(returned[0], &["Expression"])).expect("the result is an expression");
        let all: Vec<(&str, &str)> = expressions
            .iter()
            .copied()
            .chain(stats.iter().map(|(id, _)| (*id, "")))
            .collect();
        let mut used = Vec::new();
        uses(&all, result, &mut used);
        for (id, name) in &stats {
            assert!(
                used.contains(id),
                "{alarm}: the result ignores {name} ({id})"
            );
        }

        assert!(is(get(properties, &["Threshold"]), "!Ref", threshold));
        assert_eq!(parameter_default_f64(&t, threshold), default, "{threshold}");
        assert_eq!(
            get(properties, &["ComparisonOperator"]).as_str(),
            Some("GreaterThanThreshold")
        );
    }
}

#[test]
fn the_sweeper_keeps_unmatched_feedback_for_a_parameter_window() {
    let t = template();
    assert!(is(
        env_var(&t, "SweeperFunction", "FEEDBACK_MATCH_WINDOW_SECS"),
        "!Ref",
        "FeedbackMatchWindowSeconds"
    ));
    assert_eq!(parameter_default(&t, "FeedbackMatchWindowSeconds"), 3600);
}
