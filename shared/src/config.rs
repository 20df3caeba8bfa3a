//! Reading configuration from environment variables, validated at cold start.

use std::str::FromStr;

/// A variable is set but its value cannot be used. The message names the variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name}={value:?} is invalid: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: String,
    },
    #[error("{name} is required: {hint}")]
    Missing {
        name: &'static str,
        hint: &'static str,
    },
    #[error("{0}")]
    Conflict(String),
}

/// The variable's value, or `None` when unset or empty.
pub fn optional(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The variable's value, or a [`ConfigError::Missing`] with the given hint.
pub fn required(name: &'static str, hint: &'static str) -> Result<String, ConfigError> {
    optional(name).ok_or(ConfigError::Missing { name, hint })
}

/// Parses the variable, using `default` when it is unset; `allowed` bounds the value.
pub fn parse_or<T>(
    name: &'static str,
    default: T,
    allowed: std::ops::RangeInclusive<T>,
) -> Result<T, ConfigError>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
    T::Err: std::fmt::Display,
{
    let Some(raw) = optional(name) else {
        return Ok(default);
    };
    let invalid = |reason: String| ConfigError::Invalid {
        name,
        value: raw.clone(),
        reason,
    };
    let value: T = raw
        .trim()
        .parse()
        .map_err(|e: T::Err| invalid(e.to_string()))?;
    if !allowed.contains(&value) {
        return Err(invalid(format!(
            "must be between {} and {}",
            allowed.start(),
            allowed.end()
        )));
    }
    Ok(value)
}

/// Parses a boolean flag (`true`/`false`, `1`/`0`, `yes`/`no`), `default` when unset.
pub fn flag(name: &'static str, default: bool) -> Result<bool, ConfigError> {
    match optional(name)
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None => Ok(default),
        Some("true" | "1" | "yes") => Ok(true),
        Some("false" | "0" | "no") => Ok(false),
        Some(other) => Err(ConfigError::Invalid {
            name,
            value: other.to_owned(),
            reason: "expected true or false".into(),
        }),
    }
}

/// Installs the JSON log format every function uses (one JSON object per line,
/// level from `RUST_LOG`, default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_target(false)
        .without_time() // CloudWatch stamps every line
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_or_uses_default_and_checks_range() {
        assert_eq!(parse_or("NOTIF_TEST_UNSET_VAR", 7u32, 1..=10).unwrap(), 7);
        std::env::set_var("NOTIF_TEST_RANGE_VAR", "11");
        let err = parse_or("NOTIF_TEST_RANGE_VAR", 7u32, 1..=10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "NOTIF_TEST_RANGE_VAR=\"11\" is invalid: must be between 1 and 10"
        );
        std::env::set_var("NOTIF_TEST_NUM_VAR", "ten");
        assert!(parse_or("NOTIF_TEST_NUM_VAR", 7u32, 1..=10)
            .unwrap_err()
            .to_string()
            .contains("NOTIF_TEST_NUM_VAR"));
    }
}
