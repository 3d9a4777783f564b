//! Tests of the unary client: endpoints, framing, status mapping, and calls to real servers.
use super::*;
use crate::grpc::answer::{from_http_status, unframe};
use crate::grpc::stream_errors::refusal_hint;
use bytes::Bytes;
use futures_util::FutureExt;
use tonic::Code;

#[test]
fn endpoints_need_http_or_https_and_a_host() {
    let timeout = Duration::from_secs(1);
    assert!(UnaryChannel::new("http://127.0.0.1:50051", timeout).is_ok());
    assert!(UnaryChannel::new("http://[::1]:50051", timeout).is_ok());
    let https = UnaryChannel::new("https://127.0.0.1:1", timeout).expect("TLS");
    assert!(https.tls.is_some());
    assert!(UnaryChannel::new("https://[::1]:1", timeout).is_ok());
    assert!(UnaryChannel::new("https://tools.example.com", timeout).is_ok());
    assert!(UnaryChannel::new("ftp://127.0.0.1:1", timeout).is_err());
    assert!(UnaryChannel::new("127.0.0.1:50051", timeout).is_err());
    assert!(UnaryChannel::new("http://provider.tools.svc", timeout).is_ok());
    assert!(UnaryChannel::new("http://", timeout).is_err());
}

#[test]
fn frames_round_trip() {
    let message = prost_types::Duration {
        seconds: 7,
        nanos: 9,
    };
    let decoded: prost_types::Duration = unframe(frame(&message)).expect("decodes");
    assert_eq!(decoded, message);
}

#[test]
fn bad_frames_are_internal_errors() {
    let short = unframe::<prost_types::Duration>(Bytes::from_static(&[0, 0, 0]));
    assert_eq!(short.expect_err("short").code(), Code::Internal);
    let compressed = unframe::<prost_types::Duration>(Bytes::from_static(&[1, 0, 0, 0, 0]));
    assert!(
        compressed
            .expect_err("compressed")
            .message()
            .contains("compressed")
    );
    let truncated = unframe::<prost_types::Duration>(Bytes::from_static(&[0, 0, 0, 0, 9, 8]));
    assert_eq!(truncated.expect_err("truncated").code(), Code::Internal);
}

#[test]
fn http_errors_map_as_grpc_says() {
    assert_eq!(
        from_http_status(http::StatusCode::NOT_FOUND).code(),
        Code::Unimplemented
    );
    assert_eq!(
        from_http_status(http::StatusCode::SERVICE_UNAVAILABLE).code(),
        Code::Unavailable
    );
    assert_eq!(
        from_http_status(http::StatusCode::IM_A_TEAPOT).code(),
        Code::Unknown
    );
}

/// A tonic server with only grpc.health.v1 on `listener`, until `stop` fires.
async fn health_server(
    listener: tokio::net::TcpListener,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let (_, service) = tonic_health::server::health_reporter();
    let _ = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(super::super::coalesce::incoming(listener), async {
            let _ = stop.await;
        })
        .await;
}

async fn check(channel: &UnaryChannel) -> Result<i32, Status> {
    let request = tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    };
    channel
        .call::<_, tonic_health::pb::HealthCheckResponse>(
            "/grpc.health.v1.Health/Check",
            &request,
            Some(Duration::from_secs(5)),
        )
        .await
        .map(|answer| answer.status)
}

/// A health server on a free loopback port: its address, what stops it, and its task.
async fn spawn_health_server() -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel();
    (addr, stop, tokio::spawn(health_server(listener, stopped)))
}

#[tokio::test]
async fn calls_a_tonic_server_and_reconnects_after_it_restarts() {
    let (addr, stop, first) = spawn_health_server().await;
    let channel =
        UnaryChannel::new(&format!("http://{addr}"), Duration::from_secs(1)).expect("valid");
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    assert_eq!(check(&channel).await.expect("first call"), serving);
    // A method the server does not have: a trailers-only answer.
    let missing = channel
        .call::<_, prost_types::Duration>(
            "/x.Nowhere/Call",
            &prost_types::Duration::default(),
            None,
        )
        .await
        .expect_err("unknown method");
    assert_eq!(missing.code(), Code::Unimplemented, "{missing}");

    let _ = stop.send(());
    first.await.expect("first server stops");
    let down = check(&channel).await.expect_err("nothing listens");
    assert_eq!(down.code(), Code::Unavailable, "{down}");

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind again");
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    tokio::spawn(health_server(listener, stopped));
    assert_eq!(check(&channel).await.expect("after restart"), serving);
}

#[tokio::test]
async fn a_call_that_ends_alone_leaves_its_stream_to_the_next_and_a_dropped_one_is_let_go() {
    let (addr, _stop, _server) = spawn_health_server().await;
    let channel =
        UnaryChannel::new(&format!("http://{addr}"), Duration::from_secs(1)).expect("valid");
    check(&channel).await.expect("first call");
    let calls = channel.lock().clone().expect("connected").calls;
    assert_eq!(calls.state(), (true, 0), "kept, none in flight");

    // A call dropped before its answer (as a deadline drops it): no longer counted, and
    // the handles it started with were dropped, not kept.
    let mut call = Box::pin(check(&channel));
    assert!((&mut call).now_or_never().is_none(), "waits for its answer");
    drop(call);
    assert_eq!(calls.state(), (false, 0), "nothing kept, none in flight");

    check(&channel).await.expect("a call after it");
    assert_eq!(calls.state(), (true, 0));
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let channel = UnaryChannel::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(1))
        .expect("valid");
    let error = channel
        .call::<_, prost_types::Duration>("/x.Y/Z", &prost_types::Duration::default(), None)
        .await
        .expect_err("nothing listens");
    assert_eq!(error.code(), Code::Unavailable, "{error}");
}

#[tokio::test]
async fn a_connection_that_answers_a_ping_is_kept_and_one_that_does_not_is_closed() {
    let (addr, _stop, _server) = spawn_health_server().await;
    let channel =
        UnaryChannel::new(&format!("http://{addr}"), Duration::from_secs(1)).expect("valid");
    assert!(
        channel.check_connection(Duration::from_secs(1)).await,
        "none open yet"
    );
    check(&channel).await.expect("first call");
    assert!(channel.check_connection(Duration::from_secs(5)).await);
    check(&channel).await.expect("the connection still serves");

    // A peer that accepts connections and then says nothing.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_addr = silent.local_addr().expect("addr");
    let _holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let channel =
        UnaryChannel::new(&format!("http://{silent_addr}"), Duration::from_secs(1)).expect("valid");
    let waiting = tokio::time::timeout(Duration::from_millis(200), check(&channel)).await;
    assert!(waiting.is_err(), "no answer from a silent peer");
    assert!(!channel.check_connection(Duration::from_millis(200)).await);
    let generation = channel.lock().as_ref().map(|open| open.generation);
    let _ = tokio::time::timeout(Duration::from_millis(200), check(&channel)).await;
    let redialled = channel.lock().as_ref().map(|open| open.generation);
    assert_eq!(
        redialled,
        generation.map(|g| g + 1),
        "the next call dials again"
    );
}

#[test]
fn tls_refusals_name_the_setting_to_look_at() {
    let required = "received fatal alert: CertificateRequired";
    assert!(refusal_hint(required).contains("set provider_client_cert_file"));
    let unknown_ca = "received fatal alert: UnknownCA";
    assert!(refusal_hint(unknown_ca).contains("a CA it trusts signed"));
    // gRPC C-core closes without an alert.
    let closed = "peer closed connection without sending TLS close_notify: https://docs.rs/...";
    assert!(refusal_hint(closed).contains("set provider_client_cert_file"));
    assert_eq!(refusal_hint("connection refused"), "");
}
