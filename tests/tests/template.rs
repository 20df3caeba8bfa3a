//! Checks on template.yaml that cfn-lint cannot make: the settings that must agree across
//! functions do agree, every function waits for the migrations and may read the database
//! secret, and the optional RDS Proxy comes with its pinning alarm.
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
    for function in ["WorkerFunction", "SweeperFunction"] {
        let variables = get(
            &t,
            &[
                "Resources",
                function,
                "Properties",
                "Environment",
                "Variables",
            ],
        );
        assert!(
            variables.get("ALLOW_ORG_HEADER").is_none(),
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
            let concrete = path.replace("{id}", &id);
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

/// Every job metric the worker and the sweeper emit has an alarm on it: nothing dies,
/// expires or is held silently.
#[test]
fn every_job_metric_has_an_alarm() {
    let t = template();
    let resources = get(&t, &["Resources"]).as_mapping().unwrap();
    for metric in shared::worker::JOB_METRICS {
        let alarmed = resources.values().any(|r| {
            r.get("Type").and_then(Value::as_str) == Some("AWS::CloudWatch::Alarm")
                && r.get("Properties")
                    .and_then(|p| p.get("MetricName"))
                    .and_then(Value::as_str)
                    == Some(metric)
                && r.get("Properties")
                    .and_then(|p| p.get("Namespace"))
                    .and_then(Value::as_str)
                    == Some(shared::worker::METRIC_NAMESPACE)
        });
        assert!(alarmed, "no alarm on {metric}");
    }
}
