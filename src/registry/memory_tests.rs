//! Unit tests of the in-memory store's bookkeeping that the gRPC API cannot see.

use std::time::Duration;

use super::*;
use crate::registry::quota::QuotaResource;

fn service(name: &str) -> ValidatedService {
    ValidatedService {
        name: ServiceName::parse(name).expect("a valid name"),
        version: "1.0.0".to_owned(),
        endpoint: String::new(),
        tools: Vec::new(),
        ttl: Duration::from_secs(60),
        instance: Default::default(),
    }
}

fn name(text: &str) -> ServiceName {
    ServiceName::parse(text).expect("a valid name")
}

#[tokio::test]
async fn a_tenant_whose_last_service_went_keeps_no_index() {
    let store = MemoryStore::start(16, 16);
    let entry = store
        .register(TenantId(7), service("only"), &TenantQuota::UNLIMITED)
        .expect("registers");
    assert_eq!(store.snapshot.load().tenants.len(), 1);

    store
        .deregister(TenantId(7), &name("only"), entry.last_registered().lease.id)
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
            .register(TenantId(0), service(text), &TenantQuota::UNLIMITED)
            .expect("registers");
        store
            .deregister(TenantId(0), &name(text), entry.last_registered().lease.id)
            .expect("deregisters");
    }
    store
        .register(TenantId(0), service("live"), &TenantQuota::UNLIMITED)
        .expect("registers");
    assert!(!store.was_seen(TenantId(0), &name("a")), "forgotten first");
    assert!(store.was_seen(TenantId(0), &name("b")));
    assert!(store.was_seen(TenantId(0), &name("c")));
    assert!(store.was_seen(TenantId(0), &name("live")));
    assert_eq!(store.snapshot.load().gone.len(), 2, "bounded");

    store
        .register(TenantId(0), service("b"), &TenantQuota::UNLIMITED)
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
            .register(
                TenantId(2),
                service(&format!("burst-{index}")),
                &TenantQuota::UNLIMITED,
            )
            .expect("registers");
    }
    store
        .register(TenantId(1), service("mine"), &TenantQuota::UNLIMITED)
        .expect("registers");
    let event = watch
        .events
        .try_recv()
        .expect("the tenant's own change, not lagged")
        .event()
        .expect("kept");
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
    assert_eq!(store.events.channels_open(), 2);
    drop(watch);
    store
        .register(TenantId(1), service("change"), &TenantQuota::UNLIMITED)
        .expect("registers");
    assert_eq!(
        store.events.channels_open(),
        1,
        "dropped at the tenant's next change"
    );
    drop(health);
    drop(store.subscribe(TenantId(3)));
    assert_eq!(
        store.events.channels_open(),
        1,
        "dropped at the next subscription (only tenant 3's, just made, is left)"
    );
}

/// A service of `tools`, version 1.0.0, under a 60 s lease.
pub(super) fn service_with_tools(name: &str, tools: &[&str]) -> ValidatedService {
    use super::super::model::{ServiceSpec, ToolSpec};
    let spec = ServiceSpec {
        name: name.to_owned(),
        version: "1.0.0".to_owned(),
        endpoint: String::new(),
        tools: tools
            .iter()
            .map(|tool| ToolSpec {
                name: (*tool).to_owned(),
                description: "does a thing".to_owned(),
                input_schema: Some(serde_json::json!({"type": "object"})),
                output_schema: None,
                capabilities: Vec::new(),
                timeout_ms: None,
                domains: Vec::new(),
                categories: Vec::new(),
                annotations: Default::default(),
            })
            .collect(),
        ttl: Some(Duration::from_secs(60)),
        instance_id: String::new(),
    };
    super::super::validate::validate_service(&spec, &Default::default()).expect("valid")
}

fn usage_of(store: &MemoryStore, tenant: u64) -> Usage {
    store
        .snapshot
        .load()
        .tenant(TenantId(tenant))
        .map_or_else(Usage::default, TenantIndex::usage)
}

/// A re-registration counts its new tools in place of its old ones; a refused registration
/// changes nothing; deregistering gives the tools and their bytes back.
#[tokio::test]
async fn the_quota_counts_what_a_registration_adds_and_what_it_replaces() {
    let store = MemoryStore::start(16, 16);
    let quota = TenantQuota {
        services: 0,
        tools: 4,
        tool_bytes: 0,
        ..TenantQuota::UNLIMITED
    };
    let register = |service| store.register(TenantId(1), service, &quota);
    // Another service of the tenant, so that its index outlives a's removal.
    let z = register(service_with_tools("z", &["t"])).expect("1 tool");
    register(service_with_tools("a", &["t0", "t1"])).expect("3 tools");
    let a = register(service_with_tools("a", &["t0", "t1", "t2"])).expect("3 in place of 2");
    let before = usage_of(&store, 1);
    assert_eq!((before.services, before.tools), (2, 4));
    assert_eq!(
        before.tool_bytes,
        z.usage().tool_bytes + a.usage().tool_bytes
    );

    match register(service_with_tools("b", &["t0"])) {
        Err(RegistryError::QuotaExceeded { breach, .. }) => {
            assert_eq!(breach.resource, QuotaResource::Tools);
            assert_eq!((breach.limit, breach.would_have), (4, 5));
        }
        other => panic!("expected the tools quota, got {other:?}"),
    }
    assert_eq!(usage_of(&store, 1), before, "nothing changed");
    store
        .register(TenantId(2), service_with_tools("b", &["t0"]), &quota)
        .expect("another tenant has its own count");

    store
        .deregister(TenantId(1), &name("a"), a.last_registered().lease.id)
        .expect("deregisters");
    let b = register(service_with_tools("b", &["t0"])).expect("room again");
    assert_eq!(
        usage_of(&store, 1),
        Usage {
            services: 2,
            tools: 2,
            tool_bytes: z.usage().tool_bytes + b.usage().tool_bytes,
        },
        "a's tools and bytes given back"
    );
}

#[tokio::test]
async fn the_quota_of_tool_bytes_counts_definitions() {
    let store = MemoryStore::start(16, 16);
    let two = service_with_tools("a", &["t0", "t1"]);
    let quota = TenantQuota {
        services: 0,
        tools: 0,
        tool_bytes: two.tools.iter().map(|t| t.definition_bytes()).sum(),
        ..TenantQuota::UNLIMITED
    };
    store
        .register(TenantId(1), two, &quota)
        .expect("exactly at the quota");
    match store.register(TenantId(1), service_with_tools("b", &["t"]), &quota) {
        Err(RegistryError::QuotaExceeded { breach, .. }) => {
            assert_eq!(breach.resource, QuotaResource::ToolBytes);
            assert!(breach.would_have > breach.limit);
        }
        other => panic!("expected the tool bytes quota, got {other:?}"),
    }
    store
        .register(TenantId(1), service_with_tools("a", &["t0"]), &quota)
        .expect("shrinking fits");
}

/// A registration leaving its service described past the answer bound (measured here as 100
/// bytes an instance, of at most 250) is refused, and the service keeps the instances it had.
#[tokio::test]
async fn a_registration_past_the_answer_bound_is_refused_and_changes_nothing() {
    use crate::registry::answer_bound::AnswerBound;
    use crate::registry::store::ToolChange;
    fn no_tools(_: &ValidatedService) -> usize {
        0
    }
    fn per_instance(entry: &ServiceEntry, _: &[ToolChange]) -> usize {
        entry.instances.len() * 100
    }
    let bound = AnswerBound {
        max_bytes: 250,
        tools: no_tools,
        rest: per_instance,
    };
    let instance = |id: &str| ValidatedService {
        instance: crate::registry::InstanceId::parse(id).expect("an instance id"),
        ..service("replicated")
    };
    let quota = TenantQuota {
        answer: Some(bound.room(&instance("a")).expect("room")),
        ..TenantQuota::UNLIMITED
    };
    let store = MemoryStore::start(16, 16);
    for id in ["a", "b"] {
        store
            .register(TenantId(0), instance(id), &quota)
            .expect("within the bound");
    }
    let refused = store
        .register(TenantId(0), instance("c"), &quota)
        .expect_err("past the bound");
    assert!(
        matches!(&refused, RegistryError::InvalidArgument(violations) if violations[0].description.contains("3 instances")),
        "{refused:?}"
    );
    let kept = store
        .service(TenantId(0), &name("replicated"))
        .expect("kept");
    assert_eq!(kept.instances.len(), 2);
}

/// The bound counts the tools the service is described with, its leading contract's: replicas
/// of an older version with one tool are measured beside the newer version's nine.
#[tokio::test]
async fn replicas_of_another_version_are_measured_beside_the_leading_tools() {
    use crate::registry::answer_bound::AnswerBound;
    use crate::registry::store::ToolChange;
    fn per_tool(service: &ValidatedService) -> usize {
        service.tools.len() * 100
    }
    fn per_instance(entry: &ServiceEntry, _: &[ToolChange]) -> usize {
        entry.instances.len() * 10
    }
    let bound = AnswerBound {
        max_bytes: 1000,
        tools: per_tool,
        rest: per_instance,
    };
    let store = MemoryStore::start(16, 16);
    let register = |version: &str, tools: &[&str], id: &str| {
        let service = ValidatedService {
            version: version.to_owned(),
            instance: crate::registry::InstanceId::parse(id).expect("an instance id"),
            ..service_with_tools("mixed", tools)
        };
        let quota = TenantQuota {
            answer: Some(bound.room(&service).expect("room")),
            ..TenantQuota::UNLIMITED
        };
        store.register(TenantId(0), service, &quota)
    };
    let nine = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"];
    register("2.0.0", &nine, "new").expect("900 + 10");
    for replica in 1..=9 {
        register("1.0.0", &["t0"], &format!("old{replica}")).expect("900 + 10 an instance");
    }
    let refused = register("1.0.0", &["t0"], "old10").expect_err("900 + 110");
    assert!(
        matches!(&refused, RegistryError::InvalidArgument(violations) if violations[0].description.contains("its tools 900")),
        "{refused:?}"
    );
    let kept = store.service(TenantId(0), &name("mixed")).expect("kept");
    assert_eq!((kept.instances.len(), kept.version()), (10, "2.0.0"));
}
