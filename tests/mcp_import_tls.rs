//! MCP servers served over TLS (`https://`), imported and called with the TLS to providers: the
//! server's certificate checked against `provider_ca_file`, toolplane's client certificate
//! shown to a server that asks for one, and a certificate that cannot be verified refused
//! with a message saying what it was checked against. The server is a real MCP server built
//! with the official MCP Python SDK, served by uvicorn over TLS.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::TestServer;
use common::mcp_server::{PythonMcpServer, importing, invoke, output, register_add_at, wait_for};
use common::tls::TestCa;
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::grpc::outgoing_tls::{ClientIdentityFiles, OutgoingTlsFiles};
use toolplane::mcp::import::McpSource;

/// A Python MCP server serving TLS with a certificate `ca` signed for 127.0.0.1, asking
/// callers for a certificate `clients_ca` signed when given.
fn https_server(dir: &Path, ca: &TestCa, clients_ca: Option<&TestCa>) -> Option<PythonMcpServer> {
    let (cert, key) = ca.server(&["127.0.0.1"]).write(dir, "mcp-server");
    let mut args = vec![
        "--tls-cert".to_owned(),
        cert.display().to_string(),
        "--tls-key".to_owned(),
        key.display().to_string(),
    ];
    if let Some(clients_ca) = clients_ca {
        let path = clients_ca.write(dir, "clients-ca.pem");
        args.extend(["--tls-client-ca".to_owned(), path.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    PythonMcpServer::start_with(0, &args)
}

/// The TLS to providers trusting `ca` and, when given, presenting a certificate
/// `clients_ca` signed.
fn provider_tls(dir: &Path, ca: &TestCa, clients_ca: Option<&TestCa>) -> OutgoingTlsFiles {
    OutgoingTlsFiles {
        ca_file: Some(ca.write(dir, "ca.pem")),
        client_identity: clients_ca.map(|clients_ca| {
            let (cert_file, key_file) = clients_ca.client("toolplane").write(dir, "toolplane");
            ClientIdentityFiles {
                cert_file,
                key_file,
            }
        }),
    }
}

/// An HTTPS MCP server whose certificate a cluster's own CA signed, and which takes only
/// callers with a certificate of its clients' CA, is imported (its tools listed and
/// registered) and called when `provider_ca_file` and the client certificate name them.
#[tokio::test(flavor = "multi_thread")]
async fn an_https_server_asking_for_a_client_certificate_is_imported_with_the_provider_tls() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (ca, clients_ca) = (TestCa::new(), TestCa::new());
    let Some(mcp) = https_server(dir.path(), &ca, Some(&clients_ca)) else {
        return;
    };
    assert!(mcp.url().starts_with("https://"), "{}", mcp.url());
    let importing_it = importing(
        "python-tools",
        McpSource::Http(mcp.url()),
        Duration::from_secs(60),
        None,
    );
    let server = TestServer::start_with(ServerOptions {
        provider_tls: provider_tls(dir.path(), &ca, Some(&clients_ca)),
        ..importing_it
    })
    .await;
    let service = wait_for(&server, "python-tools", |found| found.is_some())
        .await
        .expect("the service");
    assert_eq!(service.endpoint, format!("mcp+{}", mcp.url()));
    let added = invoke(&server, "add", json!({"a": 2, "b": 3}))
        .await
        .expect("called over TLS");
    assert_eq!(output(&added), json!({"result": 5}));
    server.stop().await;
}

/// A call to an HTTPS MCP server whose certificate is not signed by a trusted CA is refused
/// before the server is called (`UNAVAILABLE`), the message saying what the certificate was
/// checked against; so is one to a server that asks for a client certificate toolplane does
/// not have. Trusting the CA and presenting the certificate makes the same call pass.
#[tokio::test(flavor = "multi_thread")]
async fn an_https_server_that_cannot_be_verified_or_refuses_toolplane_is_not_called() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (ca, clients_ca) = (TestCa::new(), TestCa::new());
    let Some(mcp) = https_server(dir.path(), &ca, Some(&clients_ca)) else {
        return;
    };

    let untrusting = TestServer::start().await;
    register_add_at(&untrusting, "mcp-tls", &mcp.url()).await;
    let refused = invoke(&untrusting, "add", json!({"a": 1, "b": 1}))
        .await
        .expect_err("an unverifiable certificate");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("certificate")
            && refused
                .message()
                .contains("public CAs (set provider_ca_file"),
        "{}",
        refused.message()
    );
    untrusting.stop().await;

    let without_certificate = TestServer::start_with(ServerOptions {
        provider_tls: provider_tls(dir.path(), &ca, None),
        ..ServerOptions::default()
    })
    .await;
    register_add_at(&without_certificate, "mcp-tls", &mcp.url()).await;
    let refused = invoke(&without_certificate, "add", json!({"a": 1, "b": 1}))
        .await
        .expect_err("no client certificate");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("client certificate"),
        "{}",
        refused.message()
    );
    without_certificate.stop().await;

    let trusting = TestServer::start_with(ServerOptions {
        provider_tls: provider_tls(dir.path(), &ca, Some(&clients_ca)),
        ..ServerOptions::default()
    })
    .await;
    register_add_at(&trusting, "mcp-tls", &mcp.url()).await;
    let added = invoke(&trusting, "add", json!({"a": 1, "b": 1}))
        .await
        .expect("called");
    assert_eq!(output(&added), json!({"result": 2}));
    trusting.stop().await;
}
