//! Checks on template.yaml that cfn-lint cannot make: the settings that must agree across
//! functions do agree.
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
    for (resource, package) in [
        ("IngestFunction", "ingest"),
        ("WorkerFunction", "worker"),
        ("SweeperFunction", "sweeper"),
    ] {
        let r = get(&t, &["Resources", resource]);
        assert_eq!(
            get(r, &["Metadata", "BuildMethod"]).as_str(),
            Some("rust-cargolambda")
        );
        assert_eq!(
            get(r, &["Metadata", "BuildProperties", "Binary"]).as_str(),
            Some(package)
        );
        let code_uri = format!("functions/{package}");
        assert_eq!(
            get(r, &["Properties", "CodeUri"]).as_str(),
            Some(code_uri.as_str())
        );
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(&code_uri)
            .join("Cargo.toml");
        assert!(manifest.is_file(), "{} is missing", manifest.display());
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
fn every_api_route_is_in_the_template() {
    let template = template();
    let events = get(
        &template,
        &["Resources", "IngestFunction", "Properties", "Events"],
    );
    let mut routes: Vec<(String, String)> = events
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
    routes.sort();
    let mut expected = vec![
        ("POST", "/notifications"),
        ("GET", "/notifications"),
        ("POST", "/notifications/batch"),
        ("GET", "/notifications/{id}"),
        ("POST", "/notifications/{id}/cancel"),
        ("POST", "/notifications/{id}/requeue"),
    ];
    expected.sort();
    let expected: Vec<(String, String)> = expected
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
        .collect();
    assert_eq!(routes, expected);
}
