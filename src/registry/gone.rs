//! The names of services that have gone (deregistered or expired), so that grpc.health.v1 can
//! tell a service that went away (`SERVICE_UNKNOWN`) from a name never registered
//! (`NOT_FOUND`).
//!
//! Memory is bounded: at most the set's capacity of names is remembered across all tenants, and the name
//! that went longest ago is forgotten first. Without the bound a cluster that names services
//! per pod would grow the set with every restart, forever. Persistent (`imbl`) maps, so the set
//! lives in the store's snapshot and is cloned with it cheaply.

use imbl::{HashMap, OrdMap};

use super::model::ServiceName;
use crate::envelope::TenantId;

/// How many gone service names are remembered by default, across all tenants.
pub const DEFAULT_GONE_SERVICES_REMEMBERED: usize = 100_000;

type Key = (TenantId, ServiceName);

/// Gone service names, oldest first out.
#[derive(Debug, Clone, Default)]
pub(super) struct GoneNames {
    /// Each name and the sequence number of its going.
    by_name: HashMap<Key, u64>,
    /// The same names by sequence number: the first is the one that went longest ago.
    by_age: OrdMap<u64, Key>,
    next: u64,
    /// The most names remembered; 0 remembers none.
    capacity: usize,
}

impl GoneNames {
    /// An empty set remembering at most `capacity` names.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    /// Whether the name is remembered as gone.
    pub(super) fn contains(&self, tenant: TenantId, name: &ServiceName) -> bool {
        // A lookup builds the key; only grpc.health.v1 Check on a name not live asks.
        self.by_name.contains_key(&(tenant, name.clone()))
    }

    /// Remembers that the service went, forgetting the oldest names beyond the capacity.
    pub(super) fn remember(&mut self, tenant: TenantId, name: ServiceName) {
        if self.capacity == 0 {
            return;
        }
        let key = (tenant, name);
        if let Some(old) = self.by_name.insert(key.clone(), self.next) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(self.next, key);
        self.next += 1;
        while self.by_age.len() > self.capacity {
            let Some(oldest) = self.by_age.get_min().map(|(sequence, _)| *sequence) else {
                break;
            };
            if let Some(key) = self.by_age.remove(&oldest) {
                self.by_name.remove(&key);
            }
        }
    }

    /// Forgets the name: it is registered again.
    pub(super) fn forget(&mut self, tenant: TenantId, name: &ServiceName) {
        if self.by_name.is_empty() {
            return;
        }
        if let Some(sequence) = self.by_name.remove(&(tenant, name.clone())) {
            self.by_age.remove(&sequence);
        }
    }

    /// How many names are remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> ServiceName {
        ServiceName::parse(text).expect("a valid name")
    }

    #[test]
    fn the_oldest_names_are_forgotten_beyond_the_capacity() {
        let mut gone = GoneNames::new(2);
        for text in ["a", "b", "c"] {
            gone.remember(TenantId(1), name(text));
        }
        assert!(
            !gone.contains(TenantId(1), &name("a")),
            "the oldest went first"
        );
        assert!(gone.contains(TenantId(1), &name("b")));
        assert!(gone.contains(TenantId(1), &name("c")));
        assert!(!gone.contains(TenantId(2), &name("c")), "tenants are apart");
        assert_eq!(gone.len(), 2);
    }

    #[test]
    fn going_again_makes_a_name_the_newest_and_registering_forgets_it() {
        let mut gone = GoneNames::new(2);
        gone.remember(TenantId(0), name("a"));
        gone.remember(TenantId(0), name("b"));
        gone.remember(TenantId(0), name("a"));
        assert_eq!(gone.len(), 2, "a name is remembered once");
        gone.remember(TenantId(0), name("c"));
        assert!(
            gone.contains(TenantId(0), &name("a")),
            "a went last but one"
        );
        assert!(!gone.contains(TenantId(0), &name("b")));

        gone.forget(TenantId(0), &name("a"));
        assert!(!gone.contains(TenantId(0), &name("a")));
        gone.remember(TenantId(0), name("d"));
        assert!(
            gone.contains(TenantId(0), &name("c")),
            "the forgotten name took no room"
        );
    }

    #[test]
    fn a_capacity_of_zero_remembers_nothing() {
        let mut gone = GoneNames::new(0);
        gone.remember(TenantId(0), name("a"));
        assert_eq!(gone.len(), 0);
    }
}
