//! toolplane serving TLS on its gRPC port (`tls_cert_file`, `tls_key_file`), and asking
//! callers for client certificates (`tls_client_ca_file`): the generated client, the Rust
//! client, grpcurl and the binaries over TLS.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use common::tls::{TestCa, provider_tls_flags};
use common::*;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use toolplane::client::{ClientError, ClientTlsFiles, ToolplaneClient};
use toolplane::envelope::TenantId;
use toolplane::grpc::ServerOptions;
use toolplane::grpc::server_tls::ServerTlsFiles;
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;

/// A CA, a server certificate for 127.0.0.1 it signed, and its files in a directory.
struct Pki {
    ca: TestCa,
    dir: tempfile::TempDir,
    files: ServerTlsFiles,
}

fn pki() -> Pki {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let (cert_file, key_file) = ca.server(&["127.0.0.1"]).write(dir.path(), "server");
    Pki {
        ca,
        dir,
        files: ServerTlsFiles {
            cert_file,
            key_file,
            client_ca_file: None,
        },
    }
}

async fn tls_channel(
    addr: SocketAddr,
    ca_pem: &str,
    identity: Option<Identity>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    if let Some(identity) = identity {
        tls = tls.identity(identity);
    }
    Channel::from_shared(format!("https://{addr}"))
        .expect("valid uri")
        .tls_config(tls)?
        .connect()
        .await
}

async fn list_services(channel: Channel) -> Result<Vec<pb::DiscoveryInfo>, tonic::Status> {
    DiscoveryServiceClient::new(channel)
        .list_services(pb::ListServicesRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .map(|answer| answer.into_inner().services)
}

/// Over TLS every API answers a caller that trusts the server's CA, while a caller that
/// connects and never handshakes holds no one up; a plain-text caller gets nothing, and the
/// Rust client says why it cannot connect when the certificate is not trusted.
#[tokio::test(flavor = "multi_thread")]
async fn callers_reach_the_apis_over_tls() {
    let pki = pki();
    let server = TestServer::start_with(ServerOptions {
        tls: Some(pki.files.clone()),
        ..test_options()
    })
    .await;
    // A connection that never says anything: its handshake waits beside the others.
    let _silent = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    // Well within the handshake timeout (10 s) the silent connection would hold the accept
    // loop for, were handshakes done one after another.
    let ca_pem = pki.ca.pem();
    let connecting = tls_channel(server.addr, &ca_pem, None);
    let channel = tokio::time::timeout(std::time::Duration::from_secs(3), connecting)
        .await
        .expect("not held up by the silent connection")
        .expect("TLS connection");
    let mut discovery = DiscoveryServiceClient::new(channel.clone());
    register_ok(&mut discovery, 0, story_generator()).await;
    let services = list_services(channel).await.expect("listed over TLS");
    assert_eq!(services.len(), 1);

    let plain = Channel::from_shared(format!("http://{}", server.addr))
        .expect("valid uri")
        .connect()
        .await;
    if let Ok(plain) = plain {
        list_services(plain)
            .await
            .expect_err("plain text is not served");
    }

    let https = format!("https://{}", server.addr);
    let trusted = ClientTlsFiles {
        ca_file: Some(pki.ca.write(pki.dir.path(), "ca.pem")),
        ..ClientTlsFiles::default()
    };
    let client = ToolplaneClient::connect_with_tls(&https, TenantId(0), &trusted)
        .await
        .expect("the Rust client over TLS");
    assert_eq!(client.all_services().await.expect("listed").len(), 1);
    let untrusted = ToolplaneClient::connect(&https, TenantId(0))
        .await
        .expect_err("the public CAs did not sign the test certificate");
    let text = untrusted.to_string();
    assert!(matches!(untrusted, ClientError::Connect { .. }), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
}

/// With `tls_client_ca_file`, only a caller presenting a certificate that CA signed is served.
#[tokio::test(flavor = "multi_thread")]
async fn only_callers_with_a_certificate_the_client_ca_signed_are_served() {
    let pki = pki();
    let clients_ca = TestCa::new();
    let strangers_ca = TestCa::new();
    let server = TestServer::start_with(ServerOptions {
        tls: Some(ServerTlsFiles {
            client_ca_file: Some(clients_ca.write(pki.dir.path(), "clients-ca.pem")),
            ..pki.files.clone()
        }),
        ..test_options()
    })
    .await;
    let cases = [
        (None, false),
        (Some(strangers_ca.client("orchestrator").identity()), false),
        (Some(clients_ca.client("orchestrator").identity()), true),
    ];
    for (identity, served) in cases {
        let answer = match tls_channel(server.addr, &pki.ca.pem(), identity).await {
            Ok(channel) => list_services(channel).await.map(|_| ()),
            Err(error) => Err(tonic::Status::unavailable(error.to_string())),
        };
        assert_eq!(answer.is_ok(), served, "{answer:?}");
    }
}

/// Whether a new connection that trusts `ca_pem` is served.
async fn served_trusting(addr: SocketAddr, ca_pem: &str) -> bool {
    match tls_channel(addr, ca_pem, None).await {
        Ok(channel) => list_services(channel).await.is_ok(),
        Err(_) => false,
    }
}

/// A certificate renewed on disk is served to new connections without a restart. A renewal
/// caught halfway (the new certificate beside the old key) cannot be used: the previous
/// certificate goes on being served until the key follows.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let pki = pki();
    let (server, metrics) = TestServer::start_with_metrics(ServerOptions {
        tls: Some(pki.files.clone()),
        tls_reload_interval: std::time::Duration::from_millis(50),
        ..test_options()
    })
    .await;
    let (http, metrics) = (http_client(), format!("http://{metrics}/metrics"));
    let failing = "toolplane_file_reload_failing{files=\"served_tls\"}";
    let (old_ca, new_ca) = (pki.ca.pem(), TestCa::new());
    let new_ca_pem = new_ca.pem();
    assert!(served_trusting(server.addr, &old_ca).await);

    let renewed = new_ca.server(&["127.0.0.1"]);
    std::fs::write(&pki.files.cert_file, &renewed.cert_pem).expect("certificate renewed");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        served_trusting(server.addr, &old_ca).await,
        "the old certificate is still served while the new one has no key"
    );
    assert_eq!(
        scraped(&http, &metrics, failing).await,
        1.0,
        "counted as refused"
    );

    std::fs::write(&pki.files.key_file, &renewed.key_pem).expect("key renewed");
    eventually("the renewed certificate is served", || {
        served_trusting(server.addr, &new_ca_pem)
    })
    .await;
    assert!(!served_trusting(server.addr, &old_ca).await);
    assert_eq!(scraped(&http, &metrics, failing).await, 0.0);
    let reloaded = "toolplane_file_reloads_total{files=\"served_tls\",result=\"reloaded\"}";
    assert_eq!(scraped(&http, &metrics, reloaded).await, 1.0);
}

fn path(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// A TLS file that cannot be read stops `toolplane serve` with exit 2 before it announces an
/// address, naming the setting and the file.
#[test]
fn a_tls_file_that_cannot_be_read_stops_serve() {
    let output = Command::new(env!("CARGO_BIN_EXE_toolplane"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("TOOLPLANE_TLS_CERT_FILE", "/nonexistent/server.crt")
        .env("TOOLPLANE_TLS_KEY_FILE", "/nonexistent/server.key")
        .output()
        .expect("run toolplane serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tls_cert_file /nonexistent/server.crt: cannot read it"),
        "{stderr}"
    );
    assert!(!stderr.contains("toolplane serving"), "{stderr}");
}

/// `structs-provider` given TLS files it cannot use exits 2 before it serves or registers,
/// naming the flag and the file; TLS files for a plain-text control plane are refused, as
/// they would not be used.
#[test]
fn structs_provider_refuses_tls_flags_it_cannot_use() {
    let cases: [(&[&str], &str); 2] = [
        (
            &[
                "--tls-cert",
                "/nonexistent/provider.crt",
                "--tls-key",
                "/nonexistent/provider.key",
            ],
            "--tls-cert /nonexistent/provider.crt: cannot read it",
        ),
        (
            &["--control-plane-ca-file", "/nonexistent/ca.pem"],
            "is not an https:// endpoint",
        ),
    ];
    for (flags, expected) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_structs-provider"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--control-plane",
                "http://127.0.0.1:1",
            ])
            .args(flags)
            .env_remove("TOOLPLANE_CA_FILE")
            .output()
            .expect("run structs-provider");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains("provider serving"), "{stderr}");
    }
}

/// Everything over mutual TLS, as deployed: `toolplane serve` asking callers for client
/// certificates; `structs-provider` serving TLS and registering over TLS with its client
/// certificate; `toolplane invoke` and real grpcurl calling with theirs; and toolplane calling
/// the provider with its own.
#[test]
fn the_binaries_and_grpcurl_over_mutual_tls() {
    use common::process::{
        ChildGuard, ServerProcess, invoke_structs_damage, peer, toolplane_cli,
        wait_for_structs_provider_with,
    };
    let pki = pki();
    let dir = pki.dir.path();
    let clients_ca = TestCa::new();
    let ca_file = pki.ca.write(dir, "ca.pem");
    let clients_ca_file = clients_ca.write(dir, "clients-ca.pem");
    let (client_cert, client_key) = clients_ca.client("caller").write(dir, "caller");
    let (provider_cert, provider_key) = pki.ca.server(&["127.0.0.1"]).write(dir, "provider");
    let server = ServerProcess::start(&[
        ("TOOLPLANE_TLS_CERT_FILE", &path(&pki.files.cert_file)),
        ("TOOLPLANE_TLS_KEY_FILE", &path(&pki.files.key_file)),
        ("TOOLPLANE_TLS_CLIENT_CA_FILE", &path(&clients_ca_file)),
        ("TOOLPLANE_PROVIDER_CA_FILE", &path(&ca_file)),
        ("TOOLPLANE_PROVIDER_CLIENT_CERT_FILE", &path(&client_cert)),
        ("TOOLPLANE_PROVIDER_CLIENT_KEY_FILE", &path(&client_key)),
    ]);
    let endpoint = format!("https://{}", server.addr);
    let credentials = [
        "--ca-file",
        &path(&ca_file),
        "--client-cert-file",
        &path(&client_cert),
        "--client-key-file",
        &path(&client_key),
    ]
    .map(str::to_owned);
    let mut flags = provider_tls_flags(&provider_cert, &provider_key, &clients_ca_file);
    flags.extend(
        [
            "--control-plane-ca-file",
            &path(&ca_file),
            "--control-plane-cert-file",
            &path(&client_cert),
            "--control-plane-key-file",
            &path(&client_key),
        ]
        .map(str::to_owned),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _provider = ChildGuard::structs_provider_with(&endpoint, &flags);
    let mut connection = vec!["--endpoint", &endpoint];
    connection.extend(credentials.iter().map(String::as_str));
    wait_for_structs_provider_with(&connection);
    invoke_structs_damage(&connection);

    // Without a client certificate the server is not reached.
    let (code, _, stderr) = toolplane_cli(&[
        "services",
        "--endpoint",
        &endpoint,
        "--ca-file",
        &path(&ca_file),
    ]);
    assert_eq!(code, 2, "{stderr}");

    let Some(grpcurl) = peer("venv/bin/grpcurl") else {
        return;
    };
    let tls_args = [
        "-cacert",
        &path(&ca_file),
        "-cert",
        &path(&client_cert),
        "-key",
        &path(&client_key),
    ]
    .map(str::to_owned);
    let output = Command::new(&grpcurl)
        .args(&tls_args)
        .args([&server.addr, "list"])
        .output()
        .expect("run grpcurl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("toolplane.v1.DiscoveryService"), "{stdout}");
    let output = Command::new(&grpcurl)
        .args(&tls_args)
        .args(["-d", r#"{"meta": {}}"#, &server.addr])
        .arg("toolplane.v1.DiscoveryService/ListServices")
        .output()
        .expect("run grpcurl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("\"structs\""), "{stdout}");
}
