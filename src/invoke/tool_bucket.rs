//! The token bucket of one tool named in the configuration, a bucket per tenant: GCRA, as
//! governor's limiters are. Written here rather than taken from governor because a call takes
//! a token from its tool's bucket only when its service's bucket (governor's) lets it through
//! too, and governor cannot look at a bucket without taking its token (governor issue 152;
//! the pull request adding it, 211, is open). With governor on both, a call its service's
//! bucket refused had spent a token of its tool's: a caller kept waiting on the service also
//! emptied the tool's bucket.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::limits::Bucket;
use crate::envelope::TenantId;

/// Why a call was not let through.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused<E> {
    /// The tool's bucket is empty: a token comes back after this long.
    Empty(Duration),
    /// The tool's bucket had a token, and the other check refused the call with this.
    Elsewhere(E),
}

/// A token bucket per tenant for one tool.
#[derive(Debug)]
pub(super) struct ToolBucket {
    /// The bucket configured.
    pub(super) bucket: Bucket,
    /// Nanoseconds between two tokens.
    emission: u64,
    /// Nanoseconds of tokens the bucket holds when full (a burst's worth).
    capacity: u64,
    /// When each tenant's bucket is next full, as nanoseconds since `origin` (GCRA's
    /// theoretical arrival time); a tenant not here has a full bucket.
    full_at: Mutex<HashMap<TenantId, u64>>,
    /// The start of the clock.
    origin: Instant,
}

impl ToolBucket {
    /// The buckets of `bucket` (every one full); `None` when it limits nothing.
    pub(super) fn new(bucket: Bucket) -> Option<Self> {
        let per_second = u64::from(bucket.per_second);
        if per_second == 0 {
            return None;
        }
        let emission = 1_000_000_000 / per_second;
        let burst = if bucket.burst == 0 {
            per_second
        } else {
            u64::from(bucket.burst)
        };
        Some(Self {
            bucket,
            emission,
            capacity: emission * burst,
            full_at: Mutex::default(),
            origin: Instant::now(),
        })
    }

    /// Nanoseconds since the clock started.
    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Takes a token of `tenant`'s bucket at `now` (see [`Self::now`]) when there is one and
    /// `also` lets the call through: both, or neither.
    pub(super) fn take_with<E>(
        &self,
        tenant: TenantId,
        now: u64,
        also: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), Refused<E>> {
        let mut full_at = self.full_at.lock().unwrap_or_else(|e| e.into_inner());
        let after = full_at.get(&tenant).map_or(now, |at| (*at).max(now)) + self.emission;
        let held = after - now;
        if held > self.capacity {
            return Err(Refused::Empty(Duration::from_nanos(held - self.capacity)));
        }
        also().map_err(Refused::Elsewhere)?;
        full_at.insert(tenant, after);
        Ok(())
    }

    /// Forgets the tenants whose buckets are full again.
    pub(super) fn shrink(&self) {
        let now = self.now();
        let mut full_at = self.full_at.lock().unwrap_or_else(|e| e.into_inner());
        full_at.retain(|_, at| *at > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn bucket(per_second: u32, burst: u32) -> ToolBucket {
        ToolBucket::new(Bucket { per_second, burst }).expect("a limit")
    }

    fn take(bucket: &ToolBucket, tenant: u64, now: u64) -> Result<(), Refused<()>> {
        bucket.take_with(TenantId(tenant), now, || Ok(()))
    }

    /// A burst, then a token per period; each tenant has its own bucket.
    #[test]
    fn a_burst_then_a_token_per_period() {
        let slow = bucket(2, 3);
        for _ in 0..3 {
            assert_eq!(take(&slow, 0, 0), Ok(()));
        }
        assert_eq!(
            take(&slow, 0, 0),
            Err(Refused::Empty(Duration::from_millis(500)))
        );
        assert_eq!(
            take(&slow, 0, SECOND / 4),
            Err(Refused::Empty(Duration::from_millis(250)))
        );
        assert_eq!(take(&slow, 0, SECOND / 2), Ok(()));
        assert!(take(&slow, 0, SECOND / 2).is_err());
        assert_eq!(take(&slow, 1, 0), Ok(()), "another tenant's bucket");
        let off = Bucket {
            per_second: 0,
            burst: 5,
        };
        assert!(ToolBucket::new(off).is_none(), "a rate of 0 limits nothing");
        let same_rate = bucket(4, 0);
        for _ in 0..4 {
            assert_eq!(take(&same_rate, 0, 0), Ok(()), "no burst: the rate");
        }
        assert!(take(&same_rate, 0, 0).is_err());
    }

    /// A call the other check refuses takes no token; one the bucket refuses is not checked.
    #[test]
    fn a_token_is_taken_only_when_the_call_goes_through() {
        let one = bucket(1, 1);
        assert_eq!(
            one.take_with(TenantId(0), 0, || Err("service empty")),
            Err(Refused::Elsewhere("service empty"))
        );
        assert_eq!(take(&one, 0, 0), Ok(()), "the token is still there");
        let mut checked = false;
        let refused = one.take_with(TenantId(0), 0, || {
            checked = true;
            Ok::<(), ()>(())
        });
        assert_eq!(refused, Err(Refused::Empty(Duration::from_secs(1))));
        assert!(!checked, "the other check is not made");
    }

    /// Tenants whose buckets are full again are forgotten.
    #[test]
    fn full_buckets_are_forgotten() {
        let one = bucket(1000, 1);
        assert_eq!(take(&one, 0, one.now()), Ok(()));
        std::thread::sleep(Duration::from_millis(5));
        one.shrink();
        assert!(one.full_at.lock().expect("lock").is_empty());
    }
}
