//! The caller's retry policy: validated bounds and exponential backoff with jitter.

use std::time::Duration;

use rand::Rng;

/// The most attempts a policy may ask for.
pub const MAX_ATTEMPTS: u32 = 10;
/// Default wait before the second attempt.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(50);
/// Default longest wait.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Default growth factor.
pub const DEFAULT_MULTIPLIER: f64 = 2.0;
/// Default randomized fraction.
pub const DEFAULT_JITTER: f64 = 0.2;

/// A validated retry policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, first included (1 to 10).
    pub max_attempts: u32,
    /// Wait before the second attempt.
    pub initial_backoff: Duration,
    /// Longest wait.
    pub max_backoff: Duration,
    /// Growth factor, at least 1.
    pub multiplier: f64,
    /// Randomized fraction of each wait, 0 to 1.
    pub jitter: f64,
}

impl RetryPolicy {
    /// Builds a policy from wire values, with defaults for zero values; the error names the
    /// field at fault and why.
    pub fn new(
        max_attempts: u32,
        initial_backoff: Option<Duration>,
        max_backoff: Option<Duration>,
        multiplier: f64,
        jitter: f64,
    ) -> Result<Self, (&'static str, String)> {
        if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
            return Err((
                "max_attempts",
                format!("max_attempts must be 1 to {MAX_ATTEMPTS}, got {max_attempts}"),
            ));
        }
        let multiplier = if multiplier == 0.0 {
            DEFAULT_MULTIPLIER
        } else {
            multiplier
        };
        if !multiplier.is_finite() || multiplier < 1.0 {
            return Err((
                "multiplier",
                format!("multiplier must be at least 1, got {multiplier}"),
            ));
        }
        if !jitter.is_finite() || !(0.0..=1.0).contains(&jitter) {
            return Err((
                "jitter",
                format!("jitter must be between 0 and 1, got {jitter}"),
            ));
        }
        let initial_backoff = initial_backoff
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_INITIAL_BACKOFF);
        let max_backoff = max_backoff
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_MAX_BACKOFF);
        if max_backoff < initial_backoff {
            return Err((
                "max_backoff",
                "max_backoff must not be shorter than initial_backoff".to_owned(),
            ));
        }
        Ok(Self {
            max_attempts,
            initial_backoff,
            max_backoff,
            multiplier,
            jitter: if jitter == 0.0 {
                DEFAULT_JITTER
            } else {
                jitter
            },
        })
    }

    /// The wait after failed attempt number `attempt` (from 1): initial * multiplier^(attempt-1),
    /// capped at max_backoff, then drawn uniformly from [w * (1 - jitter), w].
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let grown = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = grown.min(self.max_backoff.as_secs_f64());
        let low = capped * (1.0 - self.jitter);
        let drawn = if capped > low {
            rand::rng().random_range(low..=capped)
        } else {
            capped
        };
        Duration::from_secs_f64(drawn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered_within_bounds() {
        let policy = RetryPolicy::new(
            5,
            Some(Duration::from_millis(100)),
            Some(Duration::from_millis(300)),
            2.0,
            0.5,
        )
        .expect("valid");
        for _ in 0..100 {
            let first = policy.backoff(1);
            assert!(
                first >= Duration::from_millis(50) && first <= Duration::from_millis(100),
                "{first:?}"
            );
            let third = policy.backoff(3);
            assert!(
                third >= Duration::from_millis(150) && third <= Duration::from_millis(300),
                "{third:?}"
            );
        }
    }

    #[test]
    fn bad_policies_name_the_field() {
        assert_eq!(
            RetryPolicy::new(0, None, None, 0.0, 0.0)
                .expect_err("zero")
                .0,
            "max_attempts"
        );
        assert_eq!(
            RetryPolicy::new(11, None, None, 0.0, 0.0)
                .expect_err("too many")
                .0,
            "max_attempts"
        );
        assert_eq!(
            RetryPolicy::new(3, None, None, 0.5, 0.0)
                .expect_err("shrinking")
                .0,
            "multiplier"
        );
        assert_eq!(
            RetryPolicy::new(3, None, None, 2.0, 1.5)
                .expect_err("jitter")
                .0,
            "jitter"
        );
        let defaults = RetryPolicy::new(3, None, None, 0.0, 0.0).expect("defaults");
        assert_eq!(defaults.initial_backoff, DEFAULT_INITIAL_BACKOFF);
    }
}
