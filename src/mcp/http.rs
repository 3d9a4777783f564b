//! The MCP endpoint: MCP's Streamable HTTP transport at `/mcp` on the `mcp_listen` address,
//! served by the official Rust MCP SDK (rmcp) over HTTP/1.1 and HTTP/2, in TLS when toolplane
//! serves TLS (the same certificate, and the same client certificates asked for).
//!
//! Sessions are kept in memory (`Mcp-Session-Id`), so a client that initializes receives
//! `notifications/tools/list_changed` on its GET stream; at most `max_sessions` at once, as
//! they share the server's memory, and at most `max_sessions_per_tenant` of them opened by one
//! tenant ([`super::sessions`]). Requests whose `Host` header is not one of
//! `mcp_allowed_hosts` are refused (403), which stops DNS rebinding from a browser. A
//! connection that sends no request within [`OPENING_TIMEOUT`] is closed
//! ([`crate::grpc::opening_deadline`]).
//! HTTP/2 connections are pinged as the gRPC port's are (`keepalive_interval`), and closed when
//! a ping goes unanswered. Connections are served as accepted, not through `grpc::coalesce`: its put-off flushes suit
//! HTTP/2's, and held server-sent events back until the next write.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower::Service;

use super::handler::McpTools;
use super::list_changed::RevisionAtArrival;
use super::request_bodies::{self, McpResponse};
use super::sessions::McpSessions;
use crate::access::{AccessError, ConnectionAccess, LiveTenantAccess};
use crate::envelope::{TENANT_HEADER, TenantId};
use crate::grpc::connections::ConnectionSlots;
use crate::grpc::opening_deadline::{OPENING_TIMEOUT, OpeningDeadline};
use crate::grpc::server_tls::{ConnectionPeer, ServedTls};
use crate::registry::Registry;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";
/// How long a client may take to send a request's headers before its connection is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an open SSE stream is sent a comment, so proxies keep it open.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Who may reach the MCP endpoint, and how many sessions it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpEndpoint {
    /// The `Host` header values (a host, or `host:port`) requests may carry; empty accepts any.
    pub allowed_hosts: Vec<String>,
    /// The most sessions held at once (2025-era clients open one each); 0 sets no limit.
    pub max_sessions: usize,
    /// The most sessions held at once that one tenant opened (by the `toolplane-tenant-id` of
    /// its `initialize`); 0 sets no limit.
    pub max_sessions_per_tenant: usize,
}

/// The most MCP sessions held at once, by default.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// The most MCP sessions held at once that one tenant opened, by default: a tenant opening
/// sessions it does not end takes a tenth of the endpoint's, not all of them.
pub const DEFAULT_MAX_SESSIONS_PER_TENANT: usize = 1_000;
/// How long a client refused a session is told to wait before it tries again.
const SESSION_RETRY_AFTER_SECONDS: u64 = 5;

/// The hosts the MCP endpoint answers to by default: the loopback names.
pub const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1"];

impl McpEndpoint {
    /// An endpoint answering requests to [`LOOPBACK_HOSTS`] only.
    pub fn loopback() -> Self {
        Self {
            allowed_hosts: LOOPBACK_HOSTS.iter().map(|&host| host.to_owned()).collect(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_tenant: DEFAULT_MAX_SESSIONS_PER_TENANT,
        }
    }
}

type McpService = StreamableHttpService<McpTools, LocalSessionManager>;

/// The MCP requests refused, by why (tenant access, or a session past a limit); shared with
/// the metrics endpoint.
#[derive(Debug, Default)]
pub struct McpRefusals {
    counts: [AtomicU64; 5],
}

/// Where [`McpRefusals`] counts the sessions refused past `max_sessions`.
const SESSIONS_LIMIT: usize = 3;
/// Where [`McpRefusals`] counts the sessions refused past `max_sessions_per_tenant`.
const TENANT_SESSIONS_LIMIT: usize = 4;

impl McpRefusals {
    /// Every reason, as the metrics label it, in the order of [`Self::counts`].
    pub const REASONS: [&'static str; 5] = [
        "unknown_token",
        "tenant_not_granted",
        "forwarded_certificate_unreadable",
        "sessions_limit",
        "tenant_sessions_limit",
    ];

    fn count(&self, refused: &AccessError) {
        let index = match refused {
            AccessError::UnknownToken => 0,
            AccessError::TenantNotGranted { .. } => 1,
            AccessError::ForwardedCertificateUnreadable { .. } => 2,
        };
        self.count_at(index);
    }

    fn count_at(&self, index: usize) {
        self.counts[index].fetch_add(1, Ordering::Relaxed);
    }

    /// The requests refused since the server started, for each of [`Self::REASONS`].
    pub fn counts(&self) -> [u64; 5] {
        self.counts
            .each_ref()
            .map(|count| count.load(Ordering::Relaxed))
    }
}

/// How the endpoint's connections are served: in TLS or not, and kept alive how.
#[derive(Clone)]
pub struct McpTransport {
    /// TLS, when toolplane serves it.
    pub tls: Option<ServedTls>,
    /// How long an HTTP/2 connection may be silent before it is pinged; `None` never pings.
    pub keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// The most connections served at once (`max_connections`); `None` sets no limit.
    pub max_connections: Option<usize>,
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTransport")
            .field("tls", &self.tls.is_some())
            .field("keepalive_interval", &self.keepalive_interval)
            .field("keepalive_timeout", &self.keepalive_timeout)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// Serves MCP on `listener` with `sessions` until dropped (dropping it closes its connections
/// too). Under the tenant access rules in force in `access` (none: any tenant), a request
/// naming (in its `toolplane-tenant-id` header) a tenant its caller is not granted (by its
/// client certificate or bearer token) is refused 403, and one sending a bearer token the
/// rules do not hold 401.
pub async fn serve(
    listener: TcpListener,
    tools: McpTools,
    endpoint: McpEndpoint,
    transport: McpTransport,
    access: Arc<LiveTenantAccess>,
    sessions: McpSessions,
    refusals: Arc<McpRefusals>,
) {
    let mut config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
        .with_allowed_hosts(endpoint.allowed_hosts.clone());
    if endpoint.allowed_hosts.is_empty() {
        config = config.disable_allowed_hosts();
    }
    let max_body_bytes = config.max_request_body_bytes;
    let service = Endpoint {
        registry: tools.registry().clone(),
        max_body_bytes,
        mcp: StreamableHttpService::new(move || Ok(tools.clone()), sessions.manager(), config),
        sessions,
        max_sessions: endpoint.max_sessions,
        max_sessions_per_tenant: endpoint.max_sessions_per_tenant,
        refusals,
        keepalive_interval: transport.keepalive_interval,
        keepalive_timeout: transport.keepalive_timeout,
    };
    let slots = ConnectionSlots::new(transport.max_connections);
    match transport.tls {
        Some(tls) => {
            let incoming = crate::grpc::server_tls::handshaken(listener, tls.for_http1_and_h2());
            serve_incoming(incoming, service, access, slots).await;
        }
        None => {
            let incoming = crate::grpc::accepting::accepted(listener);
            serve_incoming(incoming, service, access, slots).await;
        }
    }
}

/// The endpoint's service: the SDK's, and the sessions it holds.
#[derive(Clone)]
struct Endpoint {
    /// Whose revision each request is stamped with (`list_changed::RevisionAtArrival`).
    registry: Registry,
    mcp: McpService,
    sessions: McpSessions,
    max_sessions: usize,
    max_sessions_per_tenant: usize,
    /// Where the requests tenant access refuses are counted.
    refusals: Arc<McpRefusals>,
    /// The largest request body taken (the SDK's limit).
    max_body_bytes: usize,
    /// How long an HTTP/2 connection may be silent before it is pinged.
    keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    keepalive_timeout: Duration,
}

impl Endpoint {
    /// Answers `request`: 404 off [`MCP_PATH`], 503 for a request that would open one session
    /// more than `max_sessions`, 429 for one whose tenant would hold one more than
    /// `max_sessions_per_tenant`, 200 for a `DELETE` that ended its session and 404 for one of
    /// a session not held (ended, or never opened), else as the SDK does. The sessions are
    /// counted before the SDK opens one, so `initialize` requests arriving at the same instant
    /// may each find a place and go past the limit by their number (a session manager of our
    /// own refusing inside the SDK would close that gap, but the SDK answers its refusals 500).
    async fn answer(
        mut self,
        mut request: Request<Incoming>,
        access: ConnectionAccess,
    ) -> Result<McpResponse, Infallible> {
        if request.uri().path() != MCP_PATH {
            return Ok(plain(
                StatusCode::NOT_FOUND,
                b"not found: MCP is served at /mcp\n",
            ));
        }
        if let Some(refused) = refused_tenant(&request, &access, &self.refusals) {
            return Ok(refused);
        }
        let counted_for = match opens_a_session(&request) {
            false => None,
            true => match self.place_for_a_session(&request).await {
                Ok(tenant) => tenant,
                Err(refused) => return Ok(refused),
            },
        };
        let arrived = RevisionAtArrival(self.registry.revision());
        request.extensions_mut().insert(arrived);
        let (request, sent) = match request_bodies::read(request, self.max_body_bytes).await {
            Ok(read) => read,
            Err(refused) => return Ok(refused),
        };
        let ends_a_session = request.method() == hyper::Method::DELETE;
        if ends_a_session
            && let Some(id) = request.headers().get(HEADER_SESSION_ID)
            && !self.sessions.holds(id.to_str().unwrap_or_default()).await
        {
            // As the SDK answers any other request of a session it does not hold (MCP asks
            // 404 of them all); the SDK itself answers such a DELETE 202.
            return Ok(plain(
                StatusCode::NOT_FOUND,
                b"Not Found: Session not found",
            ));
        }
        let mut answer = self.mcp.call(request).await?;
        if ends_a_session && answer.status() == StatusCode::ACCEPTED {
            // The SDK answers a session it ended 202; it has ended it by then, and MCP's Python
            // SDK takes only 200 and 204 as ended, logging a warning at every session's end.
            *answer.status_mut() = StatusCode::OK;
        }
        if let Some(tenant) = counted_for
            && let Some(id) = answer.headers().get(HEADER_SESSION_ID)
            && let Ok(id) = id.to_str()
        {
            self.sessions.note_opened(tenant, id);
        }
        Ok(request_bodies::restated(answer, &sent))
    }

    /// Whether a request opening a session may: when it may, the tenant it names if the
    /// session is to be counted for it (with `max_sessions_per_tenant` in force); else the
    /// answer refusing it (503 past `max_sessions`, 429 past `max_sessions_per_tenant`, 400
    /// when its tenant header is not one, as the handler would answer its every later request).
    async fn place_for_a_session(
        &self,
        request: &Request<Incoming>,
    ) -> Result<Option<TenantId>, McpResponse> {
        let header = request.headers().get(TENANT_HEADER);
        let Some(tenant) = TenantId::from_header(header.map(|value| value.as_bytes())) else {
            return Err(json_rpc_error(
                StatusCode::BAD_REQUEST,
                &format!("header {TENANT_HEADER} must be an unsigned integer"),
            ));
        };
        if self.max_sessions > 0 && self.sessions.held().await >= self.max_sessions {
            self.refusals.count_at(SESSIONS_LIMIT);
            return Err(too_many_sessions(self.max_sessions));
        }
        if self.max_sessions_per_tenant == 0 {
            return Ok(None);
        }
        if self.sessions.held_by(tenant).await >= self.max_sessions_per_tenant {
            self.refusals.count_at(TENANT_SESSIONS_LIMIT);
            return Err(too_many_sessions_of(tenant, self.max_sessions_per_tenant));
        }
        Ok(Some(tenant))
    }
}

/// Whether `request` would open a session: a POST without a session, of a client of the
/// 2025-era protocols (an `initialize`; clients of 2026-07-28 name their protocol version on
/// every request and open none).
fn opens_a_session(request: &Request<Incoming>) -> bool {
    let headers = request.headers();
    request.method() == hyper::Method::POST
        && !headers.contains_key("mcp-session-id")
        && !headers.contains_key("mcp-protocol-version")
}

/// The answer to a request for a session over the limit: 503 with `Retry-After`, and a
/// JSON-RPC error saying what to do.
fn too_many_sessions(max_sessions: usize) -> McpResponse {
    let mut response = json_rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!(
            "toolplane holds its most MCP sessions ({max_sessions}, mcp_max_sessions): \
             end unused sessions (HTTP DELETE) or try again later"
        ),
    );
    response.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from(SESSION_RETRY_AFTER_SECONDS),
    );
    response
}

/// The answer to a request for a session that would take `tenant` past its limit: 429 with
/// `Retry-After`, and a JSON-RPC error saying what to do.
fn too_many_sessions_of(tenant: TenantId, max_sessions: usize) -> McpResponse {
    let mut response = json_rpc_error(
        StatusCode::TOO_MANY_REQUESTS,
        &format!(
            "tenant {} holds its most MCP sessions ({max_sessions}, \
             mcp_max_sessions_per_tenant): end unused sessions (HTTP DELETE) or try again later",
            tenant.0
        ),
    );
    response.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from(SESSION_RETRY_AFTER_SECONDS),
    );
    response
}

/// An HTTP answer of `status` whose body is a JSON-RPC error (no request id) with `message`.
fn json_rpc_error(status: StatusCode, message: &str) -> McpResponse {
    request_bodies::json_rpc_error(status, -32000, serde_json::Value::Null, message)
}

/// The answer to a request naming a tenant its caller is not granted (by its certificate or
/// the bearer token it sends): 403 and a JSON-RPC error saying why; to one sending a token the
/// rules do not hold, 401. A header that names no tenant is left to the handler, which says so.
fn refused_tenant(
    request: &Request<Incoming>,
    access: &ConnectionAccess,
    counted_in: &McpRefusals,
) -> Option<McpResponse> {
    let headers = request.headers();
    let refused = match access.grant_for_call(headers) {
        Ok(None) => return None,
        Ok(Some(grant)) => {
            let header = headers.get(TENANT_HEADER);
            let tenant = TenantId::from_header(header.map(|value| value.as_bytes()))?;
            grant.check(tenant).err()?
        }
        Err(refused) => refused,
    };
    crate::access::log_refused(&refused, crate::access::RefusedAt::Mcp);
    counted_in.count(&refused);
    Some(match refused {
        AccessError::UnknownToken => {
            let mut response = json_rpc_error(StatusCode::UNAUTHORIZED, &refused.to_string());
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            response
        }
        AccessError::TenantNotGranted { .. } => {
            json_rpc_error(StatusCode::FORBIDDEN, &refused.to_string())
        }
        // The proxy's header, not the caller's credentials, is at fault.
        AccessError::ForwardedCertificateUnreadable { .. } => {
            json_rpc_error(StatusCode::BAD_REQUEST, &refused.to_string())
        }
    })
}

async fn serve_incoming<IO>(
    incoming: impl Stream<Item = std::io::Result<IO>> + Send + 'static,
    service: Endpoint,
    access: Arc<LiveTenantAccess>,
    mut slots: ConnectionSlots,
) where
    IO: AsyncRead + AsyncWrite + ConnectionPeer + Unpin + Send + 'static,
{
    let mut incoming = std::pin::pin!(incoming);
    let mut connections = JoinSet::new();
    loop {
        // At `max_connections`, accepting waits for a connection to close.
        let slot = tokio::select! {
            slot = slots.take() => slot,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        tokio::select! {
            accepted = incoming.next() => match accepted {
                Some(Ok(io)) => {
                    let access =
                        ConnectionAccess::new(&access, io.peer_certificate(), io.peer_address());
                    let serving = serve_connection(io, service.clone(), access);
                    connections.spawn(slot.held_while(serving));
                }
                // Accepting already waited after failing (`grpc::accepting`).
                Some(Err(error)) => tracing::debug!(%error, "cannot accept an MCP connection"),
                None => return,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection<IO>(io: IO, service: Endpoint, access: ConnectionAccess)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (keepalive_interval, keepalive_timeout) =
        (service.keepalive_interval, service.keepalive_timeout);
    let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
        service.clone().answer(request, access.clone())
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    // As on the gRPC port: a client whose host vanished without closing its connection (and
    // its event stream) answers no PING, and is let go.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(keepalive_interval)
        .keep_alive_timeout(keepalive_timeout);
    let io = OpeningDeadline::new(io, OPENING_TIMEOUT);
    if let Err(error) = builder.serve_connection(TokioIo::new(io), handler).await {
        tracing::debug!(%error, "MCP connection ended");
    }
}

/// A plain-text answer of `status`.
fn plain(status: StatusCode, text: &'static [u8]) -> McpResponse {
    let mut response = Response::new(Full::new(Bytes::from_static(text)).boxed());
    *response.status_mut() = status;
    response
}
