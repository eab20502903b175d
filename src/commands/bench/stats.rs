//! Percentiles over measured samples.

/// The `q` quantile (0..=1) of `samples`, nearest-rank; 0 when empty.
pub fn quantile(samples: &mut [f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

#[cfg(test)]
mod tests {
    #[test]
    fn nearest_rank() {
        let mut s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(super::quantile(&mut s, 0.5), 50.0);
        assert_eq!(super::quantile(&mut s, 0.99), 99.0);
        assert_eq!(super::quantile(&mut s, 1.0), 100.0);
    }
}
