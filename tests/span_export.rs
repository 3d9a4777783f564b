//! How spans reach a collector: over OTLP/gRPC or OTLP/HTTP (`otlp_protocol`), in plain text
//! or over TLS with the collector's certificate checked against `otlp_ca_file` and, for a
//! collector that asks for one, a client certificate (`otlp_client_cert_file`), read again when
//! renewed; each received by a collector served here that decodes OpenTelemetry's own
//! messages.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::collector::*;
use common::invoke_fixture::*;
use common::tls::TestCa;
use common::*;
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::grpc::outgoing_tls::{ClientIdentityFiles, OutgoingTlsFiles};
use toolplane::otlp::{OtlpExport, OtlpProtocol};
use toolplane::pb;

const INVOKE_SPAN: &str = "toolplane.v1.ToolInvokeService/InvokeTool";

fn export(endpoint: String, protocol: OtlpProtocol, ca_file: Option<PathBuf>) -> ServerOptions {
    export_with(
        endpoint,
        protocol,
        OutgoingTlsFiles {
            ca_file,
            client_identity: None,
        },
    )
}

fn export_with(endpoint: String, protocol: OtlpProtocol, tls: OutgoingTlsFiles) -> ServerOptions {
    ServerOptions {
        otlp: Some(OtlpExport {
            endpoint,
            protocol,
            tls,
        }),
        ..test_options()
    }
}

/// TLS files trusting `ca_file` and presenting the certificate and key `identity` names.
fn presenting(ca_file: &Path, identity: Option<(PathBuf, PathBuf)>) -> OutgoingTlsFiles {
    OutgoingTlsFiles {
        ca_file: Some(ca_file.to_owned()),
        client_identity: identity.map(|(cert_file, key_file)| ClientIdentityFiles {
            cert_file,
            key_file,
        }),
    }
}

/// A collector over TLS for `protocol`, with a certificate `ca` signed for 127.0.0.1, taking
/// only clients whose certificate `clients_ca` signed.
async fn collector_asking_for_clients(
    protocol: OtlpProtocol,
    ca: &TestCa,
    clients_ca: &TestCa,
) -> Serving {
    let issued = ca.server(&["127.0.0.1"]);
    match protocol {
        OtlpProtocol::Grpc => {
            start_grpc_collector(Some(issued.identity()), Some(clients_ca.pem())).await
        }
        OtlpProtocol::HttpProtobuf => {
            let tls = (issued.cert_pem.clone(), issued.key_pem.clone());
            start_http_collector_with(Some(tls), Some(clients_ca.pem())).await
        }
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

/// A collector that asks for a client certificate gets spans, over either protocol, only from
/// a toolplane presenting one its clients' CA signed (`otlp_client_cert_file`,
/// `otlp_client_key_file`).
#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_a_collector_asking_for_a_client_certificate_only_when_one_is_presented() {
    let (ca, clients_ca) = (TestCa::new(), TestCa::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    let ca_file = ca.write(dir.path(), "collector-ca.pem");
    let identity = clients_ca
        .client("toolplane")
        .write(dir.path(), "toolplane");
    for protocol in [OtlpProtocol::Grpc, OtlpProtocol::HttpProtobuf] {
        for presented in [true, false] {
            let collector = collector_asking_for_clients(protocol, &ca, &clients_ca).await;
            let tls = presenting(&ca_file, presented.then(|| identity.clone()));
            let options = export_with(collector.0.clone(), protocol, tls);
            let received = invoke_once_exporting(options, collector).await;
            assert_eq!(
                received,
                usize::from(presented),
                "{protocol:?}, certificate presented: {presented}"
            );
        }
    }
}

/// A client certificate renewed on disk (here: replaced by one the collector's clients' CA
/// signed, where the first was signed by another CA, so the collector refused it) is presented
/// on the next connection to the collector, without a restart, over either protocol: the
/// running binary's exports, refused until then, reach the collector.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_client_certificate_is_presented_without_a_restart() {
    use common::process::ServerProcess;
    let (ca, clients_ca, other_ca) = (TestCa::new(), TestCa::new(), TestCa::new());
    for protocol in [OtlpProtocol::Grpc, OtlpProtocol::HttpProtobuf] {
        let dir = tempfile::tempdir().expect("temporary directory");
        let ca_file = ca.write(dir.path(), "collector-ca.pem");
        let (cert, key) = other_ca.client("toolplane").write(dir.path(), "toolplane");
        let (endpoint, collector, collector_task) =
            collector_asking_for_clients(protocol, &ca, &clients_ca).await;
        let protocol_name = match protocol {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        };
        let path = |path: &Path| path.display().to_string();
        let (ca_file, cert, key) = (path(&ca_file), path(&cert), path(&key));
        let server = ServerProcess::start(&[
            ("TOOLPLANE_OTLP_ENDPOINT", &endpoint),
            ("TOOLPLANE_OTLP_PROTOCOL", protocol_name),
            ("TOOLPLANE_OTLP_CA_FILE", &ca_file),
            ("TOOLPLANE_OTLP_CLIENT_CERT_FILE", &cert),
            ("TOOLPLANE_OTLP_CLIENT_KEY_FILE", &key),
            ("TOOLPLANE_TLS_RELOAD_INTERVAL", "100ms"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]);
        let channel = tonic::transport::Channel::from_shared(server.endpoint())
            .expect("an endpoint")
            .connect()
            .await
            .expect("connects");
        let mut discovery = pb::discovery_service_client::DiscoveryServiceClient::new(channel);
        let list = pb::ListServicesRequest {
            meta: meta(0),
            ..Default::default()
        };
        for _ in 0..10 {
            discovery.list_services(list.clone()).await.expect("listed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let received = || collector.spans.lock().expect("lock").len();
        assert_eq!(
            received(),
            0,
            "{protocol:?}: a refused certificate's exports arrived"
        );

        clients_ca
            .client("toolplane")
            .write(dir.path(), "toolplane");
        let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
        while received() == 0 {
            assert!(
                tokio::time::Instant::now() < give_up,
                "{protocol:?}: no span arrived with the renewed certificate"
            );
            discovery.list_services(list.clone()).await.expect("listed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let reloaded = server.log_lines_with("reloaded");
        let stopped = tokio::task::spawn_blocking(move || server.terminate())
            .await
            .expect("joined");
        assert_eq!(stopped.code(), Some(0));
        collector_task.abort();
        assert!(
            reloaded.iter().any(|line| line.contains("OTLP collector")),
            "{reloaded:?}"
        );
    }
}
