//! Leases: a TTL renewed by heartbeats, measured on the monotonic clock so that wall-clock
//! jumps can neither expire a lease early nor keep it alive.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// A lease's identifier, handed to the provider at registration.
pub type LeaseId = uuid::Uuid;

/// One fixed pairing of the monotonic and the wall clock, taken at first use; monotonic
/// deadlines are stored as nanoseconds after it.
fn anchor() -> &'static (Instant, SystemTime) {
    static ANCHOR: OnceLock<(Instant, SystemTime)> = OnceLock::new();
    ANCHOR.get_or_init(|| (Instant::now(), SystemTime::now()))
}

/// Nanoseconds on the monotonic clock since the anchor.
pub fn monotonic_now() -> u64 {
    nanos(anchor().0.elapsed())
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The `Instant` of a monotonic timestamp.
pub fn instant_of(monotonic: u64) -> Instant {
    anchor().0 + Duration::from_nanos(monotonic)
}

/// The wall-clock time of a monotonic timestamp.
pub fn wall_time_of(monotonic: u64) -> SystemTime {
    anchor().1 + Duration::from_nanos(monotonic)
}

/// The bit of a lease's stored deadline that marks it ended: found lapsed by a read, a
/// heartbeat or the expiry task. Monotonic nanoseconds reach it after 292 years.
const ENDED: u64 = 1 << 63;

/// A lease: live until its deadline, which each renewal moves to now + TTL. The first look
/// that finds the deadline passed (a read, the expiry task, a late heartbeat) ends the lease
/// there and then, in the same atomic step, so no renewal succeeds after it: a heartbeat that
/// read the clock just before the deadline but renews just after cannot revive a lease the
/// expiry task is removing, or that a watch left out as lapsed. The expiry task, the readers
/// and a late heartbeat therefore always agree on whether it expired.
#[derive(Debug)]
pub struct Lease {
    /// The lease's identifier.
    pub id: LeaseId,
    /// How long the lease lives after each renewal.
    pub ttl: Duration,
    /// The monotonic deadline, with [`ENDED`] set once the lease is found lapsed.
    deadline: AtomicU64,
}

impl Lease {
    /// A new lease with a fresh id, live for `ttl` from now.
    pub fn new(ttl: Duration) -> Self {
        Self {
            id: uuid::Uuid::new_v4(),
            ttl,
            deadline: AtomicU64::new(monotonic_now().saturating_add(nanos(ttl))),
        }
    }

    /// The monotonic deadline (the one it lapsed at, for a lease that ended).
    pub fn deadline(&self) -> u64 {
        self.deadline.load(Ordering::Acquire) & !ENDED
    }

    /// Whether the lease is live at the monotonic time `now` (a time just read); a lease found
    /// lapsed is ended.
    pub fn is_live_at(&self, now: u64) -> bool {
        self.settle(now, None).is_some()
    }

    /// Whether the lease is live now.
    pub fn is_live(&self) -> bool {
        self.is_live_at(monotonic_now())
    }

    /// When the lease runs out, on the wall clock.
    pub fn expires_at(&self) -> SystemTime {
        wall_time_of(self.deadline())
    }

    /// Renews the lease for another TTL from now. Returns the new deadline, or `None` when the
    /// lease had already run out.
    pub fn renew(&self) -> Option<u64> {
        self.renew_at(monotonic_now())
    }

    /// Renews the lease for another TTL from `now`, the time its renewal read.
    fn renew_at(&self, now: u64) -> Option<u64> {
        self.settle(now, Some(now.saturating_add(nanos(self.ttl))))
    }

    /// In one atomic step: when the lease is live at `now`, its deadline, moved to `renewed`
    /// when that is later; else `None`, with the lease ended.
    fn settle(&self, now: u64, renewed: Option<u64>) -> Option<u64> {
        let mut current = self.deadline.load(Ordering::Acquire);
        loop {
            if current & ENDED != 0 {
                return None;
            }
            let (next, live) = if current <= now {
                (current | ENDED, None)
            } else {
                let next = renewed.map_or(current, |renewed| renewed.max(current));
                (next, Some(next))
            };
            if next == current {
                return live;
            }
            match (self.deadline).compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return live,
                Err(actual) => current = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_moves_the_deadline_forward() {
        let lease = Lease::new(Duration::from_secs(10));
        let before = lease.deadline();
        std::thread::sleep(Duration::from_millis(2));
        let after = lease.renew().expect("a live lease renews");
        assert!(after > before);
        assert!(lease.is_live());
    }

    #[test]
    fn an_expired_lease_cannot_be_renewed() {
        let lease = Lease::new(Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!lease.is_live());
        assert_eq!(lease.renew(), None);
    }

    /// A heartbeat that read the clock just before the deadline, but renews only after a look
    /// found the lease lapsed (the expiry task removing it, a watch leaving it out), does not
    /// revive it; the deadline it lapsed at stays readable.
    #[test]
    fn a_lease_found_lapsed_is_not_renewed_by_a_heartbeat_that_read_the_clock_before() {
        let lease = Lease::new(Duration::from_secs(10));
        let deadline = lease.deadline();
        assert!(!lease.is_live_at(deadline), "lapsed at its deadline");
        assert_eq!(lease.renew_at(deadline - 1), None);
        assert!(
            !lease.is_live_at(deadline - 1),
            "ended, whatever the time read"
        );
        assert_eq!(lease.deadline(), deadline);

        // Renewed before any look found it lapsed, it lives on.
        let lease = Lease::new(Duration::from_secs(10));
        let deadline = lease.deadline();
        let renewed = lease
            .renew_at(deadline - 1)
            .expect("live when its renewal read");
        assert_eq!(renewed, deadline - 1 + nanos(lease.ttl));
        assert!(lease.is_live_at(deadline));
    }

    #[test]
    fn wall_time_tracks_the_deadline() {
        let lease = Lease::new(Duration::from_secs(30));
        let remaining = lease
            .expires_at()
            .duration_since(SystemTime::now())
            .expect("expiry lies in the future");
        // The wall-clock mapping is as exact as the anchor's two clock reads are close: the
        // wall clock is read just after the monotonic one, so allow that gap (a preempted
        // thread can stretch it to milliseconds) on top of the TTL.
        assert!(remaining <= Duration::from_secs(30) + Duration::from_millis(50));
        assert!(remaining > Duration::from_secs(29));
    }
}
