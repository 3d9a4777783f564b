//! How late lapsed leases were removed, counted since the process started: what the metrics
//! endpoint reports as `toolplane_lease_expiry_lateness_seconds`. Kept by the store, which
//! sees each lapse once, as it removes the lease and tells the tenant's watchers.

use std::time::Duration;

/// The upper bounds, in seconds, of the lateness buckets (a last, unbounded bucket follows):
/// from a millisecond, the expiry timer's resolution, past the second a watcher may expect.
pub const LATENESS_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// The leases removed for lapsing, and how long after their deadlines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExpiryLateness {
    /// How many.
    pub count: u64,
    /// Their lateness added up, in seconds.
    pub sum_seconds: f64,
    /// How many fell in each bucket of [`LATENESS_BUCKETS`] (not cumulative), the last one
    /// holding those later than every bound.
    pub buckets: [u64; LATENESS_BUCKETS.len() + 1],
}

impl ExpiryLateness {
    /// Counts one lease removed `late` after its deadline.
    pub(crate) fn observe(&mut self, late: Duration) {
        let seconds = late.as_secs_f64();
        self.count += 1;
        self.sum_seconds += seconds;
        let bucket = LATENESS_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(LATENESS_BUCKETS.len());
        self.buckets[bucket] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lapse_lands_in_the_first_bucket_that_holds_it() {
        let mut lateness = ExpiryLateness::default();
        for late_ms in [0, 1, 2, 7, 30_000] {
            lateness.observe(Duration::from_millis(late_ms));
        }
        assert_eq!(lateness.count, 5);
        assert!((lateness.sum_seconds - 30.010).abs() < 1e-9);
        assert_eq!(lateness.buckets[0], 2, "0 and 1 ms: within a millisecond");
        assert_eq!(lateness.buckets[1], 1, "2 ms");
        assert_eq!(lateness.buckets[3], 1, "7 ms");
        assert_eq!(
            lateness.buckets[LATENESS_BUCKETS.len()],
            1,
            "past every bound"
        );
        assert_eq!(lateness.buckets.iter().sum::<u64>(), 5);
    }
}
