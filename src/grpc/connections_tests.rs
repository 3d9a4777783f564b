use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tonic::Code;
use tonic::server::NamedService;

use super::*;
use crate::grpc::unary_client::UnaryChannel;

/// Answers by path: `TaskId` with the id of the task it ran on (as a FAILED_PRECONDITION
/// message, so no message type is needed), `Slow` after 10 s, `Late` with its task id after
/// 300 ms, `PanicInBody` with headers and then a body that panics, `SilentStream` with headers
/// and then nothing.
#[derive(Clone)]
struct Probe;

impl NamedService for Probe {
    const NAME: &'static str = "test.Probe";
}

struct PanickingBody;

impl http_body::Body for PanickingBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
        panic!("a body bug");
    }
}

/// A streamed answer with nothing to send yet, ever.
struct Silent;

impl http_body::Body for Silent {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
        Poll::Pending
    }
}

impl Service<http::Request<Body>> for Probe {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        Box::pin(async move {
            if path.ends_with("SilentStream") {
                return Ok(http::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(Body::new(Silent))
                    .expect("a valid answer"));
            }
            if path.ends_with("PanicInBody") {
                return Ok(http::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(Body::new(PanickingBody))
                    .expect("a valid answer"));
            }
            match path.rsplit('/').next() {
                Some("Slow") => tokio::time::sleep(Duration::from_secs(10)).await,
                Some("Late") => tokio::time::sleep(Duration::from_millis(300)).await,
                _ => tokio::task::yield_now().await,
            }
            Ok(Status::failed_precondition(tokio::task::id().to_string()).into_http())
        })
    }
}

/// Serves [`Probe`] on 127.0.0.1 until the test ends; a channel to it (one connection).
async fn serve_probe(scheduling: CallScheduling) -> UnaryChannel {
    let addr = serve_probe_at(scheduling).await;
    UnaryChannel::new(&format!("http://{addr}"), Duration::from_secs(1)).expect("valid")
}

/// Serves [`Probe`] on 127.0.0.1 until the test ends; its address.
async fn serve_probe_at(scheduling: CallScheduling) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let settings = ConnectionSettings {
        scheduling,
        keepalive_interval: None,
        keepalive_timeout: Duration::from_secs(20),
        max_concurrent_streams: None,
        max_connections: None,
    };
    tokio::spawn(serve_connections(
        super::super::coalesce::incoming(listener),
        Probe,
        settings,
        None,
        std::future::pending(),
    ));
    addr
}

async fn call(
    channel: &UnaryChannel,
    path: &'static str,
    timeout: Option<Duration>,
) -> tonic::Status {
    channel
        .call::<_, prost_types::Duration>(path, &prost_types::Duration::default(), timeout)
        .await
        .expect_err("the probe answers with a status")
}

async fn task_of_call(channel: &UnaryChannel) -> String {
    let answer = call(channel, "/test.Probe/TaskId", None).await;
    assert_eq!(answer.code(), Code::FailedPrecondition, "{answer:?}");
    answer.message().to_owned()
}

#[tokio::test]
async fn per_connection_calls_run_on_their_connections_task_and_per_call_ones_do_not() {
    let shared = serve_probe(CallScheduling::PerConnection).await;
    assert_eq!(task_of_call(&shared).await, task_of_call(&shared).await);

    let own = serve_probe(CallScheduling::PerCall).await;
    assert_ne!(task_of_call(&own).await, task_of_call(&own).await);
}

/// An HTTP/1.1 request (curl, a browser, an HTTP health check) is answered 505 in words, and
/// the connection closed; gRPC is served on the same address as before.
#[tokio::test]
async fn an_http1_request_is_told_this_address_serves_grpc() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = serve_probe_at(CallScheduling::PerCall).await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: toolplane.example:50051\r\n\r\n")
        .await
        .expect("request sent");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("answered and closed")
        .expect("read");
    assert!(
        answer.starts_with("HTTP/1.1 505 HTTP Version Not Supported\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(
        answer.contains("grpcurl -plaintext toolplane.example:50051 list"),
        "{answer}"
    );
    let channel =
        UnaryChannel::new(&format!("http://{addr}"), Duration::from_secs(1)).expect("valid");
    assert!(!task_of_call(&channel).await.is_empty());
}

#[tokio::test]
async fn a_call_past_its_grpc_timeout_is_ended_deadline_exceeded() {
    for scheduling in [CallScheduling::PerConnection, CallScheduling::PerCall] {
        let channel = serve_probe(scheduling).await;
        let started = std::time::Instant::now();
        let late = call(
            &channel,
            "/test.Probe/Slow",
            Some(Duration::from_millis(200)),
        )
        .await;
        assert_eq!(
            late.code(),
            Code::DeadlineExceeded,
            "{scheduling}: {late:?}"
        );
        assert!(late.message().contains("grpc-timeout"), "{late:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not the 10 s sleep"
        );
        assert_eq!(
            call(&channel, "/test.Probe/TaskId", Some(Duration::from_secs(5)))
                .await
                .code(),
            Code::FailedPrecondition,
            "{scheduling}: a call within its deadline is answered"
        );
    }
}

#[tokio::test]
async fn a_stream_still_open_at_its_grpc_timeout_is_ended_deadline_exceeded() {
    for scheduling in [CallScheduling::PerConnection, CallScheduling::PerCall] {
        let channel = serve_probe(scheduling).await;
        let ended = tokio::time::timeout(
            Duration::from_secs(5),
            call(
                &channel,
                "/test.Probe/SilentStream",
                Some(Duration::from_millis(200)),
            ),
        )
        .await
        .expect("ended by the server, not left open");
        assert_eq!(
            ended.code(),
            Code::DeadlineExceeded,
            "{scheduling}: {ended:?}"
        );
        assert!(ended.message().contains("stream ends"), "{ended:?}");
    }
}

#[tokio::test]
async fn a_call_that_panics_while_answering_ends_alone() {
    for scheduling in [CallScheduling::PerConnection, CallScheduling::PerCall] {
        let channel = serve_probe(scheduling).await;
        task_of_call(&channel).await;
        let (in_flight, panicked) = tokio::join!(call(&channel, "/test.Probe/Late", None), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            call(&channel, "/test.Probe/PanicInBody", None).await
        });
        assert_ne!(panicked.code(), Code::Ok, "{scheduling}: {panicked:?}");
        assert_eq!(
            in_flight.code(),
            Code::FailedPrecondition,
            "{scheduling}: the call in flight on the same connection is answered: {in_flight:?}"
        );
    }
}

/// Any `max_connections` is taken: one past what a semaphore holds (2^61) is no bound in
/// practice, not a panic at the start.
#[tokio::test]
async fn any_max_connections_is_taken() {
    let mut slots = ConnectionSlots::new(Some(usize::MAX));
    let _slot = slots.take().await;
    let mut one = ConnectionSlots::new(Some(1));
    let free = one.free.clone().expect("a limit");
    let taken = one.take().await;
    assert!(free.try_acquire().is_err(), "the one slot is taken");
    drop(taken);
    assert!(free.try_acquire().is_ok(), "and given back");
}
