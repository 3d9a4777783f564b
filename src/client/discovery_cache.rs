//! The client-side discovery cache (seed 000): services as discovery last answered them, kept
//! for a TTL (moka) or until [`DiscoveryCache::invalidate`].
//!
//! An answer is kept only if no invalidation came after its request was sent: a caller that
//! invalidates because it knows a service changed (a call refused for a contract it no longer
//! has) would otherwise find the old service cached again for a whole TTL when a lookup sent
//! before the invalidation was answered after it. Each entry holds the generation (a count of
//! invalidations) its request was sent in, and answers only while that is the current one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::pb;

/// The most services kept.
const CAPACITY: u64 = 10_000;

/// Services by name, each kept with the generation its request was sent in.
#[derive(Debug, Clone)]
pub(super) struct DiscoveryCache {
    entries: moka::future::Cache<String, (u64, pb::DiscoveryInfo)>,
    /// How many invalidations there have been (shared by the clones of a client).
    generation: Arc<AtomicU64>,
}

/// A lookup sent to the server: the generation it was sent in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lookup(u64);

impl DiscoveryCache {
    /// An empty cache keeping each service for `ttl`.
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            entries: moka::future::Cache::builder()
                .time_to_live(ttl)
                .max_capacity(CAPACITY)
                .build(),
            generation: Arc::default(),
        }
    }

    /// Call before sending a lookup whose answer is to be kept.
    pub(super) fn lookup_sent(&self) -> Lookup {
        Lookup(self.generation.load(Ordering::Acquire))
    }

    /// The service `name` as kept, unless its TTL or an invalidation has passed since.
    pub(super) async fn get(&self, name: &str) -> Option<pb::DiscoveryInfo> {
        let (generation, service) = self.entries.get(name).await?;
        (generation == self.generation.load(Ordering::Acquire)).then_some(service)
    }

    /// Keeps `service` as `name`, the answer to `lookup`, unless the cache was invalidated
    /// after the lookup was sent.
    pub(super) async fn keep(&self, lookup: Lookup, name: &str, service: pb::DiscoveryInfo) {
        if lookup.0 == self.generation.load(Ordering::Acquire) {
            let kept = (lookup.0, service);
            self.entries.insert(name.to_owned(), kept).await;
        }
    }

    /// Drops every service kept, and every answer to a lookup sent before now.
    pub(super) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
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
}
