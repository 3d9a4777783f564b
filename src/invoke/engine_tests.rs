//! The engine with a stand-in provider caller: how an invocation that never finishes is
//! recorded.

use std::future::pending;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::json;

use super::*;
use crate::invoke::caller::{ProviderFailure, ProviderReply};
use crate::invoke::limits::RateLimitConfig;
use crate::invoke::records::RecordFilter;
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
                    input_schema: Some(json!({"type": "object"})),
                    output_schema: None,
                    capabilities: Vec::new(),
                    timeout_ms: None,
                }],
                ttl: None,
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
        },
    )
}

fn invocation() -> Invocation {
    Invocation {
        tenant: TenantId(1),
        correlation_id: "c".into(),
        tool: ToolName::parse("tool").expect("a name"),
        service: None,
        input: json!({}),
        input_wire: None,
        idempotency_key: None,
        retry: None,
        caller_timeout: None,
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
