//! compose.yaml, the docker path of local development (`make db/up DB=docker`). No Docker
//! engine runs here, so what can be checked without one is: the file against the Compose
//! Specification's own JSON Schema (tests/fixtures/compose-spec.json, from
//! compose-spec/compose-spec), and that it agrees with what the Makefile and the scripts
//! expect of it, and that the scripts verify the SES sender in a stand-in they did not start.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn compose() -> Value {
    let text = std::fs::read_to_string(root().join("compose.yaml")).expect("compose.yaml");
    serde_yaml_ng::from_str(&text).expect("compose.yaml is YAML")
}

/// The project's problems with a compose file, by the Compose Specification's schema.
fn spec_errors(file: &Value) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("tests/fixtures/compose-spec.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    let validator = jsonschema::draft7::new(&schema).expect("the Compose schema compiles");
    validator
        .iter_errors(file)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn compose_yaml_follows_the_compose_specification() {
    let errors = spec_errors(&compose());
    assert!(errors.is_empty(), "{errors:#?}");
    // the check can fail: an unknown key, or a port of the wrong type, is refused
    let mut broken = compose();
    broken["services"]["db"]["healthcheck"]["retrys"] = 3.into();
    broken["services"]["db"]["ports"] = serde_json::json!({"5432": 5432});
    let errors = spec_errors(&broken);
    assert!(errors.len() >= 2, "{errors:#?}");
}

/// The `major` of a `postgres:major` image.
fn postgres_major(image: &str) -> u32 {
    image
        .strip_prefix("postgres:")
        .and_then(|tag| tag.split(['.', '-']).next())
        .and_then(|major| major.parse().ok())
        .unwrap_or_else(|| panic!("db's image is postgres:<major>…, not {image}"))
}

#[test]
fn the_database_is_what_the_makefile_and_the_tests_expect() {
    let file = compose();
    let db = &file["services"]["db"];
    let major = postgres_major(db["image"].as_str().unwrap());
    let snapshot = std::fs::read_to_string(root().join("shared/postgres/schema.sql")).unwrap();
    assert!(
        snapshot
            .lines()
            .next()
            .unwrap()
            .contains(&format!("(PostgreSQL {major},")),
        "the container's PostgreSQL {major} is the one schema.sql was written with, so the \
         schema test compares against it"
    );
    let health = db["healthcheck"]["test"].to_string();
    assert!(health.contains("pg_isready"), "{health}");
    assert!(
        db["volumes"][0]
            .as_str()
            .unwrap()
            .starts_with("pgdata:/var/lib/postgresql/data"),
        "a named volume keeps the data"
    );
    assert!(file["volumes"].get("pgdata").is_some());
    let command = db["command"].to_string();
    assert!(
        command.contains("max_connections=400"),
        "the tests open many connections: {command}"
    );
    // published on loopback only, on the port the Makefile's DATABASE_URL names
    let port = db["ports"][0].as_str().unwrap();
    assert!(port.starts_with("127.0.0.1:"), "{port}");
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    let setting = |name: &str| {
        makefile
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ?= ")))
            .or_else(|| {
                makefile
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{name} := ")))
            })
            .unwrap_or_else(|| panic!("the Makefile sets {name}"))
            .to_owned()
    };
    let default_port = setting("DOCKER_DB_PORT");
    assert!(
        port.contains(&format!("${{NOTIF_DB_PORT:-{default_port}}}:5432")),
        "{port} vs DOCKER_DB_PORT {default_port}"
    );
    let env = &db["environment"];
    let url = setting("DOCKER_DATABASE_URL").replace("$(DOCKER_DB_PORT)", &default_port);
    let expected = format!(
        "postgres://{}:{}@127.0.0.1:{default_port}/{}?sslmode=disable",
        env["POSTGRES_USER"].as_str().unwrap(),
        env["POSTGRES_PASSWORD"].as_str().unwrap(),
        env["POSTGRES_DB"].as_str().unwrap()
    );
    assert_eq!(url, expected);
}

#[test]
fn the_stand_in_container_is_the_moto_the_scripts_install() {
    let file = compose();
    let moto = &file["services"]["moto"];
    let image = moto["image"].as_str().unwrap();
    let services = std::fs::read_to_string(root().join("tests/scripts/services.sh")).unwrap();
    let pinned = services
        .lines()
        .find_map(|l| l.strip_prefix("MOTO_VERSION=${MOTO_VERSION:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .expect("services.sh pins moto");
    assert_eq!(image, format!("motoserver/moto:{pinned}"));
    assert_eq!(moto["profiles"][0], "stand-in", "started only when asked");
    assert!(moto["ports"][0].as_str().unwrap().starts_with("127.0.0.1:"));
}

/// The SES identities the stand-in holds.
async fn identities() -> Vec<String> {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .load()
        .await;
    aws_sdk_sesv2::Client::new(&sdk)
        .list_email_identities()
        .send()
        .await
        .expect("list the stand-in's SES identities")
        .email_identities()
        .iter()
        .filter_map(|i| i.identity_name().map(str::to_owned))
        .collect()
}

/// `stand_in_verify_sender ADDRESS` from a shell whose scripts started no stand-in, with
/// `AWS_ENDPOINT_URL` naming `endpoint` (as for moto's container): its exit status.
fn verify_sender_via(endpoint: &str, address: &str) -> std::process::ExitStatus {
    let state = std::env::temp_dir().join(format!("notif-verify-{}", uuid::Uuid::new_v4()));
    std::process::Command::new("bash")
        .current_dir(root())
        .args([
            "-c",
            ". tests/scripts/services.sh && stand_in_verify_sender \"$1\"",
            "verify",
            address,
        ])
        .env("NOTIF_STATE", &state)
        .env("AWS_ENDPOINT_URL", endpoint)
        .status()
        .expect("run bash")
}

/// The sender is verified in a moto the scripts did not start (its container, say), found
/// by its own API; an endpoint that is not moto is left alone.
#[tokio::test]
async fn the_sender_is_verified_in_a_stand_in_the_scripts_did_not_start() {
    let domain = format!("ext-{}.example", uuid::Uuid::new_v4().simple());
    let endpoint = integration_tests::stand_in::endpoint();
    assert!(!identities().await.contains(&domain));
    let status = verify_sender_via(&endpoint, &format!("Sender <noreply@{domain}>"));
    assert!(status.success(), "{status}");
    assert!(identities().await.contains(&domain), "{domain} verified");
    // not moto: nothing is asked of it, and nothing fails
    let other = format!("not-{}.example", uuid::Uuid::new_v4().simple());
    let status = verify_sender_via("http://127.0.0.1:9", &format!("noreply@{other}"));
    assert!(status.success(), "{status}");
    assert!(!identities().await.contains(&other));
}
