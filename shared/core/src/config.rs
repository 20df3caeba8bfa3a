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

/// Where settings are read from: the process environment ([`Vars::process`]) or, in tests,
/// any lookup ([`Vars::new`]), so a test never has to change the process environment.
#[derive(Clone, Copy)]
pub struct Vars<'a> {
    lookup: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

fn process_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl<'a> Vars<'a> {
    pub fn new(lookup: &'a (dyn Fn(&str) -> Option<String> + Sync)) -> Self {
        Self { lookup }
    }

    /// The process environment.
    pub fn process() -> Vars<'static> {
        Vars {
            lookup: &process_var,
        }
    }

    /// The variable's value, or `None` when unset or empty.
    pub fn optional(&self, name: &'static str) -> Option<String> {
        (self.lookup)(name).filter(|v| !v.trim().is_empty())
    }

    /// The variable's value, or a [`ConfigError::Missing`] with the given hint.
    pub fn required(&self, name: &'static str, hint: &'static str) -> Result<String, ConfigError> {
        self.optional(name)
            .ok_or(ConfigError::Missing { name, hint })
    }

    /// Parses the variable, using `default` when it is unset; `allowed` bounds the value.
    pub fn parse_or<T>(
        &self,
        name: &'static str,
        default: T,
        allowed: std::ops::RangeInclusive<T>,
    ) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + std::fmt::Display + Copy,
        T::Err: std::fmt::Display,
    {
        let Some(raw) = self.optional(name) else {
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
    pub fn flag(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self
            .optional(name)
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
}

/// A lookup over fixed pairs (tests).
pub fn pairs<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + Sync + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_or_uses_default_and_checks_range() {
        let lookup = pairs(&[("RANGE", "11"), ("NUM", "ten"), ("EMPTY", " ")]);
        let vars = Vars::new(&lookup);
        assert_eq!(vars.parse_or("UNSET", 7u32, 1..=10).unwrap(), 7);
        assert_eq!(vars.parse_or("EMPTY", 7u32, 1..=10).unwrap(), 7);
        let err = vars.parse_or("RANGE", 7u32, 1..=10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "RANGE=\"11\" is invalid: must be between 1 and 10"
        );
        assert!(
            vars.parse_or("NUM", 7u32, 1..=10)
                .unwrap_err()
                .to_string()
                .contains("NUM")
        );
    }

    #[test]
    fn flags_take_the_usual_spellings_and_name_a_bad_one() {
        let lookup = pairs(&[("A", "YES"), ("B", "0"), ("C", "maybe")]);
        let vars = Vars::new(&lookup);
        assert!(vars.flag("A", false).unwrap());
        assert!(!vars.flag("B", true).unwrap());
        assert!(vars.flag("UNSET", true).unwrap());
        assert!(
            vars.flag("C", true)
                .unwrap_err()
                .to_string()
                .starts_with("C=\"maybe\"")
        );
    }
}
