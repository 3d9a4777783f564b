//! Unit tests of the in-memory store's bookkeeping that the gRPC API cannot see.

use std::time::Duration;

use super::*;

fn service(name: &str) -> ValidatedService {
    ValidatedService {
        name: ServiceName::parse(name).expect("a valid name"),
        version: "1.0.0".to_owned(),
        endpoint: String::new(),
        tools: Vec::new(),
        ttl: Duration::from_secs(60),
    }
}

fn name(text: &str) -> ServiceName {
    ServiceName::parse(text).expect("a valid name")
}

#[tokio::test]
async fn a_tenant_whose_last_service_went_keeps_no_index() {
    let store = MemoryStore::start(16, 16);
    let entry = store
        .register(TenantId(7), service("only"), 0)
        .expect("registers");
    assert_eq!(store.snapshot.load().tenants.len(), 1);

    store
        .deregister(TenantId(7), &name("only"), entry.lease.id)
        .expect("deregisters");
    assert!(
        store.snapshot.load().tenants.is_empty(),
        "an empty tenant index would be kept for every tenant id ever used"
    );
    assert!(
        store.was_seen(TenantId(7), &name("only")),
        "remembered as gone"
    );
    assert!(!store.was_seen(TenantId(8), &name("only")));
}

#[tokio::test]
async fn gone_names_are_remembered_up_to_the_bound_and_live_ones_always() {
    let store = MemoryStore::start(16, 2);
    for text in ["a", "b", "c"] {
        let entry = store
            .register(TenantId(0), service(text), 0)
            .expect("registers");
        store
            .deregister(TenantId(0), &name(text), entry.lease.id)
            .expect("deregisters");
    }
    store
        .register(TenantId(0), service("live"), 0)
        .expect("registers");
    assert!(!store.was_seen(TenantId(0), &name("a")), "forgotten first");
    assert!(store.was_seen(TenantId(0), &name("b")));
    assert!(store.was_seen(TenantId(0), &name("c")));
    assert!(store.was_seen(TenantId(0), &name("live")));
    assert_eq!(store.snapshot.load().gone.len(), 2, "bounded");

    store
        .register(TenantId(0), service("b"), 0)
        .expect("registers again");
    assert_eq!(
        store.snapshot.load().gone.len(),
        1,
        "a name registered again is no longer kept as gone"
    );
}

#[tokio::test]
async fn a_tenant_watches_only_its_own_changes_and_is_not_lagged_by_another() {
    // A buffer of 4 events: another tenant's burst of 10 would overrun a shared channel.
    let store = MemoryStore::start(4, 16);
    let mut watch = store.watch(TenantId(1));
    for index in 0..10 {
        store
            .register(TenantId(2), service(&format!("burst-{index}")), 0)
            .expect("registers");
    }
    store
        .register(TenantId(1), service("mine"), 0)
        .expect("registers");
    let event = watch
        .events
        .try_recv()
        .expect("the tenant's own change, not lagged");
    assert_eq!(
        (event.tenant, event.service.as_str()),
        (TenantId(1), "mine")
    );
    assert!(watch.events.try_recv().is_err(), "nothing of tenant 2");
}

#[tokio::test]
async fn a_tenant_nobody_watches_any_more_keeps_no_channel() {
    let store = MemoryStore::start(16, 16);
    let watch = store.watch(TenantId(1));
    let health = store.subscribe(TenantId(2));
    assert_eq!(store.events.channels(), 2);
    drop(watch);
    store
        .register(TenantId(1), service("change"), 0)
        .expect("registers");
    assert_eq!(
        store.events.channels(),
        1,
        "dropped at the tenant's next change"
    );
    drop(health);
    drop(store.subscribe(TenantId(3)));
    assert_eq!(
        store.events.channels(),
        1,
        "dropped at the next subscription (only tenant 3's, just made, is left)"
    );
}
