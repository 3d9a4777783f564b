//! WatchServices (snapshot, SYNCED, events, expiry, limits) and, in `health`, health:
//! toolplane.v1.HealthService and grpc.health.v1 with the spec's Check and Watch semantics.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::pb;
use toolplane::pb::ServiceEventType as Kind;

/// Generous bound for "eventually" in tests; never a performance assertion.
const PATIENCE: Duration = Duration::from_secs(10);

#[path = "watch_and_health/health.rs"]
mod health;
#[path = "watch_and_health/lagged_bytes.rs"]
mod lagged_bytes;

/// A watch first lists the live services, then SYNCED, then ADDED/UPDATED/REMOVED in order.
#[tokio::test(flavor = "multi_thread")]
async fn watch_snapshot_then_synced_then_changes() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    register_ok(
        &mut client,
        0,
        registration("alpha", vec![simple_tool("a")]),
    )
    .await;
    register_ok(&mut client, 0, registration("beta", vec![simple_tool("b")])).await;
    register_ok(
        &mut client,
        9,
        registration("other-tenant", vec![simple_tool("x")]),
    )
    .await;

    let mut stream = watch(&mut client, 0, "").await;
    let first = next_event(&mut stream).await;
    let second = next_event(&mut stream).await;
    assert_eq!(
        (first.r#type, first.service_name.as_str()),
        (Kind::Added as i32, "alpha")
    );
    assert_eq!(
        (second.r#type, second.service_name.as_str()),
        (Kind::Added as i32, "beta")
    );
    let synced = next_event(&mut stream).await;
    assert_eq!(synced.r#type, Kind::Synced as i32);

    let gamma = register_ok(
        &mut client,
        0,
        registration("gamma", vec![simple_tool("g")]),
    )
    .await;
    let added = next_event(&mut stream).await;
    assert_eq!(
        (added.r#type, added.service_name.as_str()),
        (Kind::Added as i32, "gamma")
    );
    assert!(added.revision > synced.revision);
    assert_eq!(
        added
            .service
            .expect("service on ADDED")
            .available_tools
            .len(),
        1
    );

    // Re-registering with a changed tool, a new tool and a dropped tool is UPDATED with hashes.
    let old_hash = gamma.tools[0].definition_sha256.clone();
    let mut changed = simple_tool("g");
    changed.description = "now different".into();
    let updated_answer = register_ok(
        &mut client,
        0,
        registration("gamma", vec![changed, tool("h", json!({"type": "object"}))]),
    )
    .await;
    let updated = next_event(&mut stream).await;
    assert_eq!(updated.r#type, Kind::Updated as i32);
    assert!(updated.revision > added.revision);
    let changes: Vec<_> = updated
        .tool_changes
        .iter()
        .map(|c| {
            (
                c.tool_name.as_str(),
                c.old_definition_sha256.as_str(),
                c.new_definition_sha256.as_str(),
            )
        })
        .collect();
    let new_g = updated_answer
        .tools
        .iter()
        .find(|t| t.tool_name == "g")
        .expect("g")
        .definition_sha256
        .clone();
    let new_h = updated_answer
        .tools
        .iter()
        .find(|t| t.tool_name == "h")
        .expect("h")
        .definition_sha256
        .clone();
    assert_eq!(
        changes,
        [
            ("g", old_hash.as_str(), new_g.as_str()),
            ("h", "", new_h.as_str())
        ]
    );

    deregister(&mut client, 0, "gamma", updated_answer.lease_id)
        .await
        .expect("deregister");
    let removed = next_event(&mut stream).await;
    assert_eq!(
        (removed.r#type, removed.service_name.as_str()),
        (Kind::Removed as i32, "gamma")
    );
}

/// A lapsed lease reaches watchers as EXPIRED, never before the TTL has passed.
#[tokio::test(flavor = "multi_thread")]
async fn watch_sees_expiry_never_early() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut stream = watch(&mut client, 0, "ephemeral").await;
    assert_eq!(next_event(&mut stream).await.r#type, Kind::Synced as i32);

    let ttl = Duration::from_millis(300);
    let registered_at = Instant::now();
    register_ok(
        &mut client,
        0,
        with_ttl(registration("ephemeral", vec![simple_tool("t")]), ttl),
    )
    .await;
    assert_eq!(next_event(&mut stream).await.r#type, Kind::Added as i32);
    let expired = next_event(&mut stream).await;
    assert_eq!(
        (expired.r#type, expired.service_name.as_str()),
        (Kind::Expired as i32, "ephemeral")
    );
    assert!(
        registered_at.elapsed() >= ttl,
        "expired after {:?}, before its TTL",
        registered_at.elapsed()
    );
}

/// A watch filtered by service only sees that service.
#[tokio::test(flavor = "multi_thread")]
async fn watch_filters_by_service() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut stream = watch(&mut client, 0, "wanted").await;
    assert_eq!(next_event(&mut stream).await.r#type, Kind::Synced as i32);
    register_ok(
        &mut client,
        0,
        registration("unwanted", vec![simple_tool("t")]),
    )
    .await;
    register_ok(
        &mut client,
        1,
        registration("wanted", vec![simple_tool("t")]),
    )
    .await;
    register_ok(
        &mut client,
        0,
        registration("wanted", vec![simple_tool("t")]),
    )
    .await;
    let event = next_event(&mut stream).await;
    assert_eq!(event.service_name, "wanted");
    assert_eq!(event.r#type, Kind::Added as i32);
}

/// A caller that vanished without closing its connection (it answers nothing, PINGs
/// included) is cut off after the keepalive interval and timeout; a live watcher that is
/// merely idle answers the PINGs and keeps its stream.
#[tokio::test(flavor = "multi_thread")]
async fn silent_dead_connections_are_closed_and_idle_watchers_kept() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = TestServer::start_with(toolplane::grpc::ServerOptions {
        keepalive_interval: Duration::from_millis(200),
        // Generous, so a busy machine's late PING answer does not cut the live watcher off.
        keepalive_timeout: Duration::from_secs(2),
        ..test_options()
    })
    .await;
    let mut client = server.discovery().await;
    let mut stream = watch(&mut client, 0, "later").await;
    assert_eq!(next_event(&mut stream).await.r#type, Kind::Synced as i32);

    // An HTTP/2 connection opened and then never read from or answered: the client preface
    // and an empty SETTINGS frame, then silence.
    let address = server.endpoint().trim_start_matches("http://").to_owned();
    let mut dead = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    dead.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface");
    let mut received = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, dead.read_to_end(&mut received)).await;
    assert!(
        matches!(closed, Ok(Ok(_)) | Ok(Err(_))),
        "the server closed the silent connection"
    );

    // Idle for many keepalive intervals and longer than the timeout, the watcher still gets
    // its events.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    register_ok(
        &mut client,
        0,
        registration("later", vec![simple_tool("t")]),
    )
    .await;
    let event = next_event(&mut stream).await;
    assert_eq!(
        (event.service_name.as_str(), event.r#type),
        ("later", Kind::Added as i32)
    );
}

/// A caller that connects and does not open its connection in time (HTTP/2's preface and
/// SETTINGS, or an HTTP/1 request, within toolplane's 10 s opening timeout) is disconnected,
/// on the gRPC, MCP and metrics ports alike, even with keepalive off; one that opened in time
/// stays connected.
#[tokio::test(flavor = "multi_thread")]
async fn connections_that_never_open_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    let (server, mcp, metrics) =
        TestServer::start_with_mcp_and_metrics(toolplane::grpc::ServerOptions {
            keepalive_interval: Duration::ZERO,
            ..test_options()
        })
        .await;
    let grpc = server.endpoint().trim_start_matches("http://").to_owned();
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
    let mut opened = TcpStream::connect(&grpc).await.expect("connect");
    opened.write_all(preface).await.expect("preface");
    let mut silent = vec![
        (
            "gRPC, nothing sent",
            TcpStream::connect(&grpc).await.expect("connect"),
        ),
        (
            "MCP, nothing sent",
            TcpStream::connect(mcp).await.expect("connect"),
        ),
        (
            "metrics, nothing sent",
            TcpStream::connect(metrics).await.expect("connect"),
        ),
    ];
    let mut partial = TcpStream::connect(&grpc).await.expect("connect");
    partial
        .write_all(&preface[..30])
        .await
        .expect("part of the preface");
    silent.push(("gRPC, part of the preface sent", partial));

    // Generous: the server closes them 10 s after they connected.
    let patience = Duration::from_secs(60);
    for (which, mut connection) in silent {
        let mut received = Vec::new();
        let closed = tokio::time::timeout(patience, connection.read_to_end(&mut received)).await;
        assert!(closed.is_ok(), "{which}: still open after {patience:?}");
    }

    // The connection that opened in time is still open: once the server's SETTINGS (and
    // the SETTINGS ack) are read, its read waits rather than ending.
    let mut read = [0; 1024];
    loop {
        match tokio::time::timeout(Duration::from_millis(500), opened.read(&mut read)).await {
            Err(_waiting) => break,
            Ok(Ok(0)) | Ok(Err(_)) => panic!("the connection that opened in time was closed"),
            Ok(Ok(_)) => {}
        }
    }
    server.stop().await;
}

/// A connection may have at most `max_concurrent_streams` streams open: with two watches open
/// on it, a third call waits (gRPC clients queue it) until a watch ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_holds_at_most_its_streams() {
    let server = TestServer::start_with(toolplane::grpc::ServerOptions {
        max_concurrent_streams: 2,
        ..test_options()
    })
    .await;
    let mut client = server.discovery().await;
    let first = watch(&mut client, 0, "").await;
    let _second = watch(&mut client, 0, "").await;

    let mut third = client.clone();
    let waiting = tokio::spawn(async move {
        third
            .list_services(pb::ListServicesRequest {
                meta: meta(0),
                ..Default::default()
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a third stream on the connection waits while two are open"
    );
    drop(first);
    let answered = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("answered once a watch ended")
        .expect("the task ends");
    answered.expect("listed");
}

/// A watch open when the server stops ends with UNAVAILABLE (so its client knows to watch
/// another instance) and does not hold up the server's drain.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_ends_unavailable_when_the_server_stops() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut stream = watch(&mut client, 0, "").await;
    assert_eq!(next_event(&mut stream).await.r#type, Kind::Synced as i32);

    let stopping = tokio::spawn(server.stop());
    let ended = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the watch hears of the shutdown")
        .expect_err("the watch ends with an error");
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    assert!(ended.message().contains("shutting down"), "{ended:?}");
    tokio::time::timeout(PATIENCE, stopping)
        .await
        .expect("the server drains with the watch ended")
        .expect("server stops within its grace period");
}

/// A watch of tenant 0 on a connection of its own with small flow-control windows, past its
/// SYNCED: while it is not read, the server can send it only about 64 KB, and the watch stops
/// taking changes.
async fn slow_watch(server: &TestServer) -> tonic::Streaming<pb::WatchServicesResponse> {
    let slow = server.slow_channel().await;
    let mut watcher = pb::discovery_service_client::DiscoveryServiceClient::new(slow);
    let mut stream = watch(&mut watcher, 0, "").await;
    assert_eq!(next_event(&mut stream).await.r#type, Kind::Synced as i32);
    stream
}

/// A watcher that stops reading falls behind; once the tenant's changes overrun the event
/// buffer, it reads the changes already sent to it, in order, and then the stream ends with
/// ABORTED, reason RESOURCE_WATCH_LAGGED, naming how many it missed (so it can watch again).
#[tokio::test(flavor = "multi_thread")]
async fn a_watcher_too_far_behind_is_ended_with_the_count_it_missed() {
    let server = TestServer::start_with(toolplane::grpc::ServerOptions {
        event_buffer: 4,
        ..test_options()
    })
    .await;
    let mut stream = slow_watch(&server).await;

    // Each change carries its service's tool, about 2 KB: 80 of them are more than the window
    // and the buffer hold.
    let mut client = server.discovery().await;
    let wordy = |name: &str| pb::ToolRegistration {
        description: "x".repeat(2000),
        ..simple_tool(name)
    };
    for n in 0..80 {
        register_ok(
            &mut client,
            0,
            registration(&format!("s{n}"), vec![wordy("t")]),
        )
        .await;
    }

    let mut delivered = 0;
    let ended = loop {
        match tokio::time::timeout(PATIENCE, stream.message())
            .await
            .expect("the watch delivers or ends")
        {
            Ok(Some(message)) => {
                let event = message.event.expect("event set");
                assert_eq!(
                    (event.r#type, event.service_name),
                    (Kind::Added as i32, format!("s{delivered}")),
                    "changes arrive in order before the end"
                );
                delivered += 1;
            }
            Ok(None) => panic!("the watch ended without saying it lagged"),
            Err(status) => break status,
        }
    };
    assert!(delivered < 80, "the watcher was expected to fall behind");
    assert_eq!(ended.code(), Code::Aborted, "{ended:?}");
    assert_eq!(reason(&ended), "RESOURCE_WATCH_LAGGED");
    let missed: usize = {
        use tonic_types::StatusExt;
        ended
            .get_error_details()
            .error_info()
            .and_then(|info| info.metadata.get("missed_events").cloned())
            .expect("missed_events in the ErrorInfo")
            .parse()
            .expect("missed_events is a count")
    };
    assert!(
        (1..=80 - delivered).contains(&missed),
        "missed {missed} with {delivered} of 80 delivered"
    );
}
