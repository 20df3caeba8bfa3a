//! Checks on template.yaml that cfn-lint cannot make: the settings that must agree across
//! functions do agree, every function waits for the migrations and may read the database
//! secret, and the optional RDS Proxy comes with its pinning alarm. The worker fleet: ingest
//! and the worker may start the worker and no other function, the worker starts the function
//! it is, its reserved concurrency is its `WORKER_MAX_INVOCATIONS`, failed starts are alarmed
//! on, and the Lambda API's optional endpoint needs its VPC. Provider feedback is wired
//! end to end: the worker's configuration set publishes to the topic the feedback function
//! listens on, the SMS delivery-status logs are subscribed to it, and the bounce and complaint
//! rates it counts are alarmed on. Observability: every function is traced, the HTTP API writes
//! JSON access logs kept like the functions' logs, the dashboard shows every metric the
//! functions emit and every function's errors, throttles and durations, and the backlog, API
//! 5xx, throttles and the worker's duration near its timeout are alarmed on.
//!
//! The sweep window must be longer than the worker function's timeout (docs/design.md, invariant 4).
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

/// The functions but ingest and the worker, the two that wake the worker and post webhooks.
fn others_than_ingest_and_the_worker(t: &Value) -> Vec<&str> {
    functions(t)
        .into_iter()
        .filter(|f| *f != "IngestFunction" && *f != "WorkerFunction")
        .collect()
}

/// No function but ingest and the worker sets `var`.
fn set_by_ingest_and_the_worker_only(t: &Value, var: &str) {
    for function in others_than_ingest_and_the_worker(t) {
        assert!(
            effective_env(t, function, var).is_none(),
            "{function} sets {var}"
        );
    }
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

/// Webhooks go to public https:// addresses only in a deployment: the two functions that
/// read `WEBHOOK_ALLOW_PRIVATE_ADDRESSES` (ingest at registration, the worker at each call)
/// have it pinned to false, and no parameter can change it.
#[test]
fn deployed_webhooks_never_reach_private_addresses() {
    let t = template();
    for function in ["IngestFunction", "WorkerFunction"] {
        assert_eq!(
            env_var(&t, function, "WEBHOOK_ALLOW_PRIVATE_ADDRESSES").as_str(),
            Some("false"),
            "{function}"
        );
    }
    set_by_ingest_and_the_worker_only(&t, "WEBHOOK_ALLOW_PRIVATE_ADDRESSES");
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
    // of notify-postgres's binary behind `make migrate` (cargo lambda builds every binary by name)
    let expected = [
        ("IngestFunction", "ingest", "ingest"),
        ("WorkerFunction", "worker", "worker"),
        ("SweeperFunction", "sweeper", "sweeper"),
        ("FeedbackFunction", "feedback", "feedback"),
        ("MigrateFunction", "migrate", "migrator"),
        ("TokenFunction", "token", "token"),
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
        "/webhooks",
        "/webhooks/{id}",
        "/webhooks/{id}/rotate-secret",
        "/webhooks/{id}/deliveries",
        "/webhooks/{id}/extra",
        "/organizations",
        "/",
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // never connects: every request here is answered before any store call
    let store = notify_postgres::PgStore::new(
        notify_postgres::db::DbConfig::new(
            "postgres://nobody@127.0.0.1:9/none?sslmode=disable",
            None,
        )
        .unwrap(),
    );
    // every answer checked against the API contract too (functions/ingest/openapi.yaml)
    let ingest = integration_tests::contract::Ingest::new(
        std::sync::Arc::new(store),
        notify_api::IngestConfig::default(),
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
    // the schema version the code needs: the migrator migrates to it and no further, and a
    // rollback sends the previous release's
    assert_eq!(
        number(get(properties, &["SchemaVersion"])),
        u64::try_from(notify_postgres::migrate::latest_version()).unwrap(),
        "SchemaVersion must be the highest migration's number (migrations/)"
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

    for function in database_functions(&t) {
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
    for function in database_functions(&t) {
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

/// RDS IAM authentication is opt-in: off by default, the same parameter reaches every
/// function's `DATABASE_IAM_AUTH`, and only with it do the functions get `rds-db:connect`, on
/// the one user of the one database.
#[test]
fn iam_authentication_is_opt_in_and_grants_connect_on_the_one_user_only() {
    let t = template();
    let parameter = get(&t, &["Parameters", "DatabaseIamAuth"]);
    assert_eq!(get(parameter, &["Default"]).as_str(), Some("false"));
    let globals = get(&t, &["Globals", "Function", "Environment", "Variables"]);
    assert!(is(
        get(globals, &["DATABASE_IAM_AUTH"]),
        "!Ref",
        "DatabaseIamAuth"
    ));
    assert!(is(get(globals, &["DATABASE_USER"]), "!Ref", "DatabaseUser"));
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
    let connect: Vec<&Value> = as_list(statements)
        .iter()
        .filter_map(|s| {
            let (tag, args) = tagged(s)?;
            (tag == "!If" && args[0].as_str() == Some("DatabaseIamAuthEnabled")).then_some(&args[1])
        })
        .collect();
    assert_eq!(
        connect.len(),
        1,
        "one statement, only with DatabaseIamAuthEnabled"
    );
    assert_eq!(
        connect[0].get("Action").and_then(Value::as_str),
        Some("rds-db:connect")
    );
    let (tag, arn) = tagged(get(connect[0], &["Resource"])).unwrap();
    assert_eq!(tag, "!Sub");
    let arn = arn.as_str().unwrap_or_default();
    assert!(
        arn.ends_with(":dbuser:${DatabaseResourceId}/${DatabaseUser}"),
        "{arn}"
    );
    let (tag, args) = tagged(get(&t, &["Conditions", "DatabaseIamAuthEnabled"])).unwrap();
    assert_eq!(tag, "!Equals");
    assert!(is(&args[0], "!Ref", "DatabaseIamAuth") && args[1].as_str() == Some("true"));
    assert!(
        get(&t, &["Rules", "IamAuthNeedsTheDatabaseUser", "Assertions"])
            .as_sequence()
            .is_some_and(|a| a.len() == 4),
        "the rule names the user, the resource id and the host, and refuses the proxy"
    );
}

/// Statements prepared once per connection on the direct path, never through RDS Proxy
/// (it would pin every session), and off by hand for a pooler of the user's own.
#[test]
fn prepared_statements_follow_the_connection_unless_set() {
    let t = template();
    let parameter = get(&t, &["Parameters", "DatabasePreparedStatements"]);
    assert_eq!(get(parameter, &["Default"]).as_str(), Some("auto"));
    let globals = get(&t, &["Globals", "Function", "Environment", "Variables"]);
    let (tag, args) = tagged(get(globals, &["DATABASE_PREPARED_STATEMENTS"])).unwrap();
    assert_eq!(tag, "!If");
    assert_eq!(args[0].as_str(), Some("PreparedStatementsByConnection"));
    let (inner, by_connection) = tagged(&args[1]).unwrap();
    assert_eq!(inner, "!If");
    assert_eq!(
        (
            by_connection[0].as_str(),
            by_connection[1].as_str(),
            by_connection[2].as_str()
        ),
        (Some("RdsProxyEnabled"), Some("false"), Some("true")),
        "auto: off through the proxy, on straight to the database"
    );
    assert!(is(&args[2], "!Ref", "DatabasePreparedStatements"));
    let (tag, args) = tagged(get(&t, &["Conditions", "PreparedStatementsByConnection"])).unwrap();
    assert_eq!(tag, "!Equals");
    assert!(is(&args[0], "!Ref", "DatabasePreparedStatements") && args[1].as_str() == Some("auto"));
    let rule = get(&t, &["Rules", "PreparedStatementsWouldPinTheProxy"]);
    let (tag, args) = tagged(get(rule, &["RuleCondition"])).unwrap();
    assert!(tag == "!Equals" && is(&args[0], "!Ref", "UseRdsProxy"));
    assert_eq!(args[1].as_str(), Some("true"));
    let assertions = as_list(get(rule, &["Assertions"]));
    assert_eq!(assertions.len(), 1);
    let (tag, args) = tagged(get(assertions[0], &["Assert"])).unwrap();
    assert_eq!(tag, "!Not");
    let (tag, args) = tagged(as_list(args)[0]).unwrap();
    assert!(tag == "!Equals" && is(&args[0], "!Ref", "DatabasePreparedStatements"));
    assert_eq!(
        args[1].as_str(),
        Some("true"),
        "true through the proxy is refused"
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
    for metric in notify_core::worker::JOB_METRICS
        .into_iter()
        .chain(ALARMED_FEEDBACK_METRICS)
    {
        let wanted = Watched::new(
            notify_core::worker::METRIC_NAMESPACE,
            metric,
            &[("Service", notify_core::worker::SERVICE)],
        );
        assert!(
            alarmed.contains(&wanted),
            "no alarm on {metric} (namespace {}, dimension Service={})",
            notify_core::worker::METRIC_NAMESPACE,
            notify_core::worker::SERVICE
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

    // the role docs/deploy.md's `aws sns set-sms-attributes` gives SNS, and its output
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
                        Some(notify_core::worker::METRIC_NAMESPACE),
                        "{alarm} {id}"
                    );
                    let dimensions = as_list(get(metric, &["Dimensions"]));
                    assert!(
                        dimensions.len() == 1
                            && get(dimensions[0], &["Name"]).as_str() == Some("Service")
                            && sub_text(get(dimensions[0], &["Value"]))
                                == Some(notify_core::worker::SERVICE),
                        "{alarm} {id}: dimension Service={}",
                        notify_core::worker::SERVICE
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

// --- the worker fleet ----------------------------------------------------------------------------

/// Whether an IAM action pattern (`lambda:Invoke*`, `*`) covers `action`; case-insensitive,
/// as IAM matches actions.
fn action_covers(pattern: &str, action: &str) -> bool {
    fn matches(p: &[u8], a: &[u8]) -> bool {
        match (p.first(), a.first()) {
            (None, None) => true,
            (Some(b'*'), _) => matches(&p[1..], a) || (!a.is_empty() && matches(p, &a[1..])),
            (Some(b'?'), Some(_)) => matches(&p[1..], &a[1..]),
            (Some(x), Some(y)) => x.eq_ignore_ascii_case(y) && matches(&p[1..], &a[1..]),
            _ => false,
        }
    }
    matches(pattern.as_bytes(), action.as_bytes())
}

/// Every statement of a function's role the template writes: its inline policies and the
/// managed policies of the stack it names, both branches of an `!If`. A policy of another
/// kind (a SAM policy template, an AWS managed policy) cannot be checked here, and fails.
fn role_statements<'a>(t: &'a Value, function: &str) -> Vec<&'a Value> {
    fn statements<'a>(document: &'a Value, out: &mut Vec<&'a Value>) {
        for statement in as_list(get(document, &["Statement"])) {
            match tagged(statement) {
                Some((tag, args)) if tag == "!If" => {
                    for branch in &as_list(args)[1..] {
                        if !is(branch, "!Ref", "AWS::NoValue") {
                            out.push(branch);
                        }
                    }
                }
                Some((tag, _)) => panic!("a statement that is an {tag}: {statement:?}"),
                None => out.push(statement),
            }
        }
    }
    let mut out = Vec::new();
    let policies = get(t, &["Resources", function, "Properties"]).get("Policies");
    for policy in policies.map(as_list).unwrap_or_default() {
        if policy.get("Statement").is_some() {
            statements(policy, &mut out);
        } else {
            assert!(
                parameter_ref(policy).is_some(),
                "{function}: a policy these tests cannot read (a SAM policy template, an AWS \
                 managed policy): {policy:?}"
            );
            let managed = referenced(t, policy, "AWS::IAM::ManagedPolicy");
            statements(
                get(t, &["Resources", managed, "Properties", "PolicyDocument"]),
                &mut out,
            );
        }
    }
    out
}

/// The resources a function's role may `lambda:InvokeFunction` on (each statement that
/// allows it, by any pattern); a statement with `NotAction` or `NotResource` fails.
fn invocable<'a>(t: &'a Value, function: &str) -> Vec<&'a Value> {
    let mut out = Vec::new();
    for statement in role_statements(t, function) {
        assert!(
            statement.get("NotAction").is_none() && statement.get("NotResource").is_none(),
            "{function}: a NotAction or NotResource statement grants more than it names"
        );
        let allows = get(statement, &["Effect"]).as_str() == Some("Allow");
        if allows
            && actions(statement)
                .iter()
                .any(|a| action_covers(a, "lambda:InvokeFunction"))
        {
            out.extend(as_list(get(statement, &["Resource"])));
        }
    }
    out
}

#[test]
fn the_iam_action_patterns_of_these_tests_match() {
    assert!(action_covers(
        "lambda:InvokeFunction",
        "lambda:InvokeFunction"
    ));
    assert!(action_covers("lambda:invoke*", "lambda:InvokeFunction"));
    assert!(action_covers("*", "lambda:InvokeFunction"));
    assert!(action_covers(
        "lambda:?nvokeFunction",
        "lambda:InvokeFunction"
    ));
    assert!(!action_covers(
        "lambda:InvokeAsync",
        "lambda:InvokeFunction"
    ));
    assert!(!action_covers("sns:*", "lambda:InvokeFunction"));
}

/// The worker's name as its `FunctionName` spells it (an `!Sub` of the stack's name).
fn worker_function_name(t: &Value) -> &str {
    let name = get(
        t,
        &["Resources", "WorkerFunction", "Properties", "FunctionName"],
    );
    sub_text(name)
        .unwrap_or_else(|| panic!("WorkerFunction's FunctionName: an !Sub, found {name:?}"))
}

/// Ingest (its wakes) and the worker (fan-out, hand-off) may start the worker, and nothing
/// else: `lambda:InvokeFunction` on the worker's ARN alone, and no other function may invoke
/// any. The worker names its own ARN from its `FunctionName` (a `!GetAtt` of itself would be
/// a circular dependency).
#[test]
fn ingest_and_the_worker_may_invoke_the_worker_and_nothing_else() {
    let t = template();
    let ingest = invocable(&t, "IngestFunction");
    assert!(
        ingest.len() == 1 && is(ingest[0], "!GetAtt", "WorkerFunction.Arn"),
        "IngestFunction may lambda:InvokeFunction on !GetAtt WorkerFunction.Arn alone, found {ingest:?}"
    );
    let own_arn = format!(
        "arn:${{AWS::Partition}}:lambda:${{AWS::Region}}:${{AWS::AccountId}}:function:{}",
        worker_function_name(&t)
    );
    let worker = invocable(&t, "WorkerFunction");
    assert!(
        worker.len() == 1
            && tagged(worker[0]).is_some_and(|(tag, _)| tag == "!Sub")
            && sub_text(worker[0]) == Some(own_arn.as_str()),
        "WorkerFunction may lambda:InvokeFunction on !Sub {own_arn} alone, found {worker:?}"
    );
    for function in others_than_ingest_and_the_worker(&t) {
        let granted = invocable(&t, function);
        assert!(
            granted.is_empty(),
            "{function} may lambda:InvokeFunction on {granted:?}"
        );
    }
}

/// The worker starts the function it is: its `WORKER_FUNCTION_NAME` is its own
/// `FunctionName`, ingest's is the worker; no other function starts workers.
#[test]
fn the_worker_function_name_is_the_workers_own_in_ingest_and_the_worker() {
    let t = template();
    let name = get(
        &t,
        &["Resources", "WorkerFunction", "Properties", "FunctionName"],
    );
    assert_eq!(
        env_var(&t, "WorkerFunction", "WORKER_FUNCTION_NAME"),
        name,
        "the worker's WORKER_FUNCTION_NAME must be its FunctionName"
    );
    assert_eq!(
        worker_function_name(&t),
        "${AWS::StackName}-worker",
        "the worker's name: the stack's, then -worker (the stack name at most 57 characters)"
    );
    assert!(
        is(
            env_var(&t, "IngestFunction", "WORKER_FUNCTION_NAME"),
            "!Ref",
            "WorkerFunction"
        ),
        "ingest's WORKER_FUNCTION_NAME must be !Ref WorkerFunction"
    );
    set_by_ingest_and_the_worker_only(&t, "WORKER_FUNCTION_NAME");
}

/// `WORKER_MAX_INVOCATIONS` bounds the fleet's slots, hence the worker's database
/// connections; the reserved concurrency is the same parameter, so Lambda holds the schedule's
/// invocations to it too. Both parameters' ranges are the ones the code accepts.
#[test]
fn the_workers_reserved_concurrency_and_max_invocations_come_from_one_parameter() {
    let t = template();
    let reserved = get(
        &t,
        &[
            "Resources",
            "WorkerFunction",
            "Properties",
            "ReservedConcurrentExecutions",
        ],
    );
    assert_eq!(
        parameter_ref(reserved).as_deref(),
        Some("WorkerMaxInvocations"),
        "the worker's ReservedConcurrentExecutions must be !Ref WorkerMaxInvocations, found {reserved:?}"
    );
    let max = env_var(&t, "WorkerFunction", "WORKER_MAX_INVOCATIONS");
    assert_eq!(
        parameter_ref(max).as_deref(),
        Some("WorkerMaxInvocations"),
        "the worker's WORKER_MAX_INVOCATIONS must be !Ref WorkerMaxInvocations, found {max:?}"
    );
    let idle = env_var(&t, "WorkerFunction", "WORKER_IDLE_MS");
    assert_eq!(
        parameter_ref(idle).as_deref(),
        Some("WorkerIdleMs"),
        "WORKER_IDLE_MS"
    );
    // the code's defaults and ranges (notify_core::fleet::FleetConfig::from_lookup)
    for (parameter, default, min, max) in [
        (
            "WorkerMaxInvocations",
            u64::from(notify_core::fleet::DEFAULT_MAX_INVOCATIONS),
            1,
            u64::from(notify_core::fleet::MAX_SLOTS),
        ),
        (
            "WorkerIdleMs",
            u64::try_from(notify_core::fleet::DEFAULT_IDLE.as_millis()).unwrap(),
            0,
            600_000,
        ),
    ] {
        assert_eq!(parameter_default(&t, parameter), default, "{parameter}");
        assert_eq!(
            number(get(&t, &["Parameters", parameter, "MinValue"])),
            min,
            "{parameter}: MinValue"
        );
        assert_eq!(
            number(get(&t, &["Parameters", parameter, "MaxValue"])),
            max,
            "{parameter}: MaxValue"
        );
    }
    for function in functions(&t) {
        if function == "WorkerFunction" {
            continue;
        }
        for name in ["WORKER_MAX_INVOCATIONS", "WORKER_IDLE_MS"] {
            assert!(
                effective_env(&t, function, name).is_none(),
                "{function} sets {name}"
            );
        }
    }
    // a start Lambda throttled or queued is dropped within a schedule period, not retried:
    // by then the schedule has taken over, and a stale start only costs an invocation
    let config = get(
        &t,
        &[
            "Resources",
            "WorkerFunction",
            "Properties",
            "EventInvokeConfig",
        ],
    );
    assert_eq!(number(get(config, &["MaximumRetryAttempts"])), 0);
    assert!(number(get(config, &["MaximumEventAgeInSeconds"])) <= 60);
}

/// Failed worker starts are alarmed on: the alarm reads the failures the fleet counts
/// (`notify_core::fleet::FLEET_METRICS`), by `Service` alone, from a parameter threshold.
#[test]
fn failed_worker_starts_are_alarmed_on() {
    let t = template();
    let failures: Vec<&str> = notify_core::fleet::FLEET_METRICS
        .into_iter()
        .filter(|m| m.contains("Failed"))
        .collect();
    assert_eq!(failures, ["WakeFailed"], "the fleet's failure metric");
    let watched = Watched::new(
        notify_core::worker::METRIC_NAMESPACE,
        failures[0],
        &[("Service", notify_core::worker::SERVICE)],
    );
    let alarm = the_alarm_on(&t, &watched, "Sum");
    let metrics = alarm_metrics(get(&t, &["Resources", alarm]));
    for metric in &metrics {
        assert!(
            notify_core::fleet::FLEET_METRICS.contains(&metric.metric.as_str()),
            "{alarm} reads {}, which the fleet does not emit ({:?})",
            metric.metric,
            notify_core::fleet::FLEET_METRICS
        );
    }
    assert_eq!(metrics, vec![watched], "{alarm} reads WakeFailed alone");
    let resource = get(&t, &["Resources", alarm]);
    assert!(
        resource.get("Condition").is_none(),
        "{alarm} must always exist"
    );
    let properties = get(resource, &["Properties"]);
    assert_eq!(number(get(properties, &["Period"])), 300, "{alarm}");
    assert!(
        is(
            get(properties, &["Threshold"]),
            "!Ref",
            "WakeFailedAlarmThreshold"
        ),
        "{alarm}: Threshold !Ref WakeFailedAlarmThreshold"
    );
    assert_eq!(parameter_default(&t, "WakeFailedAlarmThreshold"), 1);
    assert_eq!(
        number(get(
            &t,
            &["Parameters", "WakeFailedAlarmThreshold", "MinValue"]
        )),
        1
    );
    assert_eq!(
        get(properties, &["ComparisonOperator"]).as_str(),
        Some("GreaterThanOrEqualToThreshold")
    );
    assert_eq!(
        get(properties, &["TreatMissingData"]).as_str(),
        Some("notBreaching")
    );
    // the operator learns where to look
    let description = get(properties, &["AlarmDescription"]).as_str().unwrap();
    for cause in [
        "lambda:InvokeFunction",
        "LambdaVpcEndpoint",
        "WorkerMaxInvocations",
        "schedule",
    ] {
        assert!(
            description.contains(cause),
            "{alarm}'s description does not mention {cause}"
        );
    }
}

/// Without a NAT gateway the Lambda API is reached through an interface endpoint the stack
/// may create: in the functions' subnets, with their security groups and the API's own DNS
/// name, only when asked for, and never without the VPC it needs.
#[test]
fn the_lambda_api_endpoint_is_optional_and_needs_the_vpc() {
    let t = template();
    assert_eq!(
        get(&t, &["Parameters", "LambdaVpcEndpoint", "Default"]).as_str(),
        Some("false")
    );
    assert_eq!(
        get(&t, &["Parameters", "VpcId", "Default"]).as_str(),
        Some("")
    );
    let endpoints = resources_of(&t, "AWS::EC2::VPCEndpoint");
    let lambda: Vec<&str> = endpoints
        .into_iter()
        .filter(|e| {
            sub_text(get(&t, &["Resources", e, "Properties", "ServiceName"]))
                == Some("com.amazonaws.${AWS::Region}.lambda")
        })
        .collect();
    assert_eq!(lambda.len(), 1, "one Lambda API endpoint: {lambda:?}");
    let endpoint = get(&t, &["Resources", lambda[0]]);
    let condition = endpoint
        .get("Condition")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{}: only with LambdaVpcEndpoint=true", lambda[0]));
    let (tag, args) = tagged(get(&t, &["Conditions", condition])).unwrap();
    assert!(
        tag == "!Equals"
            && is(&args[0], "!Ref", "LambdaVpcEndpoint")
            && args[1].as_str() == Some("true"),
        "{condition} must be LambdaVpcEndpoint = 'true'"
    );
    let properties = get(endpoint, &["Properties"]);
    assert_eq!(
        get(properties, &["VpcEndpointType"]).as_str(),
        Some("Interface")
    );
    assert_eq!(
        get(properties, &["PrivateDnsEnabled"]).as_bool(),
        Some(true),
        "the functions reach lambda.REGION.amazonaws.com as it is"
    );
    for (property, parameter) in [
        ("VpcId", "VpcId"),
        ("SubnetIds", "SubnetIds"),
        ("SecurityGroupIds", "SecurityGroupIds"),
    ] {
        assert!(
            is(get(properties, &[property]), "!Ref", parameter),
            "{}: {property} !Ref {parameter}",
            lambda[0]
        );
    }
    // with the endpoint, an empty VpcId is refused before anything is created
    let rules = get(&t, &["Rules"]).as_mapping().unwrap();
    let guarded = rules.values().any(|rule| {
        let Some((tag, args)) = rule.get("RuleCondition").and_then(tagged) else {
            return false;
        };
        tag == "!Equals"
            && is(&args[0], "!Ref", "LambdaVpcEndpoint")
            && args[1].as_str() == Some("true")
            && as_list(get(rule, &["Assertions"])).iter().any(|a| {
                let Some((tag, inner)) = tagged(get(a, &["Assert"])) else {
                    return false;
                };
                let Some((eq, args)) = tagged(as_list(inner)[0]) else {
                    return false;
                };
                tag == "!Not"
                    && eq == "!Equals"
                    && is(&args[0], "!Ref", "VpcId")
                    && args[1].as_str() == Some("")
            })
    });
    assert!(
        guarded,
        "a rule must refuse LambdaVpcEndpoint=true with an empty VpcId"
    );
}

/// The console's parameter groups (`AWS::CloudFormation::Interface`) hold every parameter
/// once, and only parameters that exist.
#[test]
fn every_parameter_is_in_one_console_group() {
    let t = template();
    let groups = get(
        &t,
        &[
            "Metadata",
            "AWS::CloudFormation::Interface",
            "ParameterGroups",
        ],
    );
    let declared: Vec<&str> = get(&t, &["Parameters"])
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    let mut grouped: Vec<&str> = Vec::new();
    for group in as_list(groups) {
        for parameter in as_list(get(group, &["Parameters"])) {
            let name = parameter.as_str().unwrap();
            assert!(
                declared.contains(&name),
                "group {:?} lists {name}, which is no parameter",
                get(group, &["Label", "default"])
            );
            assert!(!grouped.contains(&name), "{name} is in two groups");
            grouped.push(name);
        }
    }
    for name in declared {
        assert!(grouped.contains(&name), "{name} is in no parameter group");
    }
}

// --- observability ---------------------------------------------------------------------------

/// The custom metrics each function emits (namespace `NotificationService`, dimension
/// `Service`), every one of which the dashboard shows.
use notify_core::telemetry::emf::{
    EVENT_METRICS, FEEDBACK_METRICS, INGEST_METRICS, PACE_METRICS, SWEEPER_METRICS, WORKER_METRICS,
};

/// The stage SAM deploys an `AWS::Serverless::HttpApi` to without a `StageName`: the value of
/// the `Stage` dimension of the API's metrics.
const API_STAGE: &str = "$default";

/// The functions that use the database: all but the Cognito token trigger, which only adds
/// a claim.
fn database_functions(t: &Value) -> Vec<&str> {
    functions(t)
        .into_iter()
        .filter(|f| *f != "TokenFunction")
        .collect()
}

/// The functions whose errors, throttles and durations are watched: all but the migrator,
/// which runs during deploys only (its failures fail the deploy).
fn app_functions(t: &Value) -> Vec<&str> {
    functions(t)
        .into_iter()
        .filter(|f| *f != "MigrateFunction")
        .collect()
}

/// The logical ids of the alarms that read `metric` (alone or as a term of metric math).
fn alarms_on<'a>(t: &'a Value, metric: &Watched) -> Vec<&'a str> {
    resources_of(t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .filter(|a| alarm_metrics(get(t, &["Resources", a])).contains(metric))
        .collect()
}

/// The single alarm on `metric`, checked to be a plain alarm with this statistic that fires
/// at `threshold` or more; returns its logical id.
fn the_alarm_on<'a>(t: &'a Value, metric: &Watched, statistic: &str) -> &'a str {
    let alarms = alarms_on(t, metric);
    assert_eq!(alarms.len(), 1, "one alarm on {metric:?}, found {alarms:?}");
    let alarm = alarms[0];
    let properties = get(t, &["Resources", alarm, "Properties"]);
    assert_eq!(
        get(properties, &["Statistic"]).as_str(),
        Some(statistic),
        "{alarm}: statistic"
    );
    alarm
}

#[test]
fn every_function_is_traced_with_x_ray() {
    let t = template();
    let globals = get(&t, &["Globals", "Function"]).get("Tracing");
    for function in functions(&t) {
        let own = get(&t, &["Resources", function, "Properties"]).get("Tracing");
        let tracing = own.or(globals).and_then(Value::as_str);
        assert_eq!(
            tracing,
            Some("Active"),
            "{function}: Tracing must be Active (its own or the Globals')"
        );
    }
}

/// Every function logs JSON lines at the level Lambda's advanced logging controls give it
/// (`AWS_LAMBDA_LOG_FORMAT` and `AWS_LAMBDA_LOG_LEVEL`, which the functions read first).
#[test]
fn every_function_logs_json_at_the_stacks_log_level() {
    let t = template();
    let globals = get(&t, &["Globals", "Function"]).get("LoggingConfig");
    let levels: Vec<&str> = get(&t, &["Parameters", "LogLevel", "AllowedValues"])
        .as_sequence()
        .expect("LogLevel's allowed values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(levels, ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"]);
    for function in functions(&t) {
        let own = get(&t, &["Resources", function, "Properties"]).get("LoggingConfig");
        let config = own
            .or(globals)
            .unwrap_or_else(|| panic!("{function}: no LoggingConfig"));
        assert_eq!(
            get(config, &["LogFormat"]).as_str(),
            Some("JSON"),
            "{function}"
        );
        assert!(
            is(get(config, &["ApplicationLogLevel"]), "!Ref", "LogLevel"),
            "{function}: ApplicationLogLevel must be the LogLevel parameter"
        );
    }
}

/// The access log: one JSON object per request whose values are all `$context` variables in
/// quotes (a variable without a value is written `-`, which unquoted would not be JSON), with
/// what an on-call engineer needs, in a log group the stack keeps `LogRetentionDays`.
#[test]
fn the_api_writes_json_access_logs_kept_like_the_functions_logs() {
    let t = template();
    let settings = get(
        &t,
        &[
            "Resources",
            "NotificationsApi",
            "Properties",
            "AccessLogSettings",
        ],
    );
    let format = get(settings, &["Format"])
        .as_str()
        .expect("the access log Format is plain text");
    let fields: serde_json::Map<String, serde_json::Value> = serde_json::from_str(format)
        .unwrap_or_else(|e| panic!("the access log format is not a JSON object ({e}): {format}"));
    let mut variables = Vec::new();
    for (key, value) in &fields {
        let text = value
            .as_str()
            .unwrap_or_else(|| panic!("access log field {key}: quote its variable ({value})"));
        assert!(
            text.starts_with("$context.") && !text.contains(char::is_whitespace),
            "access log field {key}: one $context variable, found {text:?}"
        );
        variables.push(text);
    }
    for wanted in [
        "$context.requestId",
        "$context.routeKey",
        "$context.status",
        "$context.responseLatency",
        "$context.integrationLatency",
        "$context.authorizer.error",
        "$context.integrationErrorMessage",
        "$context.identity.sourceIp",
        "$context.requestTime",
    ] {
        assert!(variables.contains(&wanted), "the access log lacks {wanted}");
    }

    let (tag, target) = tagged(get(settings, &["DestinationArn"]))
        .expect("DestinationArn is an !GetAtt of the stack's log group");
    assert_eq!(tag, "!GetAtt");
    let target = target.as_str().unwrap();
    let group = target
        .strip_suffix(".Arn")
        .unwrap_or_else(|| panic!("DestinationArn: !GetAtt <group>.Arn, found {target}"));
    assert_eq!(
        get(&t, &["Resources", group, "Type"]).as_str(),
        Some("AWS::Logs::LogGroup"),
        "{group} must be an AWS::Logs::LogGroup"
    );
    let kept = get(&t, &["Resources", group, "Properties", "RetentionInDays"]);
    let functions_kept = get(
        &t,
        &[
            "Resources",
            "IngestLogGroup",
            "Properties",
            "RetentionInDays",
        ],
    );
    assert!(
        is(kept, "!Ref", "LogRetentionDays") && is(functions_kept, "!Ref", "LogRetentionDays"),
        "{group} must be kept LogRetentionDays, as the functions' logs are"
    );
    assert!(
        get(&t, &["Resources", group]).get("Condition").is_none(),
        "{group} must always exist"
    );
}

/// The alarms an operator needs, each on the right metric: the backlog's age, the API's 5xx,
/// each function's throttles. The job metrics' alarms keep their logical ids and parameter
/// (existing stacks) with the metrics' new names.
#[test]
fn the_backlog_api_errors_and_throttles_are_alarmed_on() {
    let t = template();
    let service = [("Service", notify_core::worker::SERVICE)];

    let backlog = Watched::new(
        notify_core::worker::METRIC_NAMESPACE,
        "BacklogAgeSeconds",
        &service,
    );
    let alarm = the_alarm_on(&t, &backlog, "Maximum");
    let properties = get(&t, &["Resources", alarm, "Properties"]);
    assert!(
        is(
            get(properties, &["Threshold"]),
            "!Ref",
            "BacklogAgeAlarmThresholdSeconds"
        ),
        "{alarm}: Threshold !Ref BacklogAgeAlarmThresholdSeconds"
    );
    assert_eq!(
        parameter_default(&t, "BacklogAgeAlarmThresholdSeconds"),
        300
    );
    assert_eq!(
        get(properties, &["ComparisonOperator"]).as_str(),
        Some("GreaterThanThreshold")
    );

    let api = "!Ref NotificationsApi";
    let five_xx = Watched::new(
        "AWS/ApiGateway",
        "5xx",
        &[("ApiId", api), ("Stage", API_STAGE)],
    );
    let alarm = the_alarm_on(&t, &five_xx, "Sum");
    let properties = get(&t, &["Resources", alarm, "Properties"]);
    assert_eq!(number(get(properties, &["Threshold"])), 1, "{alarm}");
    assert_eq!(
        get(properties, &["ComparisonOperator"]).as_str(),
        Some("GreaterThanOrEqualToThreshold")
    );
    let stage = get(&t, &["Resources", "NotificationsApi", "Properties"]).get("StageName");
    assert!(
        stage.is_none() || stage.and_then(Value::as_str) == Some(API_STAGE),
        "the API's metrics are on Stage={API_STAGE} only while NotificationsApi has no other StageName"
    );

    for function in app_functions(&t) {
        let reference = format!("!Ref {function}");
        let throttles = Watched::new("AWS/Lambda", "Throttles", &[("FunctionName", &reference)]);
        let alarm = the_alarm_on(&t, &throttles, "Sum");
        let properties = get(&t, &["Resources", alarm, "Properties"]);
        assert_eq!(number(get(properties, &["Threshold"])), 1, "{alarm}");
        assert_eq!(
            get(properties, &["ComparisonOperator"]).as_str(),
            Some("GreaterThanOrEqualToThreshold"),
            "{alarm}"
        );
        assert_eq!(
            get(&t, &["Resources", alarm]).get("Condition"),
            get(&t, &["Resources", function]).get("Condition"),
            "{alarm} must exist whenever {function} does"
        );
    }

    // renamed metrics, unchanged logical ids and parameter
    for (alarm, metric) in [
        ("DeadJobsAlarm", "Dead"),
        ("HeldJobsAlarm", "Held"),
        ("ExpiredJobsAlarm", "Expired"),
    ] {
        assert_eq!(
            alarm_metrics(get(&t, &["Resources", alarm])),
            vec![Watched::new(
                notify_core::worker::METRIC_NAMESPACE,
                metric,
                &service
            )],
            "{alarm} reads {metric}"
        );
    }
    assert!(is(
        get(
            &t,
            &["Resources", "DeadJobsAlarm", "Properties", "Threshold"]
        ),
        "!Ref",
        "DeadJobsAlarmThreshold"
    ));
}

/// No alarm reads the worker's Duration: a worker lingers while jobs flow, so under steady
/// traffic it runs to its deadline and hands over by design, and a long invocation says
/// nothing wrong. A backlog that waits shows in BacklogAgeAlarm; an invocation Lambda stopped
/// at its timeout counts in the worker's Errors (WorkerErrorsAlarm).
#[test]
fn no_alarm_reads_the_workers_duration() {
    let t = template();
    let duration = Watched::new(
        "AWS/Lambda",
        "Duration",
        &[("FunctionName", "!Ref WorkerFunction")],
    );
    assert_eq!(alarms_on(&t, &duration), Vec::<&str>::new());
    let errors = Watched::new(
        "AWS/Lambda",
        "Errors",
        &[("FunctionName", "!Ref WorkerFunction")],
    );
    assert_eq!(alarms_on(&t, &errors), vec!["WorkerErrorsAlarm"]);
}

/// A metric a dashboard widget draws: namespace, name, dimensions and statistic.
#[derive(Debug)]
struct Drawn {
    namespace: String,
    metric: String,
    dimensions: Vec<(String, String)>,
    stat: String,
}

/// The `${...}` references of an `!Sub` text.
fn sub_references(text: &str) -> Vec<&str> {
    text.match_indices("${")
        .filter(|(i, _)| !text[i + 2..].starts_with('!'))
        .map(|(i, _)| {
            let rest = &text[i + 2..];
            &rest[..rest.find('}').expect("a closed ${...}")]
        })
        .collect()
}

/// The dashboard's body with each `${...}` replaced: a parameter by its default, anything
/// else by `<name>`; every reference must resolve to a parameter, an unconditional resource
/// (and one of its attributes) or a pseudo parameter.
fn dashboard_body(t: &Value) -> (serde_json::Value, Vec<String>) {
    let dashboards = resources_of(t, "AWS::CloudWatch::Dashboard");
    assert_eq!(dashboards.len(), 1, "one dashboard: {dashboards:?}");
    let body = get(
        t,
        &["Resources", dashboards[0], "Properties", "DashboardBody"],
    );
    let (tag, text) = tagged(body).expect("DashboardBody is an !Sub");
    assert_eq!(
        tag, "!Sub",
        "DashboardBody: !Sub (names and ids must resolve)"
    );
    let mut text = text.as_str().expect("an !Sub of one text").to_owned();
    let references: Vec<String> = sub_references(&text)
        .into_iter()
        .map(str::to_owned)
        .collect();
    for reference in &references {
        let replacement = if reference.starts_with("AWS::") {
            format!("<{reference}>")
        } else if let Some(parameter) = t.get("Parameters").and_then(|p| p.get(reference)) {
            let default = get(parameter, &["Default"]);
            match default {
                Value::Number(n) => n.to_string(),
                other => other.as_str().unwrap_or_default().to_owned(),
            }
        } else {
            let resource = reference.split('.').next().unwrap();
            let r = t
                .get("Resources")
                .and_then(|r| r.get(resource))
                .unwrap_or_else(|| panic!("dashboard: ${{{reference}}} names nothing"));
            assert!(
                r.get("Condition").is_none(),
                "dashboard: ${{{reference}}} names {resource}, which may not exist (Condition)"
            );
            format!("<{reference}>")
        };
        text = text.replace(&format!("${{{reference}}}"), &replacement);
    }
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the dashboard body is not JSON ({e}):\n{text}"));
    (json, references)
}

/// Every metric the dashboard's metric widgets draw, and the metric-math expressions.
fn drawn(body: &serde_json::Value) -> (Vec<Drawn>, Vec<String>) {
    let mut metrics = Vec::new();
    let mut expressions = Vec::new();
    for widget in body["widgets"].as_array().expect("widgets") {
        if widget["type"] != "metric" {
            continue;
        }
        let properties = &widget["properties"];
        assert_eq!(
            properties["region"], "<AWS::Region>",
            "widget {}: region ${{AWS::Region}}",
            properties["title"]
        );
        for row in properties["metrics"].as_array().expect("metrics") {
            let row = row.as_array().expect("a metric row is an array");
            let options = row.last().and_then(serde_json::Value::as_object);
            if let Some(expression) = options.and_then(|o| o.get("expression")) {
                expressions.push(expression.as_str().unwrap().to_owned());
                continue;
            }
            let names: Vec<&str> = row.iter().map_while(serde_json::Value::as_str).collect();
            assert!(
                names.len() >= 2 && names.len().is_multiple_of(2),
                "widget {}: a row is namespace, metric and dimension pairs: {row:?}",
                properties["title"]
            );
            let stat = options
                .and_then(|o| o.get("stat"))
                .or(properties.get("stat"))
                .and_then(serde_json::Value::as_str)
                .unwrap_or("Average");
            metrics.push(Drawn {
                namespace: names[0].to_owned(),
                metric: names[1].to_owned(),
                dimensions: names[2..]
                    .chunks(2)
                    .map(|d| (d[0].to_owned(), d[1].to_owned()))
                    .collect(),
                stat: stat.to_owned(),
            });
        }
    }
    (metrics, expressions)
}

#[test]
fn the_dashboard_shows_every_metric_and_every_functions_errors_throttles_and_durations() {
    let t = template();
    let (body, _) = dashboard_body(&t);
    let widgets = body["widgets"].as_array().expect("widgets");
    // on the 24-column grid, none hiding another
    let mut placed: Vec<(i64, i64, i64, i64)> = Vec::new();
    for widget in widgets {
        let at = |key: &str| {
            widget[key]
                .as_i64()
                .unwrap_or_else(|| panic!("widget {widget}: {key}"))
        };
        let (x, y, w, h) = (at("x"), at("y"), at("width"), at("height"));
        assert!(
            x >= 0 && w > 0 && x + w <= 24 && y >= 0 && h > 0,
            "{widget}"
        );
        for (px, py, pw, ph) in &placed {
            let apart = x + w <= *px || *px + pw <= x || y + h <= *py || *py + ph <= y;
            assert!(
                apart,
                "widget {} overlaps another",
                widget["properties"]["title"]
            );
        }
        placed.push((x, y, w, h));
    }

    let (metrics, expressions) = drawn(&body);
    let shows = |namespace: &str, metric: &str, dimensions: &[(&str, &str)], stat: Option<&str>| {
        metrics.iter().any(|d| {
            d.namespace == namespace
                && d.metric == metric
                && d.dimensions.len() == dimensions.len()
                && dimensions
                    .iter()
                    .all(|(n, v)| d.dimensions.contains(&((*n).to_owned(), (*v).to_owned())))
                && stat.is_none_or(|s| d.stat == s)
        })
    };

    let service = [("Service", notify_core::worker::SERVICE)];
    for metric in WORKER_METRICS
        .into_iter()
        .chain(EVENT_METRICS)
        .chain(PACE_METRICS)
        .chain(SWEEPER_METRICS)
        .chain(FEEDBACK_METRICS)
        .chain(INGEST_METRICS)
        .chain(notify_core::fleet::FLEET_METRICS)
    {
        assert!(
            shows(
                notify_core::worker::METRIC_NAMESPACE,
                metric,
                &service,
                None
            ),
            "the dashboard does not show {metric} (Service={})",
            notify_core::worker::SERVICE
        );
    }
    assert!(
        expressions.iter().any(|e| {
            e.starts_with("SEARCH(")
                && e.contains(r#"MetricName="Refused""#)
                && e.contains(&format!("{{{},", notify_core::worker::METRIC_NAMESPACE))
                && e.contains("Code")
        }),
        "the dashboard does not show Refused by Code (a SEARCH over the Code dimension)"
    );

    // the provider latencies are value arrays: their percentiles are CloudWatch's own
    for metric in ["SmsProviderLatency", "EmailProviderLatency"] {
        for stat in ["p50", "p99"] {
            assert!(
                shows(
                    notify_core::worker::METRIC_NAMESPACE,
                    metric,
                    &service,
                    Some(stat)
                ),
                "the dashboard does not show {metric} {stat}"
            );
        }
    }
    for state in notify_core::telemetry::emf::QUEUE_STATES {
        assert!(
            shows(
                notify_core::worker::METRIC_NAMESPACE,
                notify_core::telemetry::emf::QUEUE_DEPTH,
                &[("Service", notify_core::worker::SERVICE), ("State", state)],
                None
            ),
            "the dashboard does not show the queue's {state} jobs"
        );
    }

    // a function of an optional feature is not on the dashboard, whose body cannot hold a
    // widget only when the feature is on: its alarms watch its errors and throttles
    for function in app_functions(&t)
        .into_iter()
        .filter(|f| get(&t, &["Resources", f]).get("Condition").is_none())
    {
        let name = format!("<{function}>");
        let dimension = [("FunctionName", name.as_str())];
        for metric in ["Errors", "Throttles"] {
            assert!(
                shows("AWS/Lambda", metric, &dimension, Some("Sum")),
                "the dashboard does not show {function}'s {metric} (Sum)"
            );
        }
        for stat in ["p50", "p99", "Maximum"] {
            assert!(
                shows("AWS/Lambda", "Duration", &dimension, Some(stat)),
                "the dashboard does not show {function}'s Duration {stat}"
            );
        }
    }

    let api = [("ApiId", "<NotificationsApi>"), ("Stage", API_STAGE)];
    for metric in ["4xx", "5xx", "Count"] {
        assert!(
            shows("AWS/ApiGateway", metric, &api, Some("Sum")),
            "the dashboard does not show the API's {metric} (Sum)"
        );
    }
    for stat in ["p50", "p99"] {
        assert!(
            shows("AWS/ApiGateway", "Latency", &api, Some(stat)),
            "the dashboard does not show the API's Latency {stat}"
        );
    }
}

/// The dashboard's alarm widget lists every alarm that always exists.
#[test]
fn the_dashboard_lists_every_alarm() {
    let t = template();
    let (body, _) = dashboard_body(&t);
    let listed: Vec<&str> = body["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["type"] == "alarm")
        .flat_map(|w| w["properties"]["alarms"].as_array().unwrap())
        .map(|a| a.as_str().unwrap())
        .collect();
    for alarm in resources_of(&t, "AWS::CloudWatch::Alarm") {
        if get(&t, &["Resources", alarm]).get("Condition").is_some() {
            continue;
        }
        let arn = format!("<{alarm}.Arn>");
        assert!(
            listed.contains(&arn.as_str()),
            "the dashboard's alarm widget lacks {alarm}"
        );
    }
}

/// The HTTP API throttles every route from two parameters, before Lambda: a burst never
/// reaches ingest and PostgreSQL, whatever the per-organization limit says.
#[test]
fn the_api_throttles_at_the_edge_from_parameters() {
    let t = template();
    let settings = get(
        &t,
        &[
            "Resources",
            "NotificationsApi",
            "Properties",
            "DefaultRouteSettings",
        ],
    );
    for (setting, parameter) in [
        ("ThrottlingRateLimit", "ApiThrottlingRateLimit"),
        ("ThrottlingBurstLimit", "ApiThrottlingBurstLimit"),
    ] {
        assert_eq!(
            parameter_ref(get(settings, &[setting])).as_deref(),
            Some(parameter),
            "{setting}"
        );
        assert!(parameter_default(&t, parameter) >= 1, "{parameter}");
        assert_eq!(
            number(get(&t, &["Parameters", parameter, "MinValue"])),
            1,
            "{parameter}: 0 would refuse every request"
        );
    }
    assert!(
        parameter_default(&t, "ApiThrottlingBurstLimit")
            >= parameter_default(&t, "ApiThrottlingRateLimit"),
        "the bucket holds at least a second of the steady rate"
    );
}

// --- tokens ------------------------------------------------------------------------------------

/// A value of the template with the parameters `given` (the rest at their defaults), for the
/// intrinsics the authorizer's settings use: !Ref of a parameter, !If, !Join, !Split, !Sub.
/// A !Ref of a resource, and a !Sub's resource references, stay as `<Name>`.
fn resolve(t: &Value, value: &Value, given: &[(&str, &str)]) -> serde_json::Value {
    use serde_json::{Value as J, json};
    let param = |name: &str| -> Option<J> {
        let declared = get(t, &["Parameters"]).get(name)?;
        let text = given
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
            .or_else(|| {
                declared
                    .get("Default")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("parameter {name} has no value"));
        Some(
            if get(declared, &["Type"]).as_str() == Some("CommaDelimitedList") {
                json!(text.split(',').collect::<Vec<_>>())
            } else {
                json!(text)
            },
        )
    };
    let condition = |name: &str| -> bool {
        match name {
            "CognitoEnabled" => resolve(t, &param_ref("CognitoUserPool"), given) == json!("true"),
            "HasCognitoClients" => {
                let list = resolve(t, &param_ref("CognitoClientOrganizations"), given);
                list.as_array().unwrap().iter().any(|v| v != "")
            }
            other => panic!("condition {other}: not evaluated here"),
        }
    };
    let Some((tag, inner)) = tagged(value) else {
        return match value {
            Value::Sequence(items) => {
                J::Array(items.iter().map(|v| resolve(t, v, given)).collect())
            }
            Value::String(s) => json!(s),
            other => panic!("not evaluated here: {other:?}"),
        };
    };
    let args = as_list(inner);
    let text = |v: &Value| resolve(t, v, given).as_str().unwrap().to_owned();
    match tag.as_str() {
        "!Ref" => {
            let name = inner.as_str().unwrap();
            param(name).unwrap_or_else(|| json!(format!("<{name}>")))
        }
        "!If" => {
            let branch = if condition(args[0].as_str().unwrap()) {
                args[1]
            } else {
                args[2]
            };
            resolve(t, branch, given)
        }
        "!Join" => {
            let items = resolve(t, args[1], given);
            let parts: Vec<&str> = items
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            json!(parts.join(args[0].as_str().unwrap()))
        }
        "!Split" => json!(
            text(args[1])
                .split(args[0].as_str().unwrap())
                .collect::<Vec<_>>()
        ),
        "!Sub" => {
            let mut out = inner.as_str().unwrap().to_owned();
            while let Some(start) = out.find("${") {
                let end = start + out[start..].find('}').unwrap();
                let name = &out[start + 2..end];
                let value = param(name)
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| format!("<{name}>"));
                out.replace_range(start..=end, &value);
            }
            json!(out)
        }
        other => panic!("{other}: not evaluated here"),
    }
}

fn param_ref(name: &str) -> Value {
    serde_yaml_ng::from_str(&format!("!Ref {name}")).unwrap()
}

/// With the stack's own user pool, API Gateway trusts that pool's tokens from exactly the app
/// clients mapped to an organization, whose org_id the trigger adds; without it, the given
/// issuer and audience.
#[test]
fn the_authorizer_trusts_the_stacks_user_pool_and_its_mapped_clients() {
    let t = template();
    let jwt = get(
        &t,
        &[
            "Resources",
            "NotificationsApi",
            "Properties",
            "Auth",
            "Authorizers",
            "OrgJwt",
            "JwtConfiguration",
        ],
    );
    let (issuer, audience) = (get(jwt, &["issuer"]), get(jwt, &["audience"]));

    let oidc = [
        ("JwtIssuer", "https://id.example.com/"),
        ("JwtAudience", "notifications,other"),
    ];
    assert_eq!(resolve(&t, issuer, &oidc), "https://id.example.com/");
    assert_eq!(
        resolve(&t, audience, &oidc),
        serde_json::json!(["notifications", "other"])
    );

    let org = "0190d6a2-7b3c-7def-8a12-3456789abcde";
    let mapping = format!("1example23456789abcdefghij={org},2another0client0id000000000={org}");
    let cognito = [
        ("CognitoUserPool", "true"),
        ("CognitoClientOrganizations", mapping.as_str()),
    ];
    assert_eq!(
        resolve(&t, issuer, &cognito),
        "https://cognito-idp.<AWS::Region>.amazonaws.com/<UserPool>"
    );
    let accepted = resolve(&t, audience, &cognito);
    let accepted: Vec<&str> = accepted
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for client in ["1example23456789abcdefghij", "2another0client0id000000000"] {
        assert!(
            accepted.contains(&client),
            "{client} is not in the audience {accepted:?}"
        );
    }
    // the rest of the list is organization ids, which no Cognito app client id can be
    for extra in accepted
        .iter()
        .filter(|a| !a.contains("client") && !a.contains("example"))
    {
        assert!(
            uuid::Uuid::parse_str(extra).is_ok(),
            "{extra} in the audience {accepted:?}"
        );
    }
    // the trigger reads the same map
    assert_eq!(
        resolve(
            &t,
            env_var(&t, "TokenFunction", "CLIENT_ORGANIZATIONS"),
            &cognito
        ),
        mapping.as_str()
    );
    assert_eq!(
        get(&t, &["Parameters", "CognitoClientOrganizations", "Type"]).as_str(),
        Some("CommaDelimitedList")
    );
    assert_eq!(
        notify_api::auth::CLIENT_ORGANIZATIONS_VAR,
        "CLIENT_ORGANIZATIONS"
    );

    // no client mapped yet: no token is accepted
    let none = [("CognitoUserPool", "true")];
    assert_eq!(
        resolve(&t, audience, &none),
        serde_json::json!(["no-app-client-mapped-yet"])
    );

    // the pool runs the trigger on every token, with the event that reaches client credentials
    let pool = get(&t, &["Resources", "UserPool", "Properties"]);
    let trigger = get(pool, &["LambdaConfig", "PreTokenGenerationConfig"]);
    assert!(
        is(get(trigger, &["LambdaArn"]), "!GetAtt", "TokenFunction.Arn"),
        "{trigger:?}"
    );
    assert_eq!(get(trigger, &["LambdaVersion"]).as_str(), Some("V3_0"));
    assert_eq!(get(pool, &["UserPoolTier"]).as_str(), Some("ESSENTIALS"));
    let permission = get(
        &t,
        &["Resources", "TokenFunctionCognitoPermission", "Properties"],
    );
    assert_eq!(
        get(permission, &["Principal"]).as_str(),
        Some("cognito-idp.amazonaws.com")
    );
    assert!(is(
        get(permission, &["SourceArn"]),
        "!GetAtt",
        "UserPool.Arn"
    ));
}
