//! A server out of file descriptors: while more callers connect than it may open descriptors
//! for, accepting fails at once for as long as they wait, and the server waits between tries
//! rather than spinning a core; once descriptors free, it accepts again. And `max_connections`,
//! which keeps a server from getting there: past it, callers wait to be accepted.

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use crate::common::process::ServerProcess;
use crate::common::{TestServer, meta, test_options};
use toolplane::pb;

/// The CPU time (user and system) process `pid` has used, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read its stat");
    // The fields after the command name (in parentheses, which may hold spaces): utime and
    // stime are the 12th and 13th of them, in clock ticks (100 a second on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("a command name")
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / 100.0
}

/// Waits up to 10 s for `check`.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// At 64 descriptors, 100 connections to the gRPC port and a few to the metrics and MCP
/// ports leave every listener failing to accept: the server says so once per listener and
/// uses almost no CPU meanwhile (the gRPC port took a whole core before, retrying at once).
/// When the callers close their connections, it accepts again: `toolplane health` answers.
#[test]
fn a_server_out_of_file_descriptors_waits_to_accept_again_rather_than_spinning() {
    let server = ServerProcess::start_with_descriptor_limit(
        64,
        &[
            ("TOOLPLANE_METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLPLANE_MCP_LISTEN", "127.0.0.1:0"),
        ],
    );
    let side_ports = [
        server.logged_address("metrics served at /metrics"),
        server.logged_address("MCP served at /mcp"),
    ];
    let mut held: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&server.addr).expect("connect to the gRPC port"))
        .collect();
    // Once the gRPC port has used the descriptors up, the other ports cannot accept either.
    let pid = server.child.id();
    eventually("the server uses its descriptors up", || {
        let open = std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count);
        open.is_ok_and(|open| open >= 64)
    });
    for address in &side_ports {
        held.extend((0..3).map(|_| TcpStream::connect(address).expect("connect to a side port")));
    }

    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_seconds(pid) - before;
    assert!(
        spent < 0.5,
        "the server used {spent} s of CPU in 2 s while it could not accept"
    );
    eventually("the server says it cannot accept", || {
        server.log_lines_with("cannot accept connections").len() >= 3
    });
    assert_eq!(
        server.log_lines_with("cannot accept connections").len(),
        3,
        "one warning per listener, not one per try"
    );

    drop(held);
    eventually("the server accepts again", || {
        Command::new(env!("CARGO_BIN_EXE_toolplane"))
            .args(["health", "--endpoint", &server.endpoint()])
            .output()
            .expect("run toolplane health")
            .status
            .success()
    });
    assert!(
        !server
            .log_lines_with("accepting connections again")
            .is_empty()
    );
}

/// Whether a call over `channel` is answered within a second.
async fn answers(channel: &tonic::transport::Channel) -> bool {
    let mut client = pb::discovery_service_client::DiscoveryServiceClient::new(channel.clone());
    let asked = client.list_services(pb::ListServicesRequest {
        meta: meta(0),
        ..Default::default()
    });
    matches!(
        tokio::time::timeout(Duration::from_secs(1), asked).await,
        Ok(Ok(_))
    )
}

/// With `max_connections` 2, two callers' connections are served; a third caller's is not
/// accepted (its call goes unanswered) until one of the two closes, and is served then.
#[tokio::test(flavor = "multi_thread")]
async fn past_max_connections_a_caller_waits_until_a_connection_closes() {
    let server = TestServer::start_with(toolplane::grpc::ServerOptions {
        max_connections: 2,
        ..test_options()
    })
    .await;
    let connect = || async {
        tonic::transport::Endpoint::from_shared(server.endpoint())
            .expect("valid uri")
            .connect()
            .await
            .expect("connected (the listen backlog takes it)")
    };
    let first = connect().await;
    let second = connect().await;
    assert!(answers(&first).await && answers(&second).await);
    let third = connect().await;
    assert!(!answers(&third).await, "a third connection was served");

    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !answers(&third).await {
        assert!(
            Instant::now() < deadline,
            "not served once a connection closed"
        );
    }
    assert!(answers(&second).await);
}

/// Whether a `GET /mcp` sent over `stream` (a connection to the MCP port) begins to be
/// answered within a second; the connection stays open.
async fn mcp_answers(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncWriteExt;
    let request = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    stream.write_all(request).await.expect("sent");
    let mut first = [0u8; 12];
    matches!(
        tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut first)).await,
        Ok(Ok(_))
    ) && first.starts_with(b"HTTP/1.1")
}

/// `max_connections` holds on the MCP port too: with 2 connections held there, a third
/// caller's request is answered only once one of them closes.
#[tokio::test(flavor = "multi_thread")]
async fn past_max_connections_an_mcp_caller_waits_until_a_connection_closes() {
    let (_server, mcp) = TestServer::start_with_mcp(toolplane::grpc::ServerOptions {
        max_connections: 2,
        ..test_options()
    })
    .await;
    let connect = || async {
        tokio::net::TcpStream::connect(mcp)
            .await
            .expect("connected")
    };
    let mut first = connect().await;
    let mut second = connect().await;
    assert!(mcp_answers(&mut first).await && mcp_answers(&mut second).await);
    let mut third = connect().await;
    assert!(
        !mcp_answers(&mut third).await,
        "a third connection was served"
    );
    drop(first);
    let mut answered = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), third.read_exact(&mut answered))
        .await
        .expect("served once a connection closed")
        .expect("an answer");
    assert!(answered.starts_with(b"HTTP/1.1"), "{answered:?}");
}
