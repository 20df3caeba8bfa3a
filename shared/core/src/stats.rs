//! The workspace's one percentile, so every latency figure (the benchmark's, the fault
//! suite's, and the worker's provider latencies to come) means the same by "p99".

/// The `q`-quantile (`q` in 0..=1) of `sorted` (ascending) by nearest rank: the smallest
/// value with at least `q` of the values at or below it. `None` when there are no values.
///
/// Nearest rank returns a value that was observed (no interpolation), so a p99 of 100
/// samples is the 99th smallest and a p100 the largest.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_picks_an_observed_value() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(nearest_rank(&values, 0.50), Some(50));
        assert_eq!(nearest_rank(&values, 0.99), Some(99));
        assert_eq!(nearest_rank(&values, 1.0), Some(100));
        assert_eq!(nearest_rank(&values, 0.0), Some(1), "p0 is the smallest");
        assert_eq!(nearest_rank(&[7.5], 0.99), Some(7.5));
        assert_eq!(nearest_rank::<f64>(&[], 0.5), None);
    }
}
