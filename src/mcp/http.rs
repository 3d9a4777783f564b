//! The MCP endpoint: MCP's Streamable HTTP transport at `/mcp` on the `mcp_listen` address,
//! served by the official Rust MCP SDK (rmcp) over HTTP/1.1 and HTTP/2, in TLS when toolplane
//! serves TLS (the same certificate, and the same client certificates asked for).
//!
//! Sessions are kept in memory (`Mcp-Session-Id`), so a client that initializes receives
//! `notifications/tools/list_changed` on its GET stream. Requests whose `Host` header is not
//! one of `mcp_allowed_hosts` are refused (403), which stops DNS rebinding from a browser.
//! Connections are served as accepted, not through `grpc::coalesce`: its put-off flushes suit
//! HTTP/2's, and held server-sent events back until the next write.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tonic::transport::server::TcpIncoming;
use tower::Service;

use super::handler::McpTools;
use crate::grpc::server_tls::ServedTls;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";
/// How long a client may take to send a request's headers before its connection is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an open SSE stream is sent a comment, so proxies keep it open.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Who may reach the MCP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpEndpoint {
    /// The `Host` header values (a host, or `host:port`) requests may carry; empty accepts any.
    pub allowed_hosts: Vec<String>,
}

/// The hosts the MCP endpoint answers to by default: the loopback names.
pub const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1"];

impl McpEndpoint {
    /// An endpoint answering requests to [`LOOPBACK_HOSTS`] only.
    pub fn loopback() -> Self {
        Self {
            allowed_hosts: LOOPBACK_HOSTS.iter().map(|&host| host.to_owned()).collect(),
        }
    }
}

type McpService = StreamableHttpService<McpTools, LocalSessionManager>;

/// Serves MCP on `listener` until dropped (dropping it closes its connections too).
pub async fn serve(
    listener: TcpListener,
    tools: McpTools,
    endpoint: McpEndpoint,
    tls: Option<ServedTls>,
) {
    let mut config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
        .with_allowed_hosts(endpoint.allowed_hosts.clone());
    if endpoint.allowed_hosts.is_empty() {
        config = config.disable_allowed_hosts();
    }
    let service: McpService = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    match tls {
        Some(tls) => {
            let incoming = crate::grpc::server_tls::handshaken(listener, tls.for_http1_and_h2());
            serve_incoming(incoming, service).await;
        }
        None => {
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            serve_incoming(incoming, service).await;
        }
    }
}

async fn serve_incoming<IO>(
    incoming: impl Stream<Item = std::io::Result<IO>> + Send + 'static,
    service: McpService,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut incoming = std::pin::pin!(incoming);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = incoming.next() => match accepted {
                Some(Ok(io)) => {
                    connections.spawn(serve_connection(io, service.clone()));
                }
                Some(Err(error)) => {
                    // As when out of file descriptors: wait rather than spin.
                    tracing::warn!(%error, "cannot accept an MCP connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                None => return,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection<IO>(io: IO, service: McpService)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
        let mut service = service.clone();
        async move {
            if request.uri().path() != MCP_PATH {
                return Ok::<_, Infallible>(not_found());
            }
            service.call(request).await
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    if let Err(error) = builder.serve_connection(TokioIo::new(io), handler).await {
        tracing::debug!(%error, "MCP connection ended");
    }
}

fn not_found() -> Response<BoxBody<Bytes, Infallible>> {
    let mut response =
        Response::new(Full::new(Bytes::from_static(b"not found: MCP is served at /mcp\n")).boxed());
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}
