//! The client-side discovery cache (seed 000): services as discovery last answered them, kept
//! for a TTL (moka) or until [`DiscoveryCache::invalidate`].
//!
//! An answer is kept only if it is the newest the cache has seen for its service, and no
//! invalidation came after its request was sent:
//! - a caller that invalidates because it knows a service changed (a call refused for a
//!   contract it no longer has) would otherwise find the old service cached again for a whole
//!   TTL when a lookup sent before the invalidation was answered after it;
//! - two lookups of one service answered out of order would otherwise leave the older answer
//!   cached.
//!
//! Lookups and invalidations are numbered from one counter. Each entry holds its lookup's
//! number; it replaces only an entry of a lower number, and answers only while no
//! invalidation has a higher number than it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use moka::ops::compute::Op;

use crate::pb;

/// The most services kept.
const CAPACITY: u64 = 10_000;
/// The longest TTL kept to: moka panics on one over 1,000 years, which a caller may well mean
/// by "forever" (`DISCOVERY_CACHE_TTL_SECS=99999999999`).
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Services by name, each kept with the number of the lookup that answered it.
#[derive(Debug, Clone)]
pub(super) struct DiscoveryCache {
    entries: moka::future::Cache<String, (u64, pb::DiscoveryInfo)>,
    /// Counters shared by the clones of a client.
    counters: Arc<Counters>,
}

/// The numbering of lookups and invalidations.
#[derive(Debug, Default)]
struct Counters {
    /// The last number given to a lookup or an invalidation.
    last: AtomicU64,
    /// The number of the last invalidation: entries of lookups numbered below it are stale.
    invalidated: AtomicU64,
}

/// A lookup sent to the server: its number.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lookup(u64);

impl DiscoveryCache {
    /// An empty cache keeping each service for `ttl` (at most [`MAX_TTL`], 100 years).
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            entries: moka::future::Cache::builder()
                .time_to_live(ttl.min(MAX_TTL))
                .max_capacity(CAPACITY)
                .build(),
            counters: Arc::default(),
        }
    }

    /// Call before sending a lookup whose answer is to be kept.
    pub(super) fn lookup_sent(&self) -> Lookup {
        Lookup(self.counters.last.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Whether an answer to lookup `number` was sent after the last invalidation.
    fn is_current(&self, number: u64) -> bool {
        number > self.counters.invalidated.load(Ordering::Acquire)
    }

    /// The service `name` as kept, unless its TTL or an invalidation has passed since.
    pub(super) async fn get(&self, name: &str) -> Option<pb::DiscoveryInfo> {
        let (number, service) = self.entries.get(name).await?;
        self.is_current(number).then_some(service)
    }

    /// Keeps `service` as `name`, the answer to `lookup`, unless the cache was invalidated
    /// after the lookup was sent or holds the answer to a later lookup of `name`.
    pub(super) async fn keep(&self, lookup: Lookup, name: &str, service: pb::DiscoveryInfo) {
        if !self.is_current(lookup.0) {
            return;
        }
        let kept = (lookup.0, service);
        self.entries
            .entry(name.to_owned())
            .and_compute_with(|entry| {
                let newer_kept = entry.is_some_and(|entry| entry.value().0 > lookup.0);
                std::future::ready(if newer_kept { Op::Nop } else { Op::Put(kept) })
            })
            .await;
    }

    /// Drops every service kept, and every answer to a lookup sent before now.
    pub(super) fn invalidate(&self) {
        let number = self.counters.last.fetch_add(1, Ordering::AcqRel) + 1;
        self.counters
            .invalidated
            .fetch_max(number, Ordering::AcqRel);
        self.entries.invalidate_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str) -> pb::DiscoveryInfo {
        pb::DiscoveryInfo {
            service_name: name.to_owned(),
            ..Default::default()
        }
    }

    /// An answer is kept and found until an invalidation; an answer to a lookup sent before
    /// an invalidation is not kept, nor found when it was kept in the same instant.
    #[tokio::test]
    async fn an_answer_to_a_lookup_sent_before_an_invalidation_is_not_kept() {
        let cache = DiscoveryCache::new(Duration::from_secs(300));
        cache.keep(cache.lookup_sent(), "a", service("a")).await;
        assert!(cache.get("a").await.is_some());
        cache.invalidate();
        assert!(cache.get("a").await.is_none());

        let before = cache.lookup_sent();
        cache.invalidate();
        cache.keep(before, "a", service("a")).await;
        assert!(
            cache.get("a").await.is_none(),
            "answered after the invalidation"
        );

        // Kept just before an invalidation it had not seen (the check, then the insert).
        let sent = cache.lookup_sent();
        cache
            .entries
            .insert("b".to_owned(), (sent.0, service("b")))
            .await;
        cache.invalidate();
        cache
            .entries
            .insert("b".to_owned(), (sent.0, service("b")))
            .await;
        assert!(cache.get("b").await.is_none());

        let after = cache.lookup_sent();
        cache.keep(after, "a", service("a")).await;
        assert!(cache.get("a").await.is_some(), "sent after it");
        assert!(cache.clone().get("a").await.is_some(), "clones share it");
    }

    /// Of two lookups of one service answered out of order, the later one's answer is kept.
    #[tokio::test]
    async fn an_answer_to_an_earlier_lookup_does_not_replace_a_later_ones() {
        let cache = DiscoveryCache::new(Duration::from_secs(300));
        let earlier = cache.lookup_sent();
        let later = cache.lookup_sent();
        let mut newer = service("a");
        newer.service_version = "2.0.0".to_owned();
        cache.keep(later, "a", newer).await;
        cache.keep(earlier, "a", service("a")).await;
        let kept = cache.get("a").await.expect("kept");
        assert_eq!(kept.service_version, "2.0.0", "the later lookup's answer");

        let next = cache.lookup_sent();
        cache.keep(next, "a", service("a")).await;
        let kept = cache.get("a").await.expect("kept");
        assert_eq!(
            kept.service_version, "",
            "a later lookup's answer replaces it"
        );
    }

    /// A TTL longer than moka takes (1,000 years) is kept to 100 years instead of panicking.
    #[tokio::test]
    async fn a_ttl_of_forever_is_taken() {
        let cache = DiscoveryCache::new(Duration::MAX);
        cache.keep(cache.lookup_sent(), "a", service("a")).await;
        assert!(cache.get("a").await.is_some());
    }
}
