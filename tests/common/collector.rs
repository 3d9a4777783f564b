//! OTLP trace collectors served here on loopback: over gRPC from OpenTelemetry's own generated
//! collector service, and over HTTP (`POST /v1/traces`, protobuf bodies) with hyper, both
//! decoding OpenTelemetry's own messages; and helpers to read the spans they received.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::invoke_fixture::{Setup, setup_with};
use super::test_options;
use toolplane::grpc::ServerOptions;

/// Every span exported to it, with the `service.name` of its resource, the `x-api-key`
/// header of each export (empty when none came), and the path each HTTP export was sent to.
#[derive(Default, Clone)]
pub struct Collector {
    pub spans: Arc<Mutex<Vec<(String, Span)>>>,
    pub api_keys: Arc<Mutex<Vec<String>>>,
    pub http_paths: Arc<Mutex<Vec<String>>>,
}

impl Collector {
    fn record(&self, api_key: Option<&str>, request: ExportTraceServiceRequest) {
        let api_key = api_key.unwrap_or_default().to_owned();
        self.api_keys.lock().expect("lock").push(api_key);
        let mut spans = self.spans.lock().expect("lock");
        for resource_spans in request.resource_spans {
            let service_name = resource_spans
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|attribute| attribute.key == "service.name")
                .and_then(|attribute| match &attribute.value.as_ref()?.value {
                    Some(AnyValue::StringValue(name)) => Some(name.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                spans.extend(scope.spans.into_iter().map(|s| (service_name.clone(), s)));
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let api_key = request
            .metadata()
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        self.record(api_key.as_deref(), request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A collector being served: its endpoint, what it received, and its task.
pub type Serving = (String, Collector, tokio::task::JoinHandle<()>);

/// Serves an OTLP/gRPC collector on loopback.
pub async fn start_collector() -> Serving {
    start_collector_with(None).await
}

/// Serves an OTLP/gRPC collector on loopback, over TLS with `identity` when given
/// (`https://`).
pub async fn start_collector_with(identity: Option<tonic::transport::Identity>) -> Serving {
    start_grpc_collector(identity, None).await
}

/// Serves an OTLP/gRPC collector on loopback, over TLS with `identity` when given
/// (`https://`), taking only clients presenting a certificate the CA `client_ca` (PEM) signed
/// when that is given.
pub async fn start_grpc_collector(
    identity: Option<tonic::transport::Identity>,
    client_ca: Option<String>,
) -> Serving {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let collector = Collector::default();
    let service = TraceServiceServer::new(collector.clone());
    let scheme = if identity.is_some() { "https" } else { "http" };
    let mut server = tonic::transport::Server::builder();
    if let Some(identity) = identity {
        let mut tls = tonic::transport::ServerTlsConfig::new().identity(identity);
        if let Some(ca) = client_ca {
            tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        server = server.tls_config(tls).expect("TLS configured");
    }
    let task = tokio::spawn(async move {
        server
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .expect("collector serves");
    });
    (format!("{scheme}://{address}"), collector, task)
}

/// Serves an OTLP/HTTP collector on loopback (HTTP/1.1, as collectors' OTLP/HTTP receivers
/// answer), over TLS with the PEM certificate and key `tls` when given (`https://`): every
/// `POST` with a protobuf `ExportTraceServiceRequest` body is taken, whatever its path.
pub async fn start_http_collector(tls: Option<(String, String)>) -> Serving {
    start_http_collector_with(tls, None).await
}

/// As [`start_http_collector`], taking only clients presenting a certificate the CA
/// `client_ca` (PEM) signed when that is given.
pub async fn start_http_collector_with(
    tls: Option<(String, String)>,
    client_ca: Option<String>,
) -> Serving {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let collector = Collector::default();
    let acceptor = tls.map(|(cert, key)| tls_acceptor(&cert, &key, client_ca.as_deref()));
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    let serving = collector.clone();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (collector, acceptor) = (serving.clone(), acceptor.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let collector = collector.clone();
                    async move { Ok::<_, Infallible>(take_export(&collector, request).await) }
                });
                let http = hyper::server::conn::http1::Builder::new();
                let _ = match acceptor {
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(stream) => {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            http.serve_connection(io, service).await
                        }
                        Err(_) => return,
                    },
                    None => {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        http.serve_connection(io, service).await
                    }
                };
            });
        }
    });
    (format!("{scheme}://{address}"), collector, task)
}

async fn take_export(
    collector: &Collector,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let api_key = request
        .headers()
        .get("x-api-key")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let is_protobuf = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value == "application/x-protobuf");
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let decoded = body
        .ok()
        .filter(|_| is_protobuf)
        .and_then(|body| ExportTraceServiceRequest::decode(body).ok());
    let Some(export) = decoded else {
        let mut answer = http::Response::new(Full::new(Bytes::from_static(b"bad export")));
        *answer.status_mut() = http::StatusCode::BAD_REQUEST;
        return answer;
    };
    collector.http_paths.lock().expect("lock").push(path);
    collector.record(api_key.as_deref(), export);
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    let mut answer = http::Response::new(Full::new(Bytes::from(answer)));
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    answer
}

fn tls_acceptor(
    cert_pem: &str,
    key_pem: &str,
    client_ca: Option<&str>,
) -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        Some(ca_pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
                roots.add(ca.expect("CA certificate")).expect("usable CA");
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(chain, key).expect("identity");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// The test provider and a server exporting spans to the OTLP/gRPC collector at `endpoint`.
pub async fn exporting_to(endpoint: String) -> Setup {
    setup_with(ServerOptions {
        otlp: Some(toolplane::otlp::OtlpExport {
            endpoint,
            protocol: toolplane::otlp::OtlpProtocol::Grpc,
            tls: Default::default(),
        }),
        ..test_options()
    })
    .await
}

/// Stops the provider and the server (which sends the spans still queued), then the
/// collector; answers what it received.
pub async fn stop_and_collect(
    setup: Setup,
    collector: &Collector,
    collector_task: tokio::task::JoinHandle<()>,
) -> Vec<(String, Span)> {
    setup.provider.stop().await;
    setup.server.stop().await;
    collector_task.abort();
    std::mem::take(&mut *collector.spans.lock().expect("lock"))
}

/// The spans named `name`, in the order they were received.
pub fn named<'a>(spans: &'a [(String, Span)], name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .map(|(_, span)| span)
        .filter(|span| span.name == name)
        .collect()
}

/// The first span named `name`.
pub fn first_named<'a>(spans: &'a [(String, Span)], name: &str) -> &'a Span {
    named(spans, name)
        .first()
        .copied()
        .unwrap_or_else(|| panic!("no span named {name} in {spans:#?}"))
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| attribute.value.as_ref()?.value.as_ref())
}

/// The integer attribute `key` of `span`.
pub fn int_attribute(span: &Span, key: &str) -> Option<i64> {
    match attribute(span, key)? {
        AnyValue::IntValue(value) => Some(*value),
        _ => None,
    }
}

/// The string attribute `key` of `span`.
pub fn string_attribute<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attribute(span, key)? {
        AnyValue::StringValue(value) => Some(value),
        _ => None,
    }
}
