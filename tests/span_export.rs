//! How spans reach a collector: over OTLP/gRPC or OTLP/HTTP (`otlp_protocol`), in plain text
//! or over TLS with the collector's certificate checked against `otlp_ca_file`, each
//! received by a collector served here that decodes OpenTelemetry's own messages.

mod common;

use std::path::PathBuf;

use common::collector::*;
use common::invoke_fixture::*;
use common::tls::TestCa;
use common::*;
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::otlp::{OtlpExport, OtlpProtocol};

const INVOKE_SPAN: &str = "toolplane.v1.ToolInvokeService/InvokeTool";

fn export(endpoint: String, protocol: OtlpProtocol, ca_file: Option<PathBuf>) -> ServerOptions {
    ServerOptions {
        otlp: Some(OtlpExport {
            endpoint,
            protocol,
            ca_file,
        }),
        ..test_options()
    }
}

/// Runs one InvokeTool call through a server exporting as `options` say to `collector`;
/// answers the InvokeTool spans it received.
async fn invoke_once_exporting(
    options: ServerOptions,
    (_, collector, collector_task): Serving,
) -> usize {
    let setup = setup_with(options).await;
    let mut client = invoker(&setup.server).await;
    client
        .invoke_tool(request("echo", json!({"n": 4})))
        .await
        .expect("echoed whether or not spans get through");
    let spans = stop_and_collect(setup, &collector, collector_task).await;
    named(&spans, INVOKE_SPAN).len()
}

/// Over `https://`, spans reach an OTLP/gRPC collector whose certificate the CA in
/// `otlp_ca_file` signed; checked against the public CAs only, that collector is not trusted
/// and gets nothing, and the calls go on regardless.
#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_a_tls_collector_only_when_its_ca_is_trusted() {
    let ca = TestCa::new();
    let identity = ca.server(&["127.0.0.1"]).identity();
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = ca.write(dir.path(), "collector-ca.pem");
    for trusted in [true, false] {
        let collector = start_collector_with(Some(identity.clone())).await;
        let endpoint = collector.0.clone();
        assert!(endpoint.starts_with("https://"), "{endpoint}");
        let options = export(
            endpoint,
            OtlpProtocol::Grpc,
            trusted.then(|| ca_file.clone()),
        );
        let received = invoke_once_exporting(options, collector).await;
        assert_eq!(received, usize::from(trusted), "trusted: {trusted}");
    }
}

/// With `otlp_protocol = "http/protobuf"` spans are POSTed to an OTLP/HTTP collector, at
/// `/v1/traces` when the endpoint names no path and at the endpoint's own path when it names
/// one; an OTLP/gRPC collector's address is not where they go.
#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_an_http_collector_at_its_traces_path() {
    for (path, expected_path) in [("", "/v1/traces"), ("/otlp/traces", "/otlp/traces")] {
        let collector = start_http_collector(None).await;
        let endpoint = format!("{}{path}", collector.0);
        let paths = std::sync::Arc::clone(&collector.1.http_paths);
        let options = export(endpoint, OtlpProtocol::HttpProtobuf, None);
        let received = invoke_once_exporting(options, collector).await;
        assert_eq!(received, 1, "endpoint path {path:?}");
        let paths = paths.lock().expect("lock").clone();
        assert!(!paths.is_empty(), "no export arrived");
        assert!(paths.iter().all(|p| p == expected_path), "{paths:?}");
    }
}

/// Over `https://`, OTLP/HTTP exports reach a collector whose certificate the CA in
/// `otlp_ca_file` signed, and not one checked against the public CAs only.
#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_an_https_collector_only_when_its_ca_is_trusted() {
    let ca = TestCa::new();
    let issued = ca.server(&["127.0.0.1"]);
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = ca.write(dir.path(), "collector-ca.pem");
    for trusted in [true, false] {
        let tls = (issued.cert_pem.clone(), issued.key_pem.clone());
        let collector = start_http_collector(Some(tls)).await;
        let endpoint = collector.0.clone();
        assert!(endpoint.starts_with("https://"), "{endpoint}");
        let options = export(
            endpoint,
            OtlpProtocol::HttpProtobuf,
            trusted.then(|| ca_file.clone()),
        );
        let received = invoke_once_exporting(options, collector).await;
        assert_eq!(received, usize::from(trusted), "trusted: {trusted}");
    }
}

/// A CA file that cannot be read, or holds no certificate, stops the server from starting,
/// naming the setting and the file, whichever the protocol.
#[tokio::test(flavor = "multi_thread")]
async fn an_unusable_ca_file_stops_the_start() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").expect("written");
    let cases = [
        (
            OtlpProtocol::Grpc,
            PathBuf::from("/nonexistent/collector-ca.pem"),
        ),
        (
            OtlpProtocol::HttpProtobuf,
            PathBuf::from("/nonexistent/collector-ca.pem"),
        ),
        (OtlpProtocol::HttpProtobuf, empty),
    ];
    for (protocol, ca_file) in cases {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let options = export(
            "https://127.0.0.1:4317".into(),
            protocol,
            Some(ca_file.clone()),
        );
        let error = toolplane::grpc::serve(listener, options, std::future::pending())
            .await
            .expect_err("the CA file cannot be used");
        let message = error.to_string();
        let named = ca_file.display().to_string();
        assert!(
            message.contains("otlp_ca_file") && message.contains(&named),
            "{protocol:?}: {message}"
        );
    }
}
