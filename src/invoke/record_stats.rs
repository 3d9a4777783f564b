//! Counts of the invocations recorded since the process started, by status, with their
//! durations in histogram buckets: what the metrics endpoint reports. Kept by the record log,
//! which sees every invocation once, under the lock it already holds for the chain.

use super::records::InvocationStatus;

/// The upper bounds, in seconds, of the duration buckets (a last, unbounded bucket follows):
/// from half a millisecond, a relayed call's least, to the 60 s of `max_invoke_timeout`.
pub const DURATION_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// The invocations of one status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusStats {
    /// How many.
    pub count: u64,
    /// Their durations added up, in seconds.
    pub duration_sum_seconds: f64,
    /// How many fell in each bucket of [`DURATION_BUCKETS`] (not cumulative), the last one
    /// holding those longer than every bound.
    pub buckets: [u64; DURATION_BUCKETS.len() + 1],
}

/// The invocations recorded since the process started, and the reads of the log's files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InvocationStats {
    /// One entry per status, in the order of [`InvocationStatus::ALL`].
    pub by_status: [StatusStats; InvocationStatus::ALL.len()],
    /// Records that could not be written to the log file (each failed its call).
    pub write_failures: u64,
    /// Times the log file, or a file rotated from it, could not be flushed to the disk.
    pub sync_failures: u64,
    /// Bytes of the log's files read by lookups and listings of records memory no longer held.
    pub file_bytes_read: u64,
}

impl InvocationStats {
    /// Counts one invocation.
    pub(super) fn observe(&mut self, status: InvocationStatus, duration_us: u64) {
        let stats = &mut self.by_status[status as usize];
        let seconds = duration_us as f64 / 1e6;
        stats.count += 1;
        stats.duration_sum_seconds += seconds;
        let bucket = DURATION_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(DURATION_BUCKETS.len());
        stats.buckets[bucket] += 1;
    }

    /// The invocations of `status`.
    pub fn of(&self, status: InvocationStatus) -> &StatusStats {
        &self.by_status[status as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_kept_in_their_own_places() {
        for (index, status) in InvocationStatus::ALL.into_iter().enumerate() {
            assert_eq!(status as usize, index, "{status:?}");
        }
    }

    #[test]
    fn durations_fall_in_the_first_bucket_that_holds_them() {
        let mut stats = InvocationStats::default();
        stats.observe(InvocationStatus::Succeeded, 100);
        stats.observe(InvocationStatus::Succeeded, 1_000);
        stats.observe(InvocationStatus::Succeeded, 1_001);
        stats.observe(InvocationStatus::TimedOut, 90_000_000);
        let succeeded = stats.of(InvocationStatus::Succeeded);
        assert_eq!(succeeded.count, 3);
        assert_eq!(&succeeded.buckets[..3], &[1, 1, 1]);
        assert!((succeeded.duration_sum_seconds - 0.002101).abs() < 1e-9);
        let timed_out = stats.of(InvocationStatus::TimedOut);
        assert_eq!(
            timed_out.buckets[DURATION_BUCKETS.len()],
            1,
            "past every bound"
        );
        assert_eq!(stats.of(InvocationStatus::Failed).count, 0);
    }
}
