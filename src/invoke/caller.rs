//! The seam between the invocation engine and the providers it calls. The gRPC implementation
//! (`grpc::provider_client`) pools one channel per endpoint; unit tests can substitute their own.

use std::fmt::Debug;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::envelope::TenantId;
use crate::registry::ServiceName;

/// A value in the transport's own form, carried through the engine untouched: the caller's
/// input on its way to the provider, and the provider's output on its way back (the gRPC
/// layer passes their encoded bytes). So the far side of the same transport can send it on
/// instead of converting the JSON back. The engine never looks inside.
#[derive(Clone)]
pub struct WireForm(pub std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for WireForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WireForm(..)")
    }
}

impl PartialEq for WireForm {
    /// The same form of the same input.
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for WireForm {}

/// A provider's report of how far a call has got (MCP's `notifications/progress`).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The progress so far; it only grows.
    pub progress: f64,
    /// The total it is heading for, when the provider knows it.
    pub total: Option<f64>,
    /// What the provider is doing, when it says.
    pub message: Option<String>,
}

/// Where a caller wants a call's progress reports: a transport that carries them (MCP) hands
/// each one to it as it arrives, during the call; the others have none to give.
#[derive(Clone)]
pub struct ProgressSink(pub std::sync::Arc<dyn Fn(Progress) + Send + Sync>);

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink(..)")
    }
}

impl PartialEq for ProgressSink {
    /// The same sink.
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One call of a provider's tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderCall {
    /// Where the provider serves ToolProviderService.
    pub endpoint: String,
    /// The service whose tool it is (of the caller's tenant).
    pub service: ServiceName,
    /// The tool to run.
    pub tool: String,
    /// The validated input, shared by every attempt.
    pub input: std::sync::Arc<Value>,
    /// The same input in the transport's form, when the caller's transport supplied one. On
    /// the last attempt the engine hands over its own reference, so the caller may take it.
    pub input_wire: Option<WireForm>,
    /// The caller's tenant.
    pub tenant: TenantId,
    /// The caller's correlation id.
    pub correlation_id: String,
    /// The caller's idempotency key, the same on every attempt.
    pub idempotency_key: Option<String>,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// How long the provider has; sent as the gRPC deadline.
    pub timeout: Duration,
    /// The caller's W3C trace context, sent as `traceparent` and `tracestate`.
    pub trace: Option<crate::trace_context::TraceContext>,
    /// Where the provider's progress reports go, when the caller wants them.
    pub progress: Option<ProgressSink>,
}

/// A provider's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderReply {
    /// The tool's output.
    pub output: Value,
    /// The same output in the transport's form, when the transport supplied one; the engine
    /// hands it to the caller's side unchanged.
    pub output_wire: Option<WireForm>,
    /// The output's size as it arrived, in bytes (0 when not known): a large output is
    /// digested and checked off the serving threads (`invoke::heavy`).
    pub output_bytes: usize,
    /// The provider's warnings.
    pub warnings: Vec<String>,
}

/// The gRPC status classes the engine treats differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// UNAVAILABLE: the provider could not be reached or is overloaded; retryable.
    Unavailable,
    /// RESOURCE_EXHAUSTED: the provider is out of capacity; retryable.
    ResourceExhausted,
    /// DEADLINE_EXCEEDED reported by the provider itself.
    DeadlineExceeded,
    /// Any other gRPC code, by number.
    Other(i32),
}

impl FailureKind {
    /// gRPC's DEADLINE_EXCEEDED, by number.
    pub const DEADLINE_EXCEEDED: i32 = 4;

    /// The gRPC code, by number.
    pub fn code(self) -> i32 {
        match self {
            Self::Unavailable => 14,
            Self::ResourceExhausted => 8,
            Self::DeadlineExceeded => Self::DEADLINE_EXCEEDED,
            Self::Other(code) => code,
        }
    }

    /// Whether this is what a provider answers when the deadline it was sent runs out:
    /// DEADLINE_EXCEEDED, or CANCELLED (tonic servers answer "Timeout expired" with it). The
    /// engine counts it as the call's timeout only once its own deadline has passed; before
    /// that it is the provider's own failure (a timeout of its own, a stream it cut off).
    pub fn may_be_the_deadline(self) -> bool {
        /// gRPC's CANCELLED.
        const CANCELLED: i32 = 1;
        matches!(self, Self::DeadlineExceeded | Self::Other(CANCELLED))
    }

    /// Whether a caller's retry policy may retry after this failure.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Unavailable | Self::ResourceExhausted)
    }
}

/// A provider's error answer, or a failure to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderFailure {
    /// The status class.
    pub kind: FailureKind,
    /// The provider's ErrorInfo reason, or one toolplane chose (e.g. TOOL_UNAVAILABLE).
    pub reason: String,
    /// The provider's message.
    pub message: String,
    /// The call never reached the provider (no connection could be made, or the provider
    /// left it unprocessed): another instance of the service may take it.
    pub unsent: bool,
    /// The provider's own answer, in its transport's form, for a caller of the same transport
    /// to pass on (an MCP server's content blocks of an `isError` result); `None` for most.
    pub detail: Option<WireForm>,
}

/// Calls tools on providers.
pub trait ProviderCaller: Send + Sync + Debug {
    /// Calls one tool; dropping the future cancels the call at the provider.
    fn call(
        &self,
        call: ProviderCall,
    ) -> BoxFuture<'static, Result<ProviderReply, ProviderFailure>>;

    /// Checks that the provider at `endpoint` answers; the error says what went wrong.
    fn check_health(&self, endpoint: &str) -> BoxFuture<'static, Result<(), String>>;
}

pub use crate::registry::validate::{MCP_ENDPOINT_PREFIX, MCP_STDIO_ENDPOINT_PREFIX};

/// Calls providers over the transport their endpoint names: MCP for an `mcp+http://` or
/// `mcp+https://` endpoint (an MCP server's URL), gRPC's ToolProviderService for any other.
#[derive(Debug, Clone)]
pub struct ByEndpointScheme {
    /// The caller of gRPC providers.
    pub grpc: std::sync::Arc<dyn ProviderCaller>,
    /// The caller of MCP servers.
    pub mcp: std::sync::Arc<dyn ProviderCaller>,
}

impl ByEndpointScheme {
    fn caller_for(&self, endpoint: &str) -> &dyn ProviderCaller {
        if endpoint.starts_with(MCP_ENDPOINT_PREFIX) {
            self.mcp.as_ref()
        } else {
            self.grpc.as_ref()
        }
    }
}

impl ProviderCaller for ByEndpointScheme {
    fn call(
        &self,
        call: ProviderCall,
    ) -> BoxFuture<'static, Result<ProviderReply, ProviderFailure>> {
        self.caller_for(&call.endpoint).call(call)
    }

    fn check_health(&self, endpoint: &str) -> BoxFuture<'static, Result<(), String>> {
        self.caller_for(endpoint).check_health(endpoint)
    }
}
