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

/// A stand-in for the provider callers (a unit test of the checks' scheduling): each check
/// takes 50 ms, the slow endpoint's 3 s, and the failing endpoint's fails at once; it counts
/// the checks under way, and the most at once.
#[derive(Debug, Default)]
struct CountingChecks {
    /// The checks under way, and the most at once.
    counts: Arc<std::sync::Mutex<(usize, usize)>>,
}

const SLOW: &str = "http://127.0.0.1:1";
const FAILING: &str = "http://127.0.0.1:2";

impl ProviderCaller for CountingChecks {
    fn call(
        &self,
        _call: ProviderCall,
    ) -> BoxFuture<'static, Result<ProviderReply, ProviderFailure>> {
        unreachable!("the checks call no tool")
    }

    fn check_health(&self, endpoint: &str) -> BoxFuture<'static, Result<(), String>> {
        let took = match endpoint {
            SLOW => Duration::from_secs(3),
            FAILING => Duration::ZERO,
            _ => Duration::from_millis(50),
        };
        let failing = endpoint == FAILING;
        let counts = Arc::clone(&self.counts);
        Box::pin(async move {
            {
                let mut counts = counts.lock().expect("not poisoned");
                counts.0 += 1;
                counts.1 = counts.1.max(counts.0);
            }
            tokio::time::sleep(took).await;
            counts.lock().expect("not poisoned").0 -= 1;
            if failing {
                Err("down".to_owned())
            } else {
                Ok(())
            }
        })
    }
}

/// A round checks at most `MAX_HEALTH_CHECKS_AT_ONCE` endpoints at once, and writes each
/// answer as it comes: an endpoint failing its check is marked unhealthy while a slow one's
/// check goes on. Before, a round started every check at once (here 300) and wrote the
/// answers when the slowest had come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_bounds_its_checks_and_writes_each_answer_as_it_comes() {
    let store = MemoryStore::start(16, 16);
    let endpoints = (1..=300).map(|port| format!("http://127.0.0.1:{port}"));
    for (index, endpoint) in endpoints.enumerate() {
        let service = ValidatedService {
            name: ServiceName::parse(&format!("service-{index}")).expect("a valid name"),
            version: "1.0.0".to_owned(),
            endpoint,
            tools: Vec::new(),
            ttl: Duration::from_secs(60),
            instance: Default::default(),
        };
        store
            .register(TenantId(0), service, &TenantQuota::UNLIMITED)
            .expect("registers");
    }
    let caller = Arc::new(CountingChecks::default());
    let counts = Arc::clone(&caller.counts);
    let book = Arc::new(ProviderHealthBook::default());
    let (serving, watching) = watch::channel(true);
    let started = tokio::time::Instant::now();
    tokio::spawn(run_health_checks(
        store,
        caller,
        Arc::clone(&book),
        Duration::from_millis(100),
        watching,
    ));
    while book.failure(FAILING).is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never marked unhealthy"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The first round starts at 100 ms; the slow endpoint's check ends 3 s after that.
    let marked_after = started.elapsed();
    assert!(
        marked_after < Duration::from_secs(2),
        "marked after {marked_after:?}: the slow endpoint's check was waited for"
    );
    let most = counts.lock().expect("not poisoned").1;
    assert!(
        (2..=MAX_HEALTH_CHECKS_AT_ONCE).contains(&most),
        "{most} checks at once"
    );
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
