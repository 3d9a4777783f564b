//! Tool providers written with other languages' gRPC servers, invoked through toolplane:
//! Python's grpcio (gRPC C-core's HTTP/2 server) and Node's grpc-js. Each provider
//! (`tests/peers/*_provider.*`) registers itself and heartbeats as a provider team's would;
//! toolplane calls it with its own HTTP/2 client (`grpc::unary_client`), so these tests are
//! that client's interoperability with the two most used non-Go gRPC servers: inputs and
//! outputs through google.protobuf.Struct both ways, many calls at once on one connection
//! (past the Python provider's limit of 8 streams at once), a 1 MB answer, connections the
//! providers close at their maximum age while calls go on, a provider's error with its
//! details, the caller's deadline reaching the provider and the provider seeing the call
//! cancelled, grpc.health.v1 checks (Python), mutual TLS (BoringSSL and OpenSSL),
//! deregistration, and replicas registered with instance ids (one crashing).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::invoke_fixture::{invoker, request};
use common::process::{ChildGuard, Runtime, peer_script, proto_dir};
use common::*;
use serde_json::{Value, json};
use toolplane::grpc::ServerOptions;
use toolplane::grpc::outgoing_tls::{ClientIdentityFiles, OutgoingTlsFiles};
use toolplane::pb;

/// Starts a provider's `command` (given toolplane's address, the proto directory and the
/// service name as its last three arguments) and waits for its "registered" line. With
/// `max_connection_age`, the provider closes each connection that long into its life
/// (`MAX_CONNECTION_AGE_MS`, the servers' `grpc.max_connection_age_ms`). It deregisters and
/// exits when its standard input closes, or is killed when the guard drops.
async fn start_provider(
    command: Command,
    server: &TestServer,
    service: &str,
    max_connection_age: Option<Duration>,
) -> ChildGuard {
    start_provider_with(command, server, service, max_connection_age, &[]).await
}

/// As [`start_provider`], with `env` set for the provider.
async fn start_provider_with(
    mut command: Command,
    server: &TestServer,
    service: &str,
    max_connection_age: Option<Duration>,
    env: &[(&str, &Path)],
) -> ChildGuard {
    command.envs(env.iter().copied());
    command
        .arg(server.addr.to_string())
        .arg(proto_dir())
        .arg(service)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(age) = max_connection_age {
        command.env("MAX_CONNECTION_AGE_MS", age.as_millis().to_string());
    }
    let mut child = command.spawn().expect("start the provider");
    let stdout = child.stdout.take().expect("piped");
    let (registered, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("registered ") {
                let _ = registered.send(line);
            }
        }
    });
    let guard = ChildGuard(child);
    tokio::task::spawn_blocking(move || said.recv_timeout(Duration::from_secs(60)))
        .await
        .expect("joined")
        .expect("the provider registers");
    wait_registered(server, service).await;
    guard
}

/// Invokes `tool` of `service` with `input` (and a deadline when given).
async fn invoke(
    server: &TestServer,
    service: &str,
    tool: &str,
    input: Value,
    deadline: Option<Duration>,
) -> Result<Value, tonic::Status> {
    let mut call = tonic::Request::new(pb::InvokeToolRequest {
        service_name: service.to_owned(),
        ..request(tool, input)
    });
    if let Some(deadline) = deadline {
        call.set_timeout(deadline);
    }
    let answer = invoker(server).await.invoke_tool(call).await?.into_inner();
    let output = answer.output.expect("an output");
    Ok(toolplane::json::value_to_json(&output).expect("JSON"))
}

/// The checks every provider passes, whatever its language.
async fn check_a_provider(server: &TestServer, service: &str) {
    let nested = json!({
        "count": 3, "ratio": 0.25, "negative": -7, "big": 9_007_199_254_740_991_i64,
        "text": "héllo ✓", "flag": true, "nothing": null,
        "list": [1, "two", {"three": [3.5]}], "deep": {"a": {"b": {"c": []}}},
    });
    let echoed = invoke(server, service, "echo", nested.clone(), None).await;
    assert_eq!(echoed.expect("echoed"), nested, "{service}: echo");

    // Bursts of calls at once on the one connection, past the Python provider's limit of
    // streams at once (8): toolplane queues them behind it, and sends again the streams the
    // provider refuses unprocessed (failed 5 runs of 5 without that).
    for burst in 0..4 {
        let calls = (0..64).map(|n| invoke(server, service, "echo", json!({ "n": n }), None));
        let answers = futures_util::future::join_all(calls).await;
        for (n, answer) in answers.into_iter().enumerate() {
            let answer =
                answer.unwrap_or_else(|status| panic!("{service}: burst {burst}: {status:?}"));
            assert_eq!(
                answer,
                json!({ "n": n }),
                "{service}: burst {burst}, call {n}"
            );
        }
    }

    let big = invoke(server, service, "big", json!({"bytes": 1_000_000}), None).await;
    let text = big.expect("a 1 MB answer")["text"].clone();
    assert_eq!(
        text.as_str().map(str::len),
        Some(1_000_000),
        "{service}: big"
    );

    let failed = invoke(server, service, "fail", json!({}), None).await;
    let failed = failed.expect_err("the provider fails the call");
    assert_eq!(failed.code(), tonic::Code::FailedPrecondition, "{failed:?}");
    assert_eq!(reason(&failed), "TOOL_QUOTA_SPENT", "{failed:?}");
    assert!(failed.message().contains("quota is spent"), "{failed:?}");

    let deadline = Duration::from_millis(800);
    let waited = invoke(server, service, "wait", json!({}), Some(deadline)).await;
    let waited = waited.expect_err("the caller's deadline passes");
    // Answered at the deadline, or left by the client as it passed: cancelled either way.
    if !client_timed_out(&waited) {
        assert_eq!(waited.code(), tonic::Code::DeadlineExceeded, "{waited:?}");
    }
    let mut noted = Value::Null;
    for _ in 0..100 {
        noted = invoke(server, service, "last_wait", json!({}), None)
            .await
            .expect("last_wait answers");
        if noted.get("cancelled").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(noted["cancelled"], json!(true), "{service}: {noted}");
    let remaining = noted["time_remaining"]
        .as_f64()
        .expect("a deadline was sent");
    assert!(
        remaining > 0.0 && remaining <= deadline.as_secs_f64(),
        "{service}: the provider was given {remaining} s"
    );
}

/// Callers calling on and on for 2 s while the provider closes each connection 250 ms into
/// its life: every call is answered, the streams that crossed a GOAWAY sent again on a new
/// connection (without that, about 1% of calls failed UNAVAILABLE "not a result of an error
/// (max_age)").
async fn check_connections_closed_at_max_age(server: &TestServer, service: &str) {
    // One call first: toolplane learns the provider's limit of streams at once on the first
    // connection and opens the next ones with it; a burst on a first connection can overrun a
    // limit below 100 before the provider's SETTINGS arrive (C-core: ENHANCE_YOUR_CALM).
    invoke(server, service, "echo", json!({}), None)
        .await
        .expect("a first call");
    let until = std::time::Instant::now() + Duration::from_secs(2);
    let callers = (0..16).map(|caller| async move {
        let mut calls = 0;
        while std::time::Instant::now() < until {
            let input = json!({ "caller": caller, "call": calls });
            let answer = invoke(server, service, "echo", input.clone(), None).await;
            let answer = answer.unwrap_or_else(|status| panic!("{service}: {input}: {status:?}"));
            assert_eq!(answer, input);
            calls += 1;
        }
        calls
    });
    let calls: usize = futures_util::future::join_all(callers)
        .await
        .into_iter()
        .sum();
    assert!(calls > 16, "{service}: only {calls} calls in 2 s");
}

/// Stops the provider by closing its standard input; it deregisters, and the service is gone.
async fn stop_provider(mut provider: ChildGuard, server: &TestServer, service: &str) {
    drop(provider.0.stdin.take());
    let discovery = server.discovery().await;
    eventually(&format!("{service} deregisters"), || {
        let mut discovery = discovery.clone();
        async move { get_service(&mut discovery, 0, service).await.is_err() }
    })
    .await;
}

/// A server that checks providers' health every 200 ms.
async fn server_checking_health() -> TestServer {
    TestServer::start_with(ServerOptions {
        provider_health_interval: Duration::from_millis(200),
        ..test_options()
    })
    .await
}

/// The connection age the aging providers close their connections at.
const MAX_CONNECTION_AGE: Option<Duration> = Some(Duration::from_millis(250));

/// A provider written with grpcio (C-core) serves every call toolplane sends it, and its
/// grpc.health.v1 NOT_SERVING makes toolplane refuse calls to it until it serves again; one
/// closing its connections at their maximum age loses no call.
#[tokio::test(flavor = "multi_thread")]
async fn a_python_grpcio_provider_is_invoked_through_toolplane() {
    let python = || peer_script(Runtime::Python, "python_provider.py");
    if python().is_none() {
        return;
    }
    check_steady_and_aging(|| python().expect("found above"), "python", true).await;
}

/// The checks of one kind of provider, `command` making one: [`check_a_provider`] (and, when
/// it `serves_health`, [`check_health_is_followed`]) on `NAME-provider`, then
/// [`check_connections_closed_at_max_age`] on `NAME-aging`, which closes its connections at
/// [`MAX_CONNECTION_AGE`].
async fn check_steady_and_aging(command: impl Fn() -> Command, name: &str, serves_health: bool) {
    let server = server_checking_health().await;
    let steady = format!("{name}-provider");
    let provider = start_provider(command(), &server, &steady, None).await;
    check_a_provider(&server, &steady).await;
    if serves_health {
        check_health_is_followed(&server, &steady).await;
    }
    stop_provider(provider, &server, &steady).await;

    let aging = format!("{name}-aging");
    let provider = start_provider(command(), &server, &aging, MAX_CONNECTION_AGE).await;
    check_connections_closed_at_max_age(&server, &aging).await;
    stop_provider(provider, &server, &aging).await;
}

/// While the provider reports NOT_SERVING (its `set_health` tool, for 4 s), toolplane refuses
/// calls to it (UNAVAILABLE, TOOL_UNHEALTHY); once it serves again, it is called again.
async fn check_health_is_followed(server: &TestServer, service: &str) {
    invoke(server, service, "set_health", json!({"seconds": 4}), None)
        .await
        .expect("set_health answers");
    let (mut refused, give_up) = (None, std::time::Instant::now() + Duration::from_secs(10));
    while refused.is_none() && std::time::Instant::now() < give_up {
        match invoke(server, service, "echo", json!({}), None).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(status) => refused = Some(status),
        }
    }
    let refused = refused.expect("refused while the provider is not serving");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason(&refused), "TOOL_UNHEALTHY", "{refused:?}");
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while invoke(server, service, "echo", json!({}), None)
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < give_up,
            "never called again once serving"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A provider written with grpc-js serves every call toolplane sends it (it has no
/// grpc.health.v1 service, which toolplane takes as healthy); one closing its connections at
/// their maximum age loses no call.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_grpc_js_provider_is_invoked_through_toolplane() {
    let node = || peer_script(Runtime::Node, "node_provider.js");
    if node().is_none() {
        return;
    }
    check_steady_and_aging(|| node().expect("found above"), "node", false).await;
}

/// Providers serving mutual TLS, grpcio (C-core's BoringSSL) and grpc-js (Node's OpenSSL),
/// against toolplane's rustls (ALPN h2): each is called over `https://` when toolplane trusts
/// its CA and presents a certificate the provider's client CA signed; without one, the call
/// fails UNAVAILABLE naming the setting to look at.
#[tokio::test(flavor = "multi_thread")]
async fn providers_over_mutual_tls_are_invoked_through_toolplane() {
    let python = || peer_script(Runtime::Python, "python_provider.py");
    let node = || peer_script(Runtime::Node, "node_provider.js");
    if python().is_none() || node().is_none() {
        return;
    }
    check_mutual_tls(|| python().expect("found above"), "python-tls").await;
    check_mutual_tls(|| node().expect("found above"), "node-tls").await;
}

/// The provider `command` makes, serving mutual TLS as `service`, called with and without
/// toolplane's client certificate.
async fn check_mutual_tls(command: impl Fn() -> Command, service: &str) {
    let (ca, clients_ca) = (common::tls::TestCa::new(), common::tls::TestCa::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    let (cert, key) = ca.server(&["127.0.0.1"]).write(dir.path(), "provider");
    let clients_ca_file = clients_ca.write(dir.path(), "clients-ca.pem");
    let (client_cert, client_key) = clients_ca
        .client("toolplane")
        .write(dir.path(), "toolplane");
    for presented in [true, false] {
        let client_identity = presented.then(|| ClientIdentityFiles {
            cert_file: client_cert.clone(),
            key_file: client_key.clone(),
        });
        let server = TestServer::start_with(ServerOptions {
            provider_tls: OutgoingTlsFiles {
                ca_file: Some(ca.write(dir.path(), "providers-ca.pem")),
                client_identity,
            },
            ..test_options()
        })
        .await;
        let env = [
            ("TLS_CERT_FILE", cert.as_path()),
            ("TLS_KEY_FILE", key.as_path()),
            ("TLS_CLIENT_CA_FILE", clients_ca_file.as_path()),
        ];
        let provider = start_provider_with(command(), &server, service, None, &env).await;
        let discovery = &mut server.discovery().await;
        let endpoint = get_service(discovery, 0, service)
            .await
            .expect("registered");
        assert!(endpoint.endpoint.starts_with("https://"), "{endpoint:?}");
        let input = json!({"over": "TLS", "n": 1});
        let answer = invoke(&server, service, "echo", input.clone(), None).await;
        if presented {
            assert_eq!(answer.expect("called over mutual TLS"), input, "{service}");
            let big = invoke(&server, service, "big", json!({"bytes": 1_000_000}), None);
            let text = big.await.expect("a 1 MB answer over TLS")["text"].clone();
            assert_eq!(text.as_str().map(str::len), Some(1_000_000));
        } else {
            let refused = answer.expect_err("refused without a client certificate");
            assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
            assert!(
                refused.message().contains("provider_client_cert_file"),
                "{refused:?}"
            );
        }
        stop_provider(provider, &server, service).await;
    }
}

/// Replicas written with grpcio and with grpc-js: two providers of each kind register one
/// service with instance ids of their own (`INSTANCE_ID`) and share its calls; one killed
/// without deregistering (a crashed pod) is passed over by every call after it and listed
/// UNHEALTHY, and the calls go on through the other.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_share_a_service_and_a_crashed_one_is_passed_over() {
    for (runtime, script, service) in [
        (Runtime::Python, "python_provider.py", "py-replicas"),
        (Runtime::Node, "node_provider.js", "node-replicas"),
    ] {
        if peer_script(runtime, script).is_none() {
            continue;
        }
        let replica = |id: &str| {
            let mut command = peer_script(runtime, script).expect("found above");
            command.env("INSTANCE_ID", id);
            command
        };
        let server = TestServer::start().await;
        let first = start_provider(replica("replica-a"), &server, service, None).await;
        let second = start_provider(replica("replica-b"), &server, service, None).await;
        let mut discovery = server.discovery().await;
        let info = get_service(&mut discovery, 0, service).await.expect("live");
        let ids: Vec<&str> = info
            .instances
            .iter()
            .map(|instance| instance.instance_id.as_str())
            .collect();
        assert_eq!(ids, ["replica-a", "replica-b"], "{service}");
        for n in 0..6 {
            invoke(&server, service, "echo", json!({"n": n}), None)
                .await
                .expect("answered");
        }
        let crashed = info.instances[0].endpoint.clone();
        // Killed: it does not deregister. The wait lets toolplane's connection to it see the
        // close first: a call written to the connection in the instant its peer dies may have
        // been taken, so it fails UNAVAILABLE rather than move on (retried only under the
        // caller's policy), and that instant is not what this test is about.
        drop(first);
        tokio::time::sleep(Duration::from_millis(100)).await;
        for n in 0..6 {
            let echoed = invoke(&server, service, "echo", json!({"n": n}), None)
                .await
                .expect("the other replica answers");
            assert_eq!(echoed, json!({"n": n}));
        }
        let info = get_service(&mut discovery, 0, service).await.expect("live");
        let health = info
            .instances
            .iter()
            .find(|instance| instance.endpoint == crashed)
            .map(|instance| instance.health);
        assert_eq!(health, Some(pb::HealthState::Unhealthy as i32), "{service}");
        drop(second);
        server.stop().await;
    }
}
