//! Providers at `https://` endpoints: toolplane calls them (and checks their health) over TLS,
//! checks their certificates against `provider_ca_file` or the public CAs, and presents its
//! own certificate to providers that ask for one (mutual TLS). And the provider SDK's own TLS
//! files, renewed on disk, used without a restart (at once when `structs-provider` is sent
//! SIGHUP).

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::invoke_fixture::*;
use common::provider::TestProvider;
use common::tls::{TestCa, provider_tls_flags};
use common::*;
use serde_json::json;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use toolplane::client::{ClientTlsFiles, ToolplaneClient};
use toolplane::envelope::TenantId;
use toolplane::grpc::ServerOptions;
use toolplane::grpc::outgoing_tls::{ClientIdentityFiles, OutgoingTlsFiles};
use toolplane::grpc::server_tls::ServerTlsFiles;
use toolplane::pb;
use toolplane::provider::ProviderConfig;

/// A real server and a test provider serving over TLS as `provider_tls` says, registered.
async fn start(
    toolplane_tls: OutgoingTlsFiles,
    provider_tls: ServerTlsFiles,
    health_interval: Duration,
) -> Setup {
    let server = TestServer::start_with(ServerOptions {
        provider_tls: toolplane_tls,
        provider_health_interval: health_interval,
        ..test_options()
    })
    .await;
    let probes = Arc::new(Probes::default());
    let mut config = ProviderConfig::new("testing", "1.0.0", &server.endpoint());
    config.ttl = Duration::from_secs(5);
    config.tls = Some(provider_tls);
    let provider = TestProvider::start_with(test_tools(&probes), config).await;
    wait_registered(&server, "testing").await;
    Setup {
        server,
        provider,
        probes,
    }
}

fn trusting(ca_file: &Path) -> OutgoingTlsFiles {
    OutgoingTlsFiles {
        ca_file: Some(ca_file.to_owned()),
        client_identity: None,
    }
}

/// A provider serving TLS registers an `https://` endpoint, and toolplane, trusting its CA,
/// calls it and finds it healthy over TLS.
#[tokio::test(flavor = "multi_thread")]
async fn a_tls_provider_is_called_when_its_ca_is_trusted() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = ca.write(dir.path(), "providers-ca.pem");
    let provider_tls = ca
        .server(&["127.0.0.1"])
        .served_from(dir.path(), "provider");
    let setup = start(trusting(&ca_file), provider_tls, Duration::from_millis(100)).await;
    let mut discovery = setup.server.discovery().await;
    let service = get_service(&mut discovery, 0, "testing")
        .await
        .expect("registered");
    let endpoint = &service.endpoint;
    assert!(endpoint.starts_with("https://127.0.0.1:"), "{endpoint}");

    let mut client = invoker(&setup.server).await;
    let answer = client
        .invoke_tool(request("echo", json!({"n": 1})))
        .await
        .expect("called over TLS")
        .into_inner();
    assert_eq!(
        answer.record.expect("record").status,
        pb::InvocationStatus::Succeeded as i32
    );
    // Several health checks go by; one that failed would make the next call fail fast.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let health = pb::health_service_client::HealthServiceClient::new(setup.server.channel().await)
        .get_service_health(pb::GetServiceHealthRequest {
            meta: meta(0),
            service_name: "testing".into(),
        })
        .await
        .expect("known")
        .into_inner();
    assert_eq!(health.status, pb::HealthState::Healthy as i32);
    client
        .invoke_tool(request("echo", json!({"n": 2})))
        .await
        .expect("still called");
    assert_eq!(setup.probes.echo_calls.load(Ordering::SeqCst), 2);
}

/// A provider whose certificate toolplane cannot verify (a CA it does not trust, or a name
/// that is not the endpoint's) is never called: the call is UNAVAILABLE, saying what the
/// certificate was checked against, and recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_certificate_that_cannot_be_verified_is_refused() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = ca.write(dir.path(), "providers-ca.pem");
    let cases = [
        (OutgoingTlsFiles::default(), "127.0.0.1", "the public CAs"),
        (trusting(&ca_file), "tools.example.com", "provider_ca_file"),
    ];
    for (toolplane_tls, certificate_name, checked_against) in cases {
        let provider_tls = ca
            .server(&[certificate_name])
            .served_from(dir.path(), certificate_name);
        // No health check runs before the call: the call itself meets the certificate.
        let setup = start(toolplane_tls, provider_tls, Duration::from_secs(3600)).await;
        let mut client = invoker(&setup.server).await;
        let error = client
            .invoke_tool(request("echo", json!({})))
            .await
            .expect_err("not trusted");
        assert_eq!(error.code(), Code::Unavailable, "{error:?}");
        let message = error.message();
        assert!(message.contains("certificate"), "{message}");
        assert!(message.contains(checked_against), "{message}");
        assert_eq!(setup.probes.echo_calls.load(Ordering::SeqCst), 0);
        let written = records(&mut client, "echo").await;
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].status, pb::InvocationStatus::Unavailable as i32);
    }
}

/// A provider that asks for a client certificate is called only when toolplane presents one
/// its client CA signed.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_asks_for_a_client_certificate_gets_toolplane_s() {
    let ca = TestCa::new();
    let clients_ca = TestCa::new();
    let strangers_ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = ca.write(dir.path(), "providers-ca.pem");
    let identity = |signer: &TestCa, name: &str| {
        let (cert_file, key_file) = signer.client("toolplane").write(dir.path(), name);
        ClientIdentityFiles {
            cert_file,
            key_file,
        }
    };
    let cases = [
        (None, false),
        (Some(identity(&strangers_ca, "stranger")), false),
        (Some(identity(&clients_ca, "toolplane")), true),
    ];
    for (client_identity, called) in cases {
        let provider_tls = ServerTlsFiles {
            client_ca_file: Some(clients_ca.write(dir.path(), "clients-ca.pem")),
            ..ca.server(&["127.0.0.1"])
                .served_from(dir.path(), "provider")
        };
        let toolplane_tls = OutgoingTlsFiles {
            ca_file: Some(ca_file.clone()),
            client_identity,
        };
        let setup = start(toolplane_tls, provider_tls, Duration::from_secs(3600)).await;
        let mut client = invoker(&setup.server).await;
        let answer = client.invoke_tool(request("echo", json!({}))).await;
        match answer {
            Ok(_) => assert!(called, "called without the client CA's certificate"),
            Err(error) => {
                assert!(!called, "{error:?}");
                let message = error.message();
                assert!(message.contains("provider_client_cert_file"), "{message}");
                assert_eq!(error.code(), Code::Unavailable, "{error:?}");
            }
        }
        assert_eq!(
            setup.probes.echo_calls.load(Ordering::SeqCst),
            u32::from(called)
        );
    }
}

/// A `provider_ca_file` renewed on disk is used for new provider connections without a
/// restart: a provider whose certificate the new CA signed is called once it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_provider_ca_file_is_used_without_a_restart() {
    let (old_ca, new_ca) = (TestCa::new(), TestCa::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = old_ca.write(dir.path(), "providers-ca.pem");
    let provider_tls = new_ca
        .server(&["127.0.0.1"])
        .served_from(dir.path(), "provider");
    let server = TestServer::start_with(ServerOptions {
        provider_tls: trusting(&ca_file),
        provider_health_interval: Duration::from_secs(3600),
        tls_reload_interval: Duration::from_millis(50),
        ..test_options()
    })
    .await;
    let probes = Arc::new(Probes::default());
    let mut config = ProviderConfig::new("testing", "1.0.0", &server.endpoint());
    config.tls = Some(provider_tls);
    let _provider = TestProvider::start_with(test_tools(&probes), config).await;
    wait_registered(&server, "testing").await;
    let mut client = invoker(&server).await;
    let error = client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect_err("signed by a CA not yet trusted");
    assert!(error.message().contains("certificate"), "{error:?}");

    std::fs::write(&ca_file, new_ca.pem()).expect("CA file renewed");
    eventually("the provider is called once its CA is trusted", || {
        let mut client = client.clone();
        async move { client.invoke_tool(request("echo", json!({}))).await.is_ok() }
    })
    .await;
    assert_eq!(probes.echo_calls.load(Ordering::SeqCst), 1);
}

/// A CA file that cannot be read stops the server from starting, naming the setting and the
/// file.
#[tokio::test]
async fn an_unreadable_provider_ca_file_stops_the_start() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let error = toolplane::grpc::serve(
        listener,
        ServerOptions {
            provider_tls: trusting(Path::new("/nonexistent/providers-ca.pem")),
            ..test_options()
        },
        std::future::pending(),
    )
    .await
    .expect_err("the CA file is not there");
    let text = error.to_string();
    assert!(
        text.starts_with("provider_ca_file /nonexistent/providers-ca.pem: cannot read it"),
        "{text}"
    );
}

/// The binaries end to end over mutual TLS: `structs-provider --tls-cert --tls-key
/// --tls-client-ca` and `toolplane serve` with `TOOLPLANE_PROVIDER_*` files; `toolplane
/// invoke` reaches the tool.
#[test]
fn the_binaries_speak_mutual_tls() {
    use common::process::{
        ChildGuard, ServerProcess, invoke_structs_damage, wait_for_structs_provider,
    };
    let ca = TestCa::new();
    let clients_ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = ca.write(dir.path(), "providers-ca.pem");
    let clients_ca_file = clients_ca.write(dir.path(), "clients-ca.pem");
    let (provider_cert, provider_key) = ca.server(&["127.0.0.1"]).write(dir.path(), "provider");
    let (client_cert, client_key) = clients_ca
        .client("toolplane")
        .write(dir.path(), "toolplane");
    let path = |path: &Path| path.to_string_lossy().into_owned();
    let server = ServerProcess::start(&[
        ("TOOLPLANE_PROVIDER_CA_FILE", &path(&ca_file)),
        ("TOOLPLANE_PROVIDER_CLIENT_CERT_FILE", &path(&client_cert)),
        ("TOOLPLANE_PROVIDER_CLIENT_KEY_FILE", &path(&client_key)),
    ]);
    let endpoint = server.endpoint();
    let flags = provider_tls_flags(&provider_cert, &provider_key, &clients_ca_file);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _provider = ChildGuard::structs_provider_with(&endpoint, &flags);
    wait_for_structs_provider(&endpoint);
    invoke_structs_damage(&["--endpoint", &endpoint]);
}

/// Whether a new TLS connection to `addr` that trusts `ca_pem` alone is served (a health
/// check answered).
async fn served_trusting(addr: std::net::SocketAddr, ca_pem: &str) -> bool {
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    let Ok(endpoint) = Channel::from_shared(format!("https://{addr}"))
        .expect("valid uri")
        .tls_config(tls)
    else {
        return false;
    };
    let Ok(channel) = endpoint.connect().await else {
        return false;
    };
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .is_ok()
}

/// A provider's certificate renewed on disk is served to new connections without a restart
/// (`ProviderConfig::tls_reload_interval`); a renewal caught halfway (the new certificate
/// beside the old key) keeps the previous certificate served until the key follows.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_serves_its_renewed_certificate_without_a_restart() {
    let (old_ca, new_ca) = (TestCa::new(), TestCa::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    let files = old_ca
        .server(&["127.0.0.1"])
        .served_from(dir.path(), "provider");
    let server = TestServer::start().await;
    let probes = Arc::new(Probes::default());
    let mut config = ProviderConfig::new("testing", "1.0.0", &server.endpoint());
    config.tls = Some(files.clone());
    config.tls_reload_interval = Duration::from_millis(50);
    let provider = TestProvider::start_with(test_tools(&probes), config).await;
    assert!(served_trusting(provider.addr, &old_ca.pem()).await);

    let renewed = new_ca.server(&["127.0.0.1"]);
    std::fs::write(&files.cert_file, &renewed.cert_pem).expect("certificate renewed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        served_trusting(provider.addr, &old_ca.pem()).await,
        "the old certificate is still served while the new one has no key"
    );

    std::fs::write(&files.key_file, &renewed.key_pem).expect("key renewed");
    let new_ca_pem = new_ca.pem();
    eventually("the renewed certificate is served", || {
        served_trusting(provider.addr, &new_ca_pem)
    })
    .await;
    assert!(!served_trusting(provider.addr, &old_ca.pem()).await);
}

/// The files a provider connects to an `https://` control plane with, renewed on disk, are
/// used without a restart: a provider that cannot register because it does not trust the
/// control plane's certificate registers once its CA file names the CA that signed it.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_uses_its_renewed_control_plane_ca_file_without_a_restart() {
    let (old_ca, new_ca) = (TestCa::new(), TestCa::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    let server = TestServer::start_with(ServerOptions {
        tls: Some(
            new_ca
                .server(&["127.0.0.1"])
                .served_from(dir.path(), "toolplane"),
        ),
        ..test_options()
    })
    .await;
    let ca_file = old_ca.write(dir.path(), "control-plane-ca.pem");
    let probes = Arc::new(Probes::default());
    let endpoint = format!("https://{}", server.addr);
    let mut config = ProviderConfig::new("testing", "1.0.0", &endpoint);
    config.control_plane_tls.ca_file = Some(ca_file.clone());
    config.tls_reload_interval = Duration::from_millis(50);
    let _provider = TestProvider::start_with(test_tools(&probes), config).await;
    let tls = ClientTlsFiles {
        ca_file: Some(new_ca.write(dir.path(), "new-ca.pem")),
        ..ClientTlsFiles::default()
    };
    let client = ToolplaneClient::connect_with_tls(&endpoint, TenantId(0), &tls)
        .await
        .expect("the test trusts toolplane's CA");
    let registered = || {
        let client = client.clone();
        async move {
            client
                .all_services()
                .await
                .is_ok_and(|services| services.iter().any(|s| s.service_name == "testing"))
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!registered().await, "registered without trusting the CA");

    std::fs::write(&ca_file, new_ca.pem()).expect("CA file renewed");
    eventually("the provider registers once it trusts the CA", registered).await;
}

/// `structs-provider` sent SIGHUP reads its TLS files again at once, also when
/// `--tls-reload-interval 0s` reads them only at the start otherwise: a renewed certificate is
/// served from then on, and the provider serves on (SIGHUP's default action ended it).
#[tokio::test(flavor = "multi_thread")]
async fn structs_provider_reads_its_renewed_certificate_on_sighup() {
    use common::process::ChildGuard;
    let (old_ca, new_ca) = (TestCa::new(), TestCa::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    let files = old_ca
        .server(&["127.0.0.1"])
        .served_from(dir.path(), "provider");
    let server = TestServer::start().await;
    let path = |path: &Path| path.to_string_lossy().into_owned();
    let (cert, key) = (path(&files.cert_file), path(&files.key_file));
    let flags = [
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-reload-interval",
        "0s",
    ];
    let mut provider = ChildGuard::structs_provider_with(&server.endpoint(), &flags);
    wait_registered(&server, "structs").await;
    let registered = get_service(&mut server.discovery().await, 0, "structs")
        .await
        .expect("registered");
    let addr: std::net::SocketAddr = (registered.endpoint.strip_prefix("https://"))
        .and_then(|addr| addr.parse().ok())
        .expect("an https endpoint");
    assert!(served_trusting(addr, &old_ca.pem()).await);

    let renewed = new_ca.server(&["127.0.0.1"]);
    std::fs::write(&files.cert_file, &renewed.cert_pem).expect("certificate renewed");
    std::fs::write(&files.key_file, &renewed.key_pem).expect("key renewed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        served_trusting(addr, &old_ca.pem()).await,
        "not read again unasked"
    );
    provider.hang_up();
    let new_ca_pem = new_ca.pem();
    eventually("the renewed certificate is served", || {
        served_trusting(addr, &new_ca_pem)
    })
    .await;
    assert!(
        provider.0.try_wait().expect("polled").is_none(),
        "it serves on"
    );
}
