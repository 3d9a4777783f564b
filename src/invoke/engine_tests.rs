//! The engine with a stand-in provider caller: how an invocation that never finishes is
//! recorded, and how a large input is checked.

use std::future::pending;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::json;

use super::*;
use crate::invoke::caller::{ProviderFailure, ProviderReply};
use crate::invoke::limits::RateLimitConfig;
use crate::invoke::records::RecordFilter;
use crate::json::canonical_sha256;
use crate::registry::memory::MemoryStore;
use crate::registry::{RegistrationLimits, ServiceSpec, ToolSpec};

/// A provider caller that panics (a bug in toolplane's own code) or never answers.
#[derive(Debug)]
struct StandIn {
    panics: bool,
}

impl ProviderCaller for StandIn {
    fn call(&self, _: ProviderCall) -> BoxFuture<'static, Result<ProviderReply, ProviderFailure>> {
        let panics = self.panics;
        async move {
            assert!(!panics, "a bug while calling the provider");
            pending().await
        }
        .boxed()
    }

    fn check_health(&self, _: &str) -> BoxFuture<'static, Result<(), String>> {
        async { Ok(()) }.boxed()
    }
}

fn engine(panics: bool) -> Invoker {
    let registry = Registry::new(
        MemoryStore::start(16, 16),
        RegistrationLimits::default(),
        16,
    );
    registry
        .register(
            TenantId(1),
            &ServiceSpec {
                name: "svc".into(),
                version: "1.0.0".into(),
                endpoint: "http://127.0.0.1:9".into(),
                tools: vec![ToolSpec {
                    name: "tool".into(),
                    description: "does things".into(),
                    input_schema: Some(json!({"type": "object", "required": ["query"]})),
                    output_schema: None,
                    capabilities: Vec::new(),
                    timeout_ms: None,
                    domains: Vec::new(),
                    categories: Vec::new(),
                    annotations: Default::default(),
                }],
                ttl: None,
                instance_id: String::new(),
            },
        )
        .expect("registers");
    Invoker::new(
        registry,
        Arc::new(StandIn { panics }),
        Arc::new(RateLimits::new(&RateLimitConfig::default())),
        Arc::new(ProviderHealthBook::default()),
        Arc::new(RecordLog::in_memory(16)),
        InvokerOptions {
            max_timeout: DEFAULT_MAX_TIMEOUT,
            heavy_work: heavy::HeavyWork::new(1),
            spans: crate::spans::Spans::off(),
        },
    )
}

fn invocation() -> Invocation {
    Invocation {
        tenant: TenantId(1),
        correlation_id: "c".into(),
        tool: ToolName::parse("tool").expect("a name"),
        service: None,
        input: json!({"query": "q"}),
        input_wire: None,
        input_bytes: 2,
        idempotency_key: None,
        retry: None,
        caller_timeout: None,
        trace: None,
        progress: None,
    }
}

fn only_record(engine: &Invoker) -> Arc<InvocationRecord> {
    let records = engine
        .records()
        .list(TenantId(1), &RecordFilter::default(), None, 10);
    assert_eq!(records.len(), 1, "{records:?}");
    Arc::clone(&records[0])
}

#[tokio::test]
async fn a_call_its_caller_gives_up_on_is_recorded_cancelled() {
    let engine = engine(false);
    let call = engine.invoke(invocation());
    assert!(
        tokio::time::timeout(Duration::from_millis(20), call)
            .await
            .is_err()
    );
    let record = only_record(&engine);
    assert_eq!(record.status, InvocationStatus::Cancelled);
    assert_eq!(record.error_reason, "CANCELLED");
}

#[tokio::test]
async fn a_call_whose_handling_panics_is_recorded_failed() {
    let engine = engine(true);
    let outcome = std::panic::AssertUnwindSafe(engine.invoke(invocation()))
        .catch_unwind()
        .await;
    assert!(outcome.is_err(), "the panic goes on to the server's layer");
    let record = only_record(&engine);
    assert_eq!(record.status, InvocationStatus::Failed);
    assert_eq!(record.error_reason, "INTERNAL");
}

/// A large input is digested and checked off the serving threads, with the same outcome and
/// record as in place.
#[tokio::test]
async fn a_large_input_is_checked_as_a_small_one_is() {
    let engine = engine(false);
    let bad = Invocation {
        input: json!({"other": 1}),
        ..invocation()
    };
    for input_bytes in [2, heavy::OFF_THREAD_INPUT_BYTES] {
        let failed = engine
            .invoke(Invocation {
                input_bytes,
                ..bad.clone()
            })
            .await
            .expect_err("the input lacks query");
        assert!(
            matches!(failed.error, InvokeError::InvalidInput { .. }),
            "{input_bytes} bytes: {:?}",
            failed.error
        );
        let record = failed.record.expect("recorded");
        assert_eq!(record.status, InvocationStatus::InvalidInput);
        assert_eq!(record.input_sha256, canonical_sha256(&bad.input));
    }
}

/// When every permit of the pool is taken, a large input waits for one until its deadline,
/// and the call is then answered and recorded TIMED_OUT (VALIDATION_TIMEOUT); a small input
/// is checked in place all the while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_input_not_checked_by_the_deadline_is_recorded_timed_out() {
    let engine = engine(false);
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = engine.heavy_work().clone();
    let (started, holding) = tokio::sync::oneshot::channel();
    let hold = move || {
        started.send(()).expect("the test waits");
        released.recv()
    };
    let held = tokio::spawn(async move { holder.run(TenantId(1), None, hold).await });
    holding.await.expect("the holder has the only permit");

    let failed = engine
        .invoke(Invocation {
            input_bytes: heavy::OFF_THREAD_INPUT_BYTES,
            caller_timeout: Some(Duration::from_millis(200)),
            ..invocation()
        })
        .await
        .expect_err("no permit before the deadline");
    assert!(
        matches!(failed.error, InvokeError::CheckTimeout { .. }),
        "{:?}",
        failed.error
    );
    let record = failed.record.expect("recorded");
    assert_eq!(record.status, InvocationStatus::TimedOut);
    assert_eq!(record.error_reason, "VALIDATION_TIMEOUT");

    let small = engine.validate(TenantId(1), &invocation().tool, None, &invocation().input);
    assert!(small.is_ok(), "small inputs are checked in place");
    release.send(()).expect("the holder waits");
    let received = held.await.expect("the holder ends").expect("it ran");
    assert!(received.is_ok(), "the holder was released");
}
