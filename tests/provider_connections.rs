//! Connections to providers that die without closing: found by an HTTP/2 PING when a health
//! check goes unanswered, closed, and dialled again. A provider that stops on purpose, which
//! deregisters before it stops answering; and one whose registration is refused, which stops
//! saying why.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::invoke_fixture::*;
use common::provider::TestProvider;
use common::proxy::FreezingProxy;
use common::*;
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::provider::structs::structs_tools;
use toolplane::provider::{ProviderConfig, ProviderError, ProviderServer};

/// A provider connection whose far end went silent without closing it (frozen behind a
/// proxy) is closed once a health check goes unanswered and a PING too; the next check dials
/// again (through the proxy, which carries new connections) and the provider is called again
/// within seconds. Without the PING every check and call waits on the dead connection until
/// TCP gives up (15 minutes on Linux).
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_provider_connection_is_closed_and_dialled_again() {
    let server = TestServer::start_with(ServerOptions {
        provider_health_interval: Duration::from_millis(200),
        ..test_options()
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let proxy = FreezingProxy::start(listener.local_addr().expect("address")).await;
    let probes = Arc::new(Probes::default());
    let mut config = ProviderConfig::new("testing", "1.0.0", &server.endpoint());
    config.advertised_endpoint = format!("http://{}", proxy.addr);
    let _provider = TestProvider::start_on(listener, test_tools(&probes), config);
    wait_registered(&server, "testing").await;
    let client = invoker(&server).await;
    let call = || {
        let mut client = client.clone();
        async move {
            let mut request = tonic::Request::new(request("echo", json!({})));
            request.set_timeout(Duration::from_millis(500));
            client.invoke_tool(request).await
        }
    };
    call().await.expect("called through the proxy");

    proxy.freeze_open_connections();
    eventually(
        "the provider is called again over a new connection",
        || async { call().await.is_ok() },
    )
    .await;
    assert!(probes.echo_calls.load(Ordering::SeqCst) >= 2);
}

/// A server, a proxy to it, and a provider `testing` registered with the server through the
/// proxy, its configuration as `configure` leaves it.
async fn registered_through_proxy(
    configure: impl FnOnce(&mut ProviderConfig),
) -> (TestServer, FreezingProxy, TestProvider) {
    let server = TestServer::start().await;
    let proxy = FreezingProxy::start(server.addr).await;
    let probes = Arc::new(Probes::default());
    let mut config = ProviderConfig::new("testing", "1.0.0", &format!("http://{}", proxy.addr));
    configure(&mut config);
    let provider = TestProvider::start_with(test_tools(&probes), config).await;
    wait_registered(&server, "testing").await;
    (server, proxy, provider)
}

/// A provider whose connection to the control plane went silent without closing (frozen
/// behind a proxy) finds it dead, dials again and registers again once its lease has lapsed,
/// within seconds. Without the PING and the bound on each call, its heartbeat waits on the
/// dead connection until TCP gives up, and the service stays gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_registers_again_over_a_new_connection_after_the_old_one_died() {
    let (server, proxy, _provider) = registered_through_proxy(|config| {
        config.ttl = Duration::from_millis(600);
    })
    .await;

    proxy.freeze_open_connections();
    let discovery = server.discovery().await;
    eventually(
        "the lease lapses while heartbeats cannot get through",
        || {
            let mut discovery = discovery.clone();
            async move { get_service(&mut discovery, 0, "testing").await.is_err() }
        },
    )
    .await;
    eventually("the provider registers again over a new connection", || {
        let mut discovery = discovery.clone();
        async move { get_service(&mut discovery, 0, "testing").await.is_ok() }
    })
    .await;
}

/// A provider whose heartbeat failed (its connection to the control plane went silent, frozen
/// behind a proxy, so the call waited out its bound) tries it again soon, over a new
/// connection, and keeps its lease: the service never lapses. Waiting a whole heartbeat
/// interval (5 s) after the failure, its next heartbeat came after the 12 s lease had lapsed.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_tries_a_failed_heartbeat_again_before_its_lease_lapses() {
    let (server, proxy, _provider) = registered_through_proxy(|config| {
        config.ttl = Duration::from_secs(12);
        config.heartbeat_interval = Some(Duration::from_secs(5));
    })
    .await;
    let mut discovery = server.discovery().await;
    let first = get_service(&mut discovery, 0, "testing")
        .await
        .expect("registered");
    let expiry = |service: &pb::DiscoveryInfo| {
        let at = service.expires_at.expect("expires_at set");
        (at.seconds, at.nanos)
    };

    proxy.freeze_open_connections();
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match get_service(&mut discovery, 0, "testing").await {
            Ok(service) if expiry(&service) > expiry(&first) => {
                assert_eq!(service.registered_at, first.registered_at, "the same lease");
                break;
            }
            Ok(_) => {}
            Err(status) => panic!("the lease lapsed: {status:?}"),
        }
        assert!(
            std::time::Instant::now() < give_up,
            "no heartbeat got through"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A provider being stopped drains: it deregisters while it still answers, and stops
/// answering only after, so calls made through toolplane while it stops
/// either succeed or find the service gone; none meets a provider that no longer answers
/// (UNAVAILABLE). The provider's link to the control plane is slow (a proxy holds each chunk
/// 200 ms), so the deregistration takes time to land, as across a network.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopping_provider_deregisters_before_it_stops_answering() {
    let server = TestServer::start().await;
    let proxy = FreezingProxy::start(server.addr).await;
    let probes = Arc::new(Probes::default());
    let control_plane = format!("http://{}", proxy.addr);
    let provider = TestProvider::start(
        test_tools(&probes),
        &control_plane,
        "testing",
        Duration::from_secs(30),
    )
    .await;
    wait_registered(&server, "testing").await;
    let client = invoker(&server).await;
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut answered = 0_u32;
                loop {
                    let mut call = tonic::Request::new(request("echo", json!({})));
                    call.set_timeout(Duration::from_secs(2));
                    match client.invoke_tool(call).await {
                        Ok(_) => answered += 1,
                        Err(error) => return (answered, error),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.delay(Duration::from_millis(200));
    provider.stop().await;
    for caller in callers {
        let (answered, error) = caller.await.expect("caller");
        assert!(answered > 0, "no call was answered before the stop");
        assert_eq!(error.code(), tonic::Code::NotFound, "{error:?}");
    }
}

/// A provider (the SDK's server, which tonic serves) closes a connection that does not open
/// within 10 s (sends nothing, or part of HTTP/2's preface), and is called through toolplane
/// all the while.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_closes_connections_that_never_open() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = TestServer::start().await;
    let probes = Arc::new(Probes::default());
    let config = ProviderConfig::new("testing", "1.0.0", &server.endpoint());
    let provider = TestProvider::start_with(test_tools(&probes), config).await;
    wait_registered(&server, "testing").await;
    let silent = tokio::net::TcpStream::connect(provider.addr)
        .await
        .expect("connect");
    let mut partial = tokio::net::TcpStream::connect(provider.addr)
        .await
        .expect("connect");
    partial
        .write_all(b"PRI * HTTP/2.0\r\n\r\n")
        .await
        .expect("part of the preface");
    let mut client = invoker(&server).await;
    client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect("called beside the silent connections");

    // Generous: the provider closes them 10 s after it accepted them.
    let patience = Duration::from_secs(60);
    for (which, mut connection) in [("nothing sent", silent), ("part of the preface", partial)] {
        let mut received = Vec::new();
        let closed = tokio::time::timeout(patience, connection.read_to_end(&mut received)).await;
        assert!(closed.is_ok(), "{which}: still open after {patience:?}");
    }
    client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect("called after");
    assert_eq!(probes.echo_calls.load(Ordering::SeqCst), 2);
}

/// A provider whose registration the control plane refuses as not valid (here, more tools
/// than it takes in one registration: a limit the provider cannot know) stops and answers
/// why, rather than sending the same registration every few seconds for ever while serving
/// tools no one can reach. Without the stop `serve` never returns.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_whose_registration_is_refused_stops_and_says_why() {
    let mut options = test_options();
    options.limits.max_tools = 1;
    let server = TestServer::start_with(options).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let provider = ProviderServer::new(
        structs_tools().expect("the example tools are valid"),
        ProviderConfig::new("structs", "1.0.0", &server.endpoint()),
    );
    let served = tokio::time::timeout(
        Duration::from_secs(60),
        provider.serve(listener, std::future::pending()),
    )
    .await
    .expect("the provider stops by itself");
    match served {
        Err(ProviderError::RegistrationRefused(message)) => assert!(
            message.contains("at most 1 tools per registration"),
            "{message}"
        ),
        other => panic!("expected the refusal, got {other:?}"),
    }
    assert!(
        server
            .discovery()
            .await
            .list_services(pb::ListServicesRequest {
                meta: meta(0),
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner()
            .services
            .is_empty()
    );
}
