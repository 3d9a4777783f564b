//! Unit tests of when the periodic provider health checks run, and of which reasons of a
//! provider are passed on.

use std::time::Duration;

use tokio::sync::watch;

use super::*;
use crate::envelope::TenantId;
use crate::registry::memory::MemoryStore;
use crate::registry::model::{ServiceName, ValidatedService};
use crate::registry::quota::TenantQuota;

/// A store holding one service whose endpoint refuses connections, and that endpoint.
async fn store_with_a_refusing_endpoint() -> (Arc<MemoryStore>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let endpoint = format!("http://{}", listener.local_addr().expect("bound address"));
    drop(listener);
    let store = MemoryStore::start(16, 16);
    store
        .register(
            TenantId(0),
            ValidatedService {
                name: ServiceName::parse("gone-away").expect("a valid name"),
                version: "1.0.0".to_owned(),
                endpoint: endpoint.clone(),
                tools: Vec::new(),
                ttl: Duration::from_secs(60),
                instance: Default::default(),
            },
            &TenantQuota::UNLIMITED,
        )
        .expect("registers");
    (store, endpoint)
}

/// Starts the checks every `interval` and answers the book they write and their stop switch.
fn start_checks(
    store: Arc<MemoryStore>,
    interval: Duration,
) -> (Arc<ProviderHealthBook>, watch::Sender<bool>) {
    let book = Arc::new(ProviderHealthBook::default());
    let (serving, watching) = watch::channel(true);
    tokio::spawn(run_health_checks(
        store,
        Arc::new(GrpcProviderCaller::default()),
        Arc::clone(&book),
        interval,
        watching,
    ));
    (book, serving)
}

#[tokio::test]
async fn the_first_check_comes_one_interval_after_the_start() {
    let (store, endpoint) = store_with_a_refusing_endpoint().await;
    let (book, serving) = start_checks(store, Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        book.failure(&endpoint),
        None,
        "checked at the start, not one interval after it"
    );
    serving.send_replace(false);
}

#[tokio::test]
async fn a_refusing_endpoint_is_found_at_the_first_check() {
    let (store, endpoint) = store_with_a_refusing_endpoint().await;
    let (book, serving) = start_checks(store, Duration::from_millis(200));
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    while book.failure(&endpoint).is_none() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "never marked unhealthy"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    serving.send_replace(false);
}

/// A provider's reason is passed on only when it is one as ErrorInfo defines it.
#[test]
fn only_upper_snake_case_reasons_of_at_most_63_characters_are_passed_on() {
    for good in ["TOOL_QUOTA_SPENT", "A_1", &"R".repeat(63)] {
        assert!(is_error_reason(good), "{good}");
    }
    for bad in [
        "",
        "A",
        "A1",
        "tool_failed",
        "TOOL FAILED",
        "_TOOL",
        "TOOL_",
        "1TOOL",
        "TOOL\u{e9}",
        &"R".repeat(64),
    ] {
        assert!(!is_error_reason(bad), "{bad:?}");
    }
}
