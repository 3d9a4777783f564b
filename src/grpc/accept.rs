//! Accepting a request: its envelope read (and a `toolplane-tenant-id` header sent with it
//! checked to name the same tenant), the tenant it names checked against what the caller's
//! client certificate and bearer token are granted ([`crate::access`]), both recorded on the
//! RPC span.
//!
//! The grant of a call is worked out by [`super::connections`] (its connection's, worked out
//! once as the connection was accepted, with its token's) and handed to it as a request
//! extension; a request without one comes from a server with no `tenant_access` rules, and may
//! name any tenant.

use std::sync::Arc;

use tonic::{Request, Status};
use tracing::Span;

use crate::access::CallerGrant;
use crate::envelope::{RequestMeta, TENANT_HEADER, TenantId};
use crate::pb;

/// A request message that carries the seed 000 envelope in its `meta` field.
pub(crate) trait Enveloped {
    /// The request's envelope, if it has one.
    fn meta(&self) -> Option<&pb::Meta>;
}

macro_rules! enveloped {
    ($($message:ty),+ $(,)?) => {
        $(impl Enveloped for $message {
            fn meta(&self) -> Option<&pb::Meta> {
                self.meta.as_ref()
            }
        })+
    };
}

enveloped!(
    pb::RegisterServiceRequest,
    pb::HeartbeatRequest,
    pb::DeregisterServiceRequest,
    pb::ListToolsRequest,
    pb::GetToolRequest,
    pb::SearchToolsRequest,
    pb::ListServicesRequest,
    pb::GetServiceRequest,
    pb::WatchServicesRequest,
    pb::PreflightRequest,
    pb::GetServiceHealthRequest,
    super::invoke_wire::InvokeToolRequestWire,
    pb::ValidateToolInputRequest,
    pb::ListInvocationRecordsRequest,
    pb::GetInvocationRecordRequest,
    pb::CreateAgentRequest,
    pb::GetAgentRequest,
    pb::ListAgentsRequest,
    pb::DeleteAgentRequest,
    pb::TransitionAgentRequest,
    pb::CompleteRequest,
    pb::StreamCompleteRequest,
    pb::ListMessagesRequest,
);

/// Reads the envelope of `request` (refusing a `toolplane-tenant-id` header that names another
/// tenant), checks that its caller may act for the tenant it names, and records both on the
/// current RPC span; answers the envelope and the message.
///
/// Every RPC runs in a span named after it with its `tenant` and `correlation_id`. RegisterService,
/// DeregisterService, WatchServices, Preflight and the Agent API open it at INFO, so the lines they
/// log carry it at the default level. The per-call RPCs (Heartbeat, the discovery reads,
/// GetServiceHealth, InvokeTool and the other ToolInvoke RPCs) open it at DEBUG: at INFO a span
/// without events writes nothing, and keeping one cost about 5 µs of CPU per InvokeTool call
/// (BENCHMARKS.md, item 18). Their few events at INFO and above name the tenant, correlation id and
/// tool themselves.
pub(crate) fn accept<T: Enveloped>(request: Request<T>) -> Result<(RequestMeta, T), Status> {
    let (headers, extensions, message) = request.into_parts();
    let meta = RequestMeta::from_pb(message.meta())?;
    meta.check_tenant_header(headers.get(TENANT_HEADER).map(|value| value.as_bytes()))?;
    let span = Span::current();
    span.record("tenant", meta.tenant.0);
    span.record("correlation_id", meta.correlation_id.as_str());
    check_tenant(&extensions, meta.tenant)?;
    Ok((meta, message))
}

/// Checks that the caller of a request with `extensions` may act for `tenant` (any tenant where
/// no grant was handed on).
pub(crate) fn check_tenant(extensions: &tonic::Extensions, tenant: TenantId) -> Result<(), Status> {
    match extensions.get::<Arc<CallerGrant>>() {
        Some(grant) => grant.check(tenant).map_err(|refused| {
            crate::access::log_refused(&refused, crate::access::RefusedAt::Grpc);
            refused.into()
        }),
        None => Ok(()),
    }
}
