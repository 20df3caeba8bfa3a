//! The deploy path as far as it runs without an AWS account: samconfig.toml's defaults, the
//! Makefile's guided-once deploy around them, and the release profile the Lambda build uses.
//! (`sam validate --lint`, in CI's template step, reads the same samconfig.toml.)

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn samconfig() -> toml::Table {
    let text = std::fs::read_to_string(root().join("samconfig.toml")).expect("samconfig.toml");
    text.parse().expect("samconfig.toml is TOML")
}

fn setting<'a>(config: &'a toml::Table, path: &[&str]) -> &'a toml::Value {
    let mut value = config
        .get(path[0])
        .unwrap_or_else(|| panic!("samconfig.toml has no {}", path[0]));
    for key in &path[1..] {
        value = value
            .get(key)
            .unwrap_or_else(|| panic!("samconfig.toml has no {}", path.join(".")));
    }
    value
}

#[test]
fn samconfig_holds_safe_defaults_and_no_secret() {
    let config = samconfig();
    assert_eq!(setting(&config, &["version"]).as_float(), Some(0.1));
    let stack = setting(&config, &["default", "global", "parameters", "stack_name"]);
    let dev = setting(&config, &["dev", "global", "parameters", "stack_name"]);
    assert_ne!(stack, dev, "make sync never targets the default stack");
    let deploy = setting(&config, &["default", "deploy", "parameters"]);
    assert_eq!(deploy["capabilities"].as_str(), Some("CAPABILITY_IAM"));
    assert_eq!(
        deploy["confirm_changeset"].as_bool(),
        Some(true),
        "a deploy shows its change set first"
    );
    assert!(
        deploy.get("parameter_overrides").is_none(),
        "the committed file is the guided deploy's starting point: no stack's parameters"
    );
    // the settings, comments left out
    let settings: String = std::fs::read_to_string(root().join("samconfig.toml"))
        .unwrap()
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .map(|line| line.to_lowercase() + "\n")
        .collect();
    for word in ["password", "secret_access", "arn:aws", "aws_access_key"] {
        assert!(
            !settings.contains(word),
            "samconfig.toml must hold no {word}"
        );
    }
}

#[test]
fn make_deploy_is_guided_only_until_the_parameters_are_saved() {
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    let deploy = makefile
        .split("\ndeploy:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a deploy target");
    let saved = deploy
        .find("grep -q '^parameter_overrides' samconfig.toml")
        .expect("the deploy checks for saved parameters");
    let guided = deploy.find("--guided").expect("a guided deploy");
    let plain = deploy
        .find("sam deploy --config-env")
        .expect("a plain deploy");
    assert!(saved < plain && plain < guided, "{deploy}");
    for target in ["\nlogs:", "\nsync:", "\ndelete:"] {
        assert!(makefile.contains(target), "the Makefile has {target}");
    }
}

/// `cargo lambda build` (what `sam build` runs for a `rust-cargolambda` function) adds
/// `--config profile.release.panic="abort"` unless the workspace's release profile names a
/// panic strategy. The worker catches a panic inside one delivery and records the rest of its
/// batch (shared/core's worker, `catch_unwind`), which needs unwinding: under abort, one
/// panicking delivery would kill the invocation and leave its whole batch to the sweeper.
#[test]
fn the_lambda_build_keeps_unwinding() {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let manifest: toml::Table = text.parse().expect("Cargo.toml is TOML");
    let panic = manifest
        .get("profile")
        .and_then(|p| p.get("release"))
        .and_then(|r| r.get("panic"))
        .and_then(toml::Value::as_str);
    assert_eq!(
        panic,
        Some("unwind"),
        "[profile.release] must say panic = \"unwind\": cargo lambda builds with abort otherwise"
    );
}
