//! Percentiles, rounding for the `BENCH` line, and CPU time.

use std::time::Duration;

use notify_core::stats::nearest_rank;
use serde::{Serialize, Serializer};

/// Latency samples in milliseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_ms(values: Vec<f64>) -> Self {
        Self(values)
    }

    pub fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64() * 1000.0);
    }

    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The q-quantile (nearest rank), in ms; NaN without samples.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        nearest_rank(&sorted, q).unwrap_or(f64::NAN)
    }

    pub fn p50(&self) -> f64 {
        self.quantile(0.50)
    }

    pub fn p99(&self) -> f64 {
        self.quantile(0.99)
    }

    /// What the report keeps of them.
    pub fn latency(&self) -> Latency {
        Latency {
            n: self.len(),
            p50_ms: self.p50(),
            p99_ms: self.p99(),
        }
    }
}

/// How many samples, their median and their 99th percentile (ms; NaN without samples).
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Latency {
    pub n: usize,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub p50_ms: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub p99_ms: f64,
}

/// Rounded to `digits` decimals (NaN and infinities become null in JSON).
/// The middle value, or the mean of the two middle ones for an even count (unlike
/// [`Samples::p50`], a nearest rank): for a handful of runs, not for latency samples; NaN
/// without values.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub fn round(value: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (value * f).round() / f
}

/// `#[serde(serialize_with = "rounded::<D, _>")]`: the figure with `D` decimals in the JSON,
/// exact in memory (the table formats the exact one).
pub fn rounded<const D: i32, S: Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(*value, D))
}

/// [`rounded`] for an optional figure (`None` is null).
pub fn rounded_opt<const D: i32, S: Serializer>(
    value: &Option<f64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    value.map(|v| round(v, D)).serialize(s)
}

/// [`rounded`] for every figure of a list.
pub fn rounded_all<const D: i32, S: Serializer>(values: &[f64], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(values.iter().map(|v| round(*v, D)))
}

/// User + system CPU time of this whole process so far.
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_shared_nearest_rank() {
        let s = Samples::from_ms((1..=100).rev().map(f64::from).collect());
        assert_eq!(s.p50(), 50.0, "unsorted samples are sorted first");
        assert_eq!(s.p99(), 99.0);
        assert_eq!(s.quantile(1.0), 100.0);
        assert!(Samples::new().p50().is_nan());
        assert_eq!(Samples::from_ms(vec![7.0]).p99(), 7.0);
    }

    #[test]
    fn figures_are_rounded_in_the_json_only() {
        let latency = Latency {
            n: 2,
            p50_ms: 1.23456,
            p99_ms: f64::NAN,
        };
        assert_eq!(
            serde_json::to_string(&latency).unwrap(),
            r#"{"n":2,"p50_ms":1.235,"p99_ms":null}"#
        );
        assert_eq!(latency.p50_ms, 1.23456);
    }
}
