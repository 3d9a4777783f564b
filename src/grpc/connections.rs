//! Serving accepted connections: the accept loop, one hyper HTTP/2 server per connection (an
//! HTTP/1 request is answered in words that this is gRPC), the caller's deadline, and a graceful
//! stop. A connection that does not open (send HTTP/2's preface) within
//! [`OPENING_TIMEOUT`] is closed ([`super::opening_deadline`]).
//!
//! This does what tonic's `Server::serve_with_incoming_shutdown` does for toolplane's services
//! (HTTP/2 only, keepalive, `grpc-timeout` enforced, GOAWAY and a drain on stop), so that each
//! connection can be given the executor of [`super::call_scheduling`], which tonic's server does
//! not allow.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::Status;
use tonic::body::Body;
use tower::{Service, ServiceExt};

use super::call_scheduling::{CallScheduling, ConnectionDriver};
use super::deadline::{CallDeadline, DeadlineBody, timeout_of};
use super::opening_deadline::{OPENING_TIMEOUT, OpeningDeadline};
use super::rpc_stats::RpcStats;
use super::server_tls::ConnectionPeer;
use crate::access::{ConnectionAccess, LiveTenantAccess};

/// Tenant access as the connections rule it: the rules, and the stats that count the calls
/// refused here, before they reach the metered services (an unknown bearer token).
#[derive(Debug, Clone)]
pub struct RuledAccess {
    /// The `[[tenant_access]]` rules in force.
    pub rules: Arc<LiveTenantAccess>,
    /// Where refused calls are counted, as the metering layer counts the rest; `None` counts
    /// nothing (no metrics endpoint and no spans).
    pub counted_in: Option<Arc<RpcStats>>,
}

/// How every connection is served.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    /// Where a connection's calls run.
    pub scheduling: CallScheduling,
    /// How long a connection may be silent before it is pinged; `None` never pings.
    pub keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// The most streams (calls and watches) one connection may have open at once, announced
    /// to the peer in HTTP/2 SETTINGS; `None` sets no limit.
    pub max_concurrent_streams: Option<u32>,
    /// The most connections served at once; at it, accepting waits for one to close (new
    /// callers wait in the listen backlog); `None` sets no limit.
    pub max_connections: Option<usize>,
}

/// What [`serve_connections`] serves: tonic's routes, layered or not.
pub trait Routes<B>:
    Service<
        http::Request<Body>,
        Response = http::Response<B>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S, B> Routes<B> for S where
    S: Service<
            http::Request<Body>,
            Response = http::Response<B>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// The body of an answer [`Routes`] give.
pub trait AnswerBody:
    http_body::Body<Data = Bytes, Error: Into<tonic::codegen::StdError>> + Send + 'static
{
}

impl<B> AnswerBody for B where
    B: http_body::Body<Data = Bytes, Error: Into<tonic::codegen::StdError>> + Send + 'static
{
}

/// Serves every connection `incoming` yields with `service` until `stop` completes; then stops
/// accepting, asks each connection to finish (HTTP/2 GOAWAY: calls in flight complete, new
/// ones are refused) and returns when all have closed.
///
/// With `access`, each connection's grant (the tenants its client certificate may act for) is
/// worked out as it is accepted; each call is handed it (on a connection from a proxy listed in
/// `forwarded_client_cert_proxies`, the grant of the certificate the call's
/// `x-forwarded-client-cert` names instead), with the tenants of the bearer token it sends, as
/// a request extension (`Arc<CallerGrant>`, checked by the adapters as they read
/// the envelope). A call sending a token the rules do not hold is answered UNAUTHENTICATED,
/// and counted in `access.counted_in`.
pub async fn serve_connections<S, B, I, IO>(
    incoming: I,
    service: S,
    settings: ConnectionSettings,
    access: Option<RuledAccess>,
    stop: impl Future<Output = ()>,
) where
    S: Routes<B>,
    B: AnswerBody,
    I: Stream<Item = std::io::Result<IO>>,
    IO: AsyncRead + AsyncWrite + ConnectionPeer + Unpin + Send + 'static,
{
    let (stopping, stop_seen) = tokio::sync::watch::channel(());
    let mut slots = ConnectionSlots::new(settings.max_connections);
    {
        let mut incoming = pin!(incoming);
        let mut stop = pin!(stop);
        loop {
            let slot = tokio::select! {
                () = &mut stop => break,
                slot = slots.take() => slot,
            };
            tokio::select! {
                () = &mut stop => break,
                accepted = incoming.next() => match accepted {
                    Some(Ok(io)) => {
                        let calls = Calls {
                            service: service.clone(),
                            access: access.as_ref().map(|ruled| {
                                ConnectionAccess::new(
                                    &ruled.rules,
                                    io.peer_certificate(),
                                    io.peer_address(),
                                )
                            }),
                            refusals_counted_in: access
                                .as_ref()
                                .and_then(|ruled| ruled.counted_in.clone()),
                        };
                        let serving = serve_connection(io, calls, settings, stop_seen.clone());
                        tokio::spawn(slot.held_while(serving));
                    }
                    Some(Err(error)) => tracing::debug!(%error, "accepting a connection failed"),
                    None => break,
                },
            }
        }
    }
    let _ = stopping.send(());
    drop(stop_seen);
    stopping.closed().await;
}

/// The connections a port may serve at once (`max_connections`): one slot each, given back
/// when it closes.
pub(crate) struct ConnectionSlots {
    /// The slots free; `None` sets no limit.
    free: Option<Arc<tokio::sync::Semaphore>>,
    max: usize,
    /// When waiting for a slot was last logged.
    warned_at: Option<std::time::Instant>,
}

/// One connection's slot (none when connections are not limited), given back when dropped.
pub(crate) struct ConnectionSlot {
    /// Held for its drop, which gives the slot back.
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl ConnectionSlot {
    /// `serving` (a connection served), holding the slot until it ends.
    pub(crate) async fn held_while(self, serving: impl Future<Output = ()>) {
        serving.await;
        // The connection closed: another may be accepted.
        drop(self);
    }
}

/// How often waiting for a connection slot is logged at most.
const SLOTS_WARNING_INTERVAL: Duration = Duration::from_secs(60);

impl ConnectionSlots {
    /// `max` slots; `None`, no limit.
    pub(crate) fn new(max: Option<usize>) -> Self {
        // A semaphore panics past MAX_PERMITS (2^61 on 64 bits): no bound in practice.
        let max = max.map(|max| max.min(tokio::sync::Semaphore::MAX_PERMITS));
        Self {
            free: max.map(|max| Arc::new(tokio::sync::Semaphore::new(max))),
            max: max.unwrap_or(0),
            warned_at: None,
        }
    }

    /// A slot for the next connection, once one is free (at once with no limit); saying so
    /// (WARN, at most once a minute) when it has to wait.
    pub(crate) async fn take(&mut self) -> ConnectionSlot {
        let Some(free) = &self.free else {
            return ConnectionSlot { _permit: None };
        };
        if let Ok(slot) = Arc::clone(free).try_acquire_owned() {
            return ConnectionSlot {
                _permit: Some(slot),
            };
        }
        if (self.warned_at).is_none_or(|at| at.elapsed() >= SLOTS_WARNING_INTERVAL) {
            self.warned_at = Some(std::time::Instant::now());
            tracing::warn!(
                max_connections = self.max,
                "serving max_connections connections: new ones wait to be accepted until one \
                 closes"
            );
        }
        let slot = Arc::clone(free).acquire_owned().await;
        ConnectionSlot {
            _permit: Some(slot.expect("the semaphore is never closed")),
        }
    }
}

async fn serve_connection<S, B, IO>(
    io: IO,
    calls: Calls<S>,
    settings: ConnectionSettings,
    mut stop_seen: tokio::sync::watch::Receiver<()>,
) where
    S: Routes<B>,
    B: AnswerBody,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut driver, executor) = ConnectionDriver::new(settings.scheduling);
    // hyper-util tells HTTP/2 from HTTP/1 by the connection's first bytes. HTTP/1 is served
    // only to say, in words, that this is gRPC ([`refusal_of_http1`]): a browser, curl or an
    // HTTP health check would otherwise read HTTP/2 frames as an "HTTP/0.9" answer, or nothing.
    let mut builder = hyper_util::server::conn::auto::Builder::new(executor);
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(false)
        .header_read_timeout(HTTP1_HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.keepalive_interval)
        .keep_alive_timeout(settings.keepalive_timeout)
        .max_concurrent_streams(settings.max_concurrent_streams);
    let io = OpeningDeadline::new(io, OPENING_TIMEOUT);
    let mut connection = pin!(builder.serve_connection(TokioIo::new(io), calls));
    let mut stopping = false;
    loop {
        tokio::select! {
            outcome = poll_fn(|cx| driver.poll_connection(cx, connection.as_mut())) => {
                if let Err(error) = outcome {
                    tracing::debug!(%error, "a connection ended with an error");
                }
                break;
            }
            changed = stop_seen.changed(), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The services as hyper calls them: the request body read as tonic's, and the call ended
/// `DEADLINE_EXCEEDED` when the caller's `grpc-timeout` passes before its answer has begun, or
/// before a streamed answer has ended ([`DeadlineBody`]).
#[derive(Clone)]
struct Calls<S> {
    service: S,
    /// Where tenant access is ruled: what the connection's caller is granted.
    access: Option<ConnectionAccess>,
    /// Where the calls tenant access refuses here are counted.
    refusals_counted_in: Option<Arc<RpcStats>>,
}

impl<S, B> hyper::service::Service<http::Request<Incoming>> for Calls<S>
where
    // The first bound names `B` for the compiler; `Routes` adds the rest.
    S: Service<http::Request<Body>, Response = http::Response<B>> + Routes<B>,
    B: AnswerBody,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn call(&self, mut request: http::Request<Incoming>) -> Self::Future {
        if request.version() != http::Version::HTTP_2 {
            return Box::pin(std::future::ready(Ok(refusal_of_http1(&request))));
        }
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|value| timeout_of(value.as_bytes()));
        if let Some(at) =
            deadline.and_then(|timeout| std::time::Instant::now().checked_add(timeout))
        {
            request.extensions_mut().insert(CallDeadline(at));
        }
        if let Some(access) = &self.access {
            match access.grant_for_call(request.headers()) {
                Ok(Some(grant)) => {
                    request.extensions_mut().insert(grant);
                }
                Ok(None) => {}
                Err(refused) => {
                    crate::access::log_refused(&refused, crate::access::RefusedAt::Grpc);
                    let status = Status::from(refused);
                    if let Some(stats) = &self.refusals_counted_in {
                        stats.refused(request.uri().path(), status.code());
                    }
                    return Box::pin(std::future::ready(Ok(status.into_http())));
                }
            }
        }
        let answer = self.service.clone().oneshot(request.map(Body::new));
        Box::pin(async move {
            let Some(timeout) = deadline else {
                return Ok(answer.await?.map(Body::new));
            };
            let mut deadline = Box::pin(tokio::time::sleep(timeout));
            tokio::select! {
                biased;
                answer = answer => Ok(answer?.map(|body| Body::new(DeadlineBody::new(body, deadline)))),
                () = &mut deadline => Ok(Status::deadline_exceeded(format!(
                    "the call's deadline ({timeout:?}, its grpc-timeout) passed before \
                     toolplane answered"
                ))
                .into_http()),
            }
        })
    }
}

/// How long an HTTP/1 caller may take to send its request's headers.
const HTTP1_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The answer to a request that came over HTTP/1: 505 (HTTP Version Not Supported), and in
/// words what is served here and how to call it, as gRPC needs HTTP/2. The connection is
/// closed after it.
fn refusal_of_http1<B>(request: &http::Request<B>) -> http::Response<Body> {
    let address = request
        .headers()
        .get(http::header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("HOST:PORT");
    tracing::debug!(
        path = %request.uri().path(),
        version = ?request.version(),
        "an HTTP/1 request to the gRPC address was answered 505"
    );
    let text = format!(
        "toolplane serves gRPC at this address, which needs HTTP/2; this request came over \
         {:?}.\nCall it with a gRPC client, for example `grpcurl -plaintext {address} list` \
         (`-cacert CA.pem` in place of `-plaintext` when it serves TLS).\nPrometheus metrics \
         are served at /metrics on metrics_listen, and MCP clients at /mcp on mcp_listen, when \
         those are set.\n",
        request.version()
    );
    let mut answer = http::Response::new(Body::new(http_body_util::Full::new(Bytes::from(text))));
    *answer.status_mut() = http::StatusCode::HTTP_VERSION_NOT_SUPPORTED;
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

#[cfg(test)]
#[path = "connections_tests.rs"]
mod tests;
