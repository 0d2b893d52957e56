//! A latency histogram shared by threads: 10 µs buckets up to 100 ms, then
//! 1 ms buckets up to 60 s, read as quantiles (the soak run's).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Latencies: 10 µs buckets up to 100 ms, then 1 ms buckets up to 60 s.
pub struct Histogram {
    buckets: Vec<AtomicU64>,
}

const FINE: usize = 10_000;
const COARSE: usize = 60_000;

impl Histogram {
    pub fn new() -> Self {
        Self { buckets: (0..FINE + COARSE + 1).map(|_| AtomicU64::new(0)).collect() }
    }

    pub fn record(&self, d: Duration) {
        let us = d.as_micros() as usize;
        let i = if us < FINE * 10 { us / 10 } else { (FINE + (us / 1000 - 100)).min(FINE + COARSE) };
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Vec<u64> {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }
}

/// The upper bound of bucket `i`, in ms.
pub fn bucket_ms(i: usize) -> f64 {
    if i < FINE { (i + 1) as f64 * 0.01 } else { (i - FINE + 101) as f64 }
}

/// Quantile `p` of bucket counts, in ms (upper bucket bound), or 0 if empty.
pub fn quantile(counts: &[u64], p: f64) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = ((total as f64) * p).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return bucket_ms(i);
        }
    }
    bucket_ms(counts.len() - 1)
}

/// `a` less `b`, bucket by bucket (what one interval added).
pub fn minus(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}
