//! The fault suite's one percentile.

use std::time::Duration;

/// The `p`-th percentile (0–100) of sorted durations, by nearest rank.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&d, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&d, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&d[..1], 50.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
