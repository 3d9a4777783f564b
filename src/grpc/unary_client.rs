//! Unary gRPC calls to providers on the h2 crate: one multiplexed HTTP/2 connection per
//! endpoint, dialled on first use and again after it fails or the provider closes it, driven
//! by a task of its own; over TLS for an `https://` endpoint (see `provider_tls`). A stream
//! the provider did not process (refused, or left out by a GOAWAY) is sent again
//! ([`UnaryChannel::call_with_headers`]).
//!
//! Why not tonic's `Channel`: on the invocation path it costs a `tower::Buffer` task and
//! hyper's dispatch channel between the caller and the connection, two more task hand-offs per
//! call. Measured in a bare pass-through on the benchmark machine (BENCHMARKS.md), replacing
//! the `Channel` with this client cut CPU per call from 38 to 30 µs and the added latency at
//! concurrency 1 by about 30 µs. gRPC over HTTP/2 for unary calls is small (a 5-byte frame
//! prefix, three headers, `grpc-status` in the trailers), and tonic's own `Status` does the
//! status, message and details parsing (see the `answer` module), so this is the thin part
//! written here.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use h2::PingPong;
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, HeaderName, TE, USER_AGENT};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Method, Request, Uri};
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tonic::Status;

use super::answer::read_answer;
use super::coalesce::CoalescingIo;
use super::deadline::grpc_timeout;
use super::provider_tls::ProviderTls;
use super::stream_errors::{not_sent, transport, unprocessed};
use super::unary_calls::Calls;

/// The header a call's deadline travels in.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// Flow-control windows and send buffer, as hyper's HTTP/2 client sets them.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
const MAX_SEND_BUFFER: usize = 1024 * 1024;
/// How many streams at once a first connection to a provider opens before the provider's
/// SETTINGS arrive: the least RFC 9113 asks servers to allow (5.1.2), as grpc-go's client does.
const INITIAL_MAX_STREAMS: usize = 100;
/// How many times one call's stream is sent again after the provider left it unprocessed.
const MAX_REFUSED: u32 = 10;
/// The longest wait before a refused stream is sent again (the first goes again at once, the
/// next after 1 ms, doubling up to this).
const MAX_REFUSED_BACKOFF: Duration = Duration::from_millis(50);
/// The `user-agent` every call carries.
const USER_AGENT_VALUE: &str = concat!("toolplane/", env!("CARGO_PKG_VERSION"));

/// A provider endpoint's connection: cheap to share, reconnects by itself.
#[derive(Debug)]
pub struct UnaryChannel {
    authority: Authority,
    /// TLS and the name the provider's certificate must carry, for an `https://` endpoint.
    tls: Option<(ProviderTls, ServerName<'static>)>,
    connect_timeout: Duration,
    /// The open connection; `None` before the first call and after a failure.
    open: Mutex<Option<Open>>,
    /// Held while dialling, so concurrent callers share one new connection.
    dialling: tokio::sync::Mutex<u64>,
    /// How many streams at once the provider allowed on its last connection, which a new
    /// connection starts with until the provider's SETTINGS say (see [`handshake`]).
    max_streams: AtomicUsize,
}

/// How one stream of a call ended.
enum Attempt<Resp> {
    /// The provider answered it, or the call failed otherwise.
    Answered(Result<Resp, Status>),
    /// The provider did not process the stream (see [`unprocessed`]).
    Refused(Status),
}

/// An open connection: its number, a sender for new streams, and its calls.
#[derive(Debug, Clone)]
struct Open {
    generation: u64,
    sender: SendRequest<Bytes>,
    calls: Arc<Calls>,
    /// The connection's HTTP/2 PINGs (one at a time), to tell a dead connection from a slow
    /// peer.
    pings: Arc<tokio::sync::Mutex<Option<PingPong>>>,
    /// Stops the task that drives the connection, closing it.
    driver: tokio::task::AbortHandle,
    /// Set when the connection was found dead and closed: the next call dials again at once
    /// (the sender learns of the close only once the aborted task has been dropped).
    closed: Arc<AtomicBool>,
}

/// A new connection: what [`Open`] keeps of it.
struct Dialled {
    sender: SendRequest<Bytes>,
    pings: Option<PingPong>,
    driver: tokio::task::AbortHandle,
}

impl UnaryChannel {
    /// A channel to `endpoint` (`http://host[:port]`, port 80 when none is given, or
    /// `https://host[:port]`, port 443, checked against the public CAs), not yet connected.
    pub fn new(endpoint: &str, connect_timeout: Duration) -> Result<Self, String> {
        Self::with_tls(endpoint, connect_timeout, &ProviderTls::default())
    }

    /// As [`Self::new`], an `https://` endpoint connected to as `tls` says.
    pub fn with_tls(
        endpoint: &str,
        connect_timeout: Duration,
        tls: &ProviderTls,
    ) -> Result<Self, String> {
        let uri: Uri = endpoint
            .parse()
            .map_err(|error| format!("{endpoint} is not a URI: {error}"))?;
        let secure = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(format!("{endpoint} must start with http:// or https://")),
        };
        let authority = uri
            .authority()
            .filter(|authority| !authority.host().is_empty())
            .ok_or_else(|| format!("{endpoint} names no host"))?
            .clone();
        let tls = if secure {
            let name = ServerName::try_from(host(&authority).to_owned()).map_err(|error| {
                format!("{endpoint}: the host cannot be checked against a certificate: {error}")
            })?;
            Some((tls.clone(), name))
        } else {
            None
        };
        Ok(Self {
            authority,
            tls,
            connect_timeout,
            open: Mutex::new(None),
            dialling: tokio::sync::Mutex::new(0),
            max_streams: AtomicUsize::new(INITIAL_MAX_STREAMS),
        })
    }

    /// Calls `path` (`/package.Service/Method`) with `request`. `timeout` is sent as
    /// `grpc-timeout` for the server; enforcing it is left to the caller.
    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        path: &'static str,
        request: &Req,
        timeout: Option<Duration>,
    ) -> Result<Resp, Status> {
        self.call_with_headers(path, request, timeout, Vec::new())
            .await
    }

    /// As [`Self::call`], sending `headers` too.
    ///
    /// A stream the provider did not process (it refused it, or a GOAWAY left it out) is
    /// sent again on a new stream, up to 10 times, at once the first time and then after a
    /// wait growing from 1 ms to 50 ms, with
    /// `grpc-timeout` reduced by the time gone. A server at its limit of streams at once can
    /// refuse one the client opened as soon as an earlier one ended, before the server had
    /// counted that one closed (gRPC C-core does, behind its `max_concurrent_streams`), and a
    /// server closing a connection (at its maximum age, as gRPC servers are often told to in
    /// Kubernetes) leaves out the streams that crossed its GOAWAY. gRPC's own clients retry
    /// such streams transparently (gRFC A6), whatever the retry policy.
    pub async fn call_with_headers<Req: Message, Resp: Message + Default>(
        &self,
        path: &'static str,
        request: &Req,
        timeout: Option<Duration>,
        headers: Vec<(http::HeaderName, HeaderValue)>,
    ) -> Result<Resp, Status> {
        let message = frame(request);
        let started = std::time::Instant::now();
        let mut refused = 0;
        loop {
            let remaining = timeout.map(|t| t.saturating_sub(started.elapsed()));
            match self
                .attempt(path, message.clone(), remaining, &headers)
                .await
            {
                Attempt::Refused(status) if refused < MAX_REFUSED => {
                    tracing::debug!(authority = %self.authority, %status, refused, "stream not processed by the provider; sending it again");
                    if refused > 0 {
                        let backoff = Duration::from_millis(1 << (refused - 1));
                        tokio::time::sleep(backoff.min(MAX_REFUSED_BACKOFF)).await;
                    }
                    refused += 1;
                }
                Attempt::Refused(status) => return Err(not_sent(status)),
                Attempt::Answered(answer) => return answer,
            }
        }
    }

    /// One stream of a call: its answer, or the provider's refusal of the stream.
    async fn attempt<Resp: Message + Default>(
        &self,
        path: &'static str,
        message: Bytes,
        timeout: Option<Duration>,
        headers: &[(http::HeaderName, HeaderValue)],
    ) -> Attempt<Resp> {
        let (mut sender, calls) = match self.ready().await {
            Ok(ready) => ready,
            Err(status) => return Attempt::Answered(Err(not_sent(status))),
        };
        let _in_flight = calls.begin();
        let head = match self.head(path, timeout, headers) {
            Ok(head) => head,
            Err(status) => return Attempt::Answered(Err(status)),
        };
        let answered = match sender.send_request(head, false) {
            Ok((mut answer, mut request_body)) => match request_body.send_data(message, true) {
                Ok(()) => answer.await.map(|answer| (answer, request_body)),
                // The stream ended before its message could be sent (a GOAWAY or a reset
                // crossed it): its answer, ready now, says how; h2's own error only says the
                // stream is no longer active.
                Err(send_error) => match (&mut answer).now_or_never() {
                    Some(answered) => answered.map(|answer| (answer, request_body)),
                    None => Err(send_error),
                },
            },
            Err(error) => Err(error),
        };
        match answered {
            Ok((answer, request_body)) => {
                Attempt::Answered(read_answer(answer, sender, request_body, &calls).await)
            }
            Err(error) if unprocessed(&error) => Attempt::Refused(transport(error)),
            Err(error) => Attempt::Answered(Err(transport(error))),
        }
    }

    /// The request head of a call to `path`.
    fn head(
        &self,
        path: &'static str,
        timeout: Option<Duration>,
        headers: &[(http::HeaderName, HeaderValue)],
    ) -> Result<Request<()>, Status> {
        let mut head = Request::builder()
            .method(Method::POST)
            .uri(
                Uri::builder()
                    .scheme(if self.tls.is_some() {
                        Scheme::HTTPS
                    } else {
                        Scheme::HTTP
                    })
                    .authority(self.authority.clone())
                    .path_and_query(PathAndQuery::from_static(path))
                    .build()
                    .map_err(|error| Status::internal(error.to_string()))?,
            )
            // Static names and values: nothing is copied for them.
            .header(CONTENT_TYPE, HeaderValue::from_static("application/grpc"))
            .header(TE, HeaderValue::from_static("trailers"))
            .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE))
            .body(())
            .map_err(|error| Status::internal(error.to_string()))?;
        if let Some(value) = timeout.and_then(|t| {
            // The string's buffer becomes the value's, uncopied.
            HeaderValue::from_maybe_shared(Bytes::from(grpc_timeout(t))).ok()
        }) {
            head.headers_mut().insert(GRPC_TIMEOUT, value);
        }
        for (name, value) in headers {
            head.headers_mut().insert(name.clone(), value.clone());
        }
        Ok(head)
    }

    /// A connection ready for another stream: the open one, or a new one when there is none
    /// or it has failed.
    async fn ready(&self) -> Result<(SendRequest<Bytes>, Arc<Calls>), Status> {
        for _ in 0..2 {
            let open = self.lock().clone();
            let generation = match open {
                Some(open) if open.closed.load(Ordering::Acquire) => open.generation,
                Some(open) => match open.sender.ready().await {
                    Ok(sender) => return Ok((sender, open.calls)),
                    Err(_) => open.generation,
                },
                None => 0,
            };
            let mut dialled = self.dialling.lock().await;
            if *dialled == generation {
                if let Some(open) = self.lock().as_ref() {
                    let allowed = open.sender.current_max_send_streams();
                    self.max_streams.store(allowed, Ordering::Relaxed);
                }
                let connection = self.dial().await?;
                *dialled += 1;
                *self.lock() = Some(Open {
                    generation: *dialled,
                    sender: connection.sender,
                    calls: Arc::default(),
                    pings: Arc::new(tokio::sync::Mutex::new(connection.pings)),
                    driver: connection.driver,
                    closed: Arc::default(),
                });
            }
        }
        Err(Status::unavailable(format!(
            "the connection to {} failed as it was opened",
            self.authority
        )))
    }

    /// Whether the open connection answers an HTTP/2 PING within `timeout` (`true` when none
    /// is open). One that does not is closed, failing its calls `UNAVAILABLE`, and the next
    /// call dials again: a peer that vanished without closing the connection (a node lost, a
    /// NAT entry dropped) would otherwise hold every call until its deadline, for as long as
    /// TCP takes to give up (15 minutes on Linux). Used when a health check goes unanswered,
    /// so pings stay as rare as grpc-go servers' keepalive policy wants (frequent pings
    /// without answers between them are refused with GOAWAY `too_many_pings`).
    pub async fn check_connection(&self, timeout: Duration) -> bool {
        let Some(open) = self.lock().clone() else {
            return true;
        };
        let ping = async {
            match open.pings.lock().await.as_mut() {
                Some(pings) => pings.ping(h2::Ping::opaque()).await.is_ok(),
                None => true,
            }
        };
        let answered = tokio::time::timeout(timeout, ping).await.unwrap_or(false);
        if !answered {
            tracing::warn!(authority = %self.authority, ?timeout, "provider connection did not answer a PING; closed");
            open.closed.store(true, Ordering::Release);
            open.driver.abort();
        }
        answered
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Open>> {
        // The guarded value is a handle that is replaced whole: a panic elsewhere cannot leave
        // it half-written.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens a connection (TLS for `https://`) and starts the task that drives it.
    async fn dial(&self) -> Result<Dialled, Status> {
        let authority = &self.authority;
        let default_port = if self.tls.is_some() { 443 } else { 80 };
        let port = authority.port_u16().unwrap_or(default_port);
        let max_streams = self.max_streams.load(Ordering::Relaxed);
        let connect = async {
            let stream = TcpStream::connect((host(authority), port)).await?;
            stream.set_nodelay(true)?;
            match &self.tls {
                None => handshake(stream, authority, max_streams).await,
                Some((tls, name)) => {
                    let stream = tls.connector().connect(name.clone(), stream).await?;
                    handshake(stream, authority, max_streams).await
                }
            }
        };
        tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| {
                Status::unavailable(format!(
                    "connecting to {authority} took longer than {:?}",
                    self.connect_timeout
                ))
            })?
            .map_err(|error| {
                let hint = match &self.tls {
                    Some((tls, _)) => tls.failure_hint(&error),
                    None => String::new(),
                };
                Status::unavailable(format!("cannot connect to {authority}: {error}{hint}"))
            })
    }
}

/// The host of `authority`, without the brackets of an IPv6 address.
fn host(authority: &Authority) -> &str {
    authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
}

/// Starts HTTP/2 on an open connection, and the task that drives it. Until the provider's
/// SETTINGS arrive, at most `max_streams` streams are opened at once: h2 would open any
/// number, and a burst of calls on a new connection would overrun a provider's lower limit
/// (gRPC C-core refuses the streams beyond it, and past a point answers ENHANCE_YOUR_CALM).
async fn handshake<T>(
    stream: T,
    authority: &Authority,
    max_streams: usize,
) -> std::io::Result<Dialled>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, mut connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .enable_push(false)
        .initial_max_send_streams(max_streams)
        .handshake::<_, Bytes>(CoalescingIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    let pings = connection.ping_pong();
    let authority = authority.clone();
    let driver = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%authority, %error, "provider connection closed");
        }
    });
    Ok(Dialled {
        sender,
        pings,
        driver: driver.abort_handle(),
    })
}

/// A message with its gRPC frame prefix (uncompressed).
fn frame(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(len + 5);
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    // Encoding into a buffer with room for the whole message cannot fail.
    let _ = message.encode(&mut out);
    out.freeze()
}

#[cfg(test)]
#[path = "unary_client_tests.rs"]
mod tests;
