//! The MCP server handler: `tools/list` over the caller's tenant's registered tools, and
//! `tools/call` through the invocation engine, so a call from an MCP client is validated,
//! bounded and recorded exactly as an `InvokeTool` call is.
//!
//! MCP requests carry no toolplane envelope: the tenant is the `toolplane-tenant-id` header's
//! (tenant 0 without it), and the correlation id of every call in one MCP session is the
//! session's id (`Mcp-Session-Id`), so `ListInvocationRecords` by correlation id lists a
//! session's calls. A call asking for progress is sent what the tool's provider reports (the
//! MCP servers toolplane imports report it; see `progress_to_client`).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Extensions, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::answer;
use super::list_changed;
use super::tools::{listed_name, listed_tool, offered_counts, resolve_name};
use crate::envelope::{MAX_CORRELATION_ID_LEN, RequestMeta, TENANT_HEADER, TenantId};
use crate::grpc::page_bytes::fitting;
use crate::invoke::caller::{Progress, ProgressSink};
use crate::invoke::{Invocation, Invoker};
use crate::json::compact_len;
use crate::registry::{Registry, ToolFilter};
use crate::trace_context::TraceContext;

/// The most tools one `tools/list` page holds; a client follows `nextCursor` for the rest. A
/// page holds fewer when their JSON would pass
/// [`MAX_ANSWER_ITEM_BYTES`](crate::grpc::page_bytes::MAX_ANSWER_ITEM_BYTES) (always one).
pub const LIST_PAGE_SIZE: i32 = 1000;

/// The session header of MCP's Streamable HTTP transport.
const SESSION_HEADER: &str = "mcp-session-id";

/// Serves toolplane's tools to MCP clients; one per MCP session, all sharing the registry and
/// the engine.
#[derive(Debug, Clone)]
pub struct McpTools {
    registry: Registry,
    invoker: Invoker,
}

impl McpTools {
    /// A handler over the server's registry and invocation engine.
    pub fn new(registry: Registry, invoker: Invoker) -> Self {
        Self { registry, invoker }
    }

    /// The registry the tools are read from.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// The HTTP request an MCP message arrived in, without its body (none over other transports).
fn http_request(extensions: &Extensions) -> Option<&http::request::Parts> {
    extensions.get::<http::request::Parts>()
}

/// The HTTP request headers an MCP message arrived with (none over other transports).
fn headers(extensions: &Extensions) -> Option<&http::HeaderMap> {
    http_request(extensions).map(|parts| &parts.headers)
}

/// The tenant a request acts for.
fn tenant_of(extensions: &Extensions) -> Result<TenantId, ErrorData> {
    let value = headers(extensions).and_then(|headers| headers.get(TENANT_HEADER));
    TenantId::from_header(value.map(|value| value.as_bytes())).ok_or_else(|| {
        ErrorData::invalid_request(
            format!("header {TENANT_HEADER} must be an unsigned integer"),
            None,
        )
    })
}

/// The correlation id of a session's calls: its session id, when it is one toolplane keeps.
fn correlation_of(extensions: &Extensions) -> Option<String> {
    let session = headers(extensions)?.get(SESSION_HEADER)?.to_str().ok()?;
    let usable = !session.is_empty()
        && session.len() <= MAX_CORRELATION_ID_LEN
        && session.bytes().all(|b| b.is_ascii_graphic());
    usable.then(|| session.to_owned())
}

/// The size of the HTTP request a message came in, from its `content-length` (0 when unknown).
fn request_bytes(extensions: &Extensions) -> usize {
    headers(extensions)
        .and_then(|headers| headers.get(http::header::CONTENT_LENGTH))
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

/// The call's W3C trace context: from the request's `_meta` (as MCP's SEP-414 puts it), else
/// from the HTTP headers.
fn trace_of(context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    let from_meta = context.meta.get_traceparent().and_then(|traceparent| {
        TraceContext::from_headers(
            Some(traceparent.as_bytes()),
            context.meta.get_tracestate().map(str::as_bytes),
        )
    });
    from_meta.or_else(|| {
        let headers = headers(&context.extensions)?;
        let header = |name: &str| headers.get(name).map(|value| value.as_bytes());
        TraceContext::from_headers(header("traceparent"), header("tracestate"))
    })
}

impl ServerHandler for McpTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolplane", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "The tools registered with this toolplane control plane, for the tenant named in the \
             toolplane-tenant-id header. Every call is checked against the tool's input schema, \
             bounded in time and rate, and recorded.",
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tenant = tenant_of(&context.extensions)?;
        let cursor = request.and_then(|params| params.cursor).unwrap_or_default();
        let page = self
            .registry
            .list_tools(tenant, &ToolFilter::default(), LIST_PAGE_SIZE, &cursor)
            .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
        let store = self.registry.store();
        let counts = offered_counts(&page.items, |name| store.tools_named(tenant, name).len());
        let listed = (page.items.iter().zip(counts)).map(|(found, offered_by)| {
            let name = listed_name(&self.registry, tenant, found, offered_by);
            (found, listed_tool(found, name))
        });
        // A page of large tools could be a JSON answer of 100 MB or more, built whole in
        // memory; it ends where its tools pass what one gRPC answer may carry instead.
        let fitted = fitting(listed, |(_, tool)| compact_len(tool));
        let next_cursor = match fitted.last() {
            Some((last, _)) if fitted.len() < page.items.len() => {
                Some(Registry::tools_token_after(&ToolFilter::default(), last))
            }
            _ => page.next_page_token,
        };
        let tools = fitted.into_iter().map(|(_, tool)| tool).collect();
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = next_cursor;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tenant = tenant_of(&context.extensions)?;
        let Some((tool, service)) = resolve_name(&self.registry, tenant, &request.name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "{:?} is no tool name: names are 1-128 of A-Z a-z 0-9 _ . -",
                    request.name
                ),
                None,
            ));
        };
        let meta = RequestMeta::new(tenant, correlation_of(&context.extensions).as_deref());
        let (progress, progress_sent) = progress_to_client(&context).unzip();
        let invocation = Invocation {
            tenant,
            correlation_id: meta.correlation_id,
            tool,
            service,
            input: Value::Object(request.arguments.unwrap_or_default()),
            input_wire: None,
            // The request's size stands for its arguments' (which make most of it): a large
            // input is checked off the serving threads, as over gRPC.
            input_bytes: request_bytes(&context.extensions),
            idempotency_key: None,
            retry: None,
            caller_timeout: None,
            trace: trace_of(&context),
            progress,
        };
        // A client's `notifications/cancelled` ends the call; dropping it records it CANCELLED.
        let outcome = tokio::select! {
            outcome = self.invoker.invoke(invocation) => outcome,
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("the client cancelled the call", None));
            }
        };
        if let Some(sent) = progress_sent {
            // The call's reports reach the client before its answer, which ends them.
            let _ = tokio::time::timeout(PROGRESS_FLUSH_LIMIT, sent).await;
        }
        match outcome {
            Ok(invoked) => Ok(answer::succeeded(invoked).into()),
            Err(failed) => answer::failed(failed).map(Into::into),
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(tenant) = tenant_of(&context.extensions) {
            list_changed::spawn_for_session(self.registry.clone(), tenant, context.peer);
        }
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let tenant = tenant_of(&subscription.request_context().extensions)?;
        let since = http_request(&subscription.request_context().extensions)
            .and_then(|parts| parts.extensions.get::<list_changed::RevisionAtArrival>())
            .copied();
        list_changed::listen(&self.registry, tenant, since, &subscription).await;
        Ok(())
    }
}

/// Where the progress of a client's call goes: to the client, as `notifications/progress` of
/// the token its request carried in `_meta.progressToken`; `None` when it carried none (it
/// wants no progress). Reports are sent in order by a task of the call's own, which ends once
/// the call has ended (the sink dropped) and every report is sent; a provider's report never
/// waits on the client: one that finds [`PROGRESS_BACKLOG`] reports not yet sent is dropped (a
/// later one says more).
fn progress_to_client(
    context: &RequestContext<RoleServer>,
) -> Option<(ProgressSink, tokio::task::JoinHandle<()>)> {
    let token = context.meta.get_progress_token()?;
    let client = context.peer.clone();
    let (reports, mut unsent) = tokio::sync::mpsc::channel::<Progress>(PROGRESS_BACKLOG);
    let sending = tokio::spawn(async move {
        while let Some(report) = unsent.recv().await {
            let mut notification = ProgressNotificationParam::new(token.clone(), report.progress);
            notification.total = report.total;
            notification.message = report.message;
            if client.notify_progress(notification).await.is_err() {
                break;
            }
        }
    });
    let sink = ProgressSink(Arc::new(move |report: Progress| {
        let _ = reports.try_send(report);
    }));
    Some((sink, sending))
}

/// The most progress reports of one call waiting to be sent to its client.
const PROGRESS_BACKLOG: usize = 64;

/// The longest a call's answer waits for its last progress reports to be sent.
const PROGRESS_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);
