//! Where and how spans are exported: the OTLP protocol (`otlp_protocol`), the collector's
//! address (`otlp_endpoint`) and, over TLS, what its certificate is checked against
//! (`otlp_ca_file`) and the certificate toolplane presents to it (`otlp_client_cert_file`,
//! `otlp_client_key_file`), read again when renewed (`CollectorTls`).
//!
//! OTLP/gRPC goes through tonic (opentelemetry-otlp's exporter); to an `https://` collector
//! over a channel whose connections make their TLS with the configuration installed when they
//! open, so renewed files reach the next connection. OTLP/HTTP (`http/protobuf`, the protobuf
//! bodies POSTed to `/v1/traces`) goes through the same exporter with a reqwest client made
//! here (`ReqwestClient`) rather than opentelemetry-http's, so that its TLS is toolplane's
//! (ring, the files named) and renewed files reach the next export: each export uses the
//! client installed then.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use serde::{Deserialize, Serialize};
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;

use crate::grpc::outgoing_tls::{
    ALPN_H2, ALPN_HTTP, OutgoingTlsError, OutgoingTlsFiles, OutgoingTlsSettings,
    http_client_builder,
};

/// The settings that name the files of TLS to the collector, as errors call them.
pub const OTLP_TLS_SETTINGS: OutgoingTlsSettings = OutgoingTlsSettings {
    ca_file: "otlp_ca_file",
    client_cert_file: "otlp_client_cert_file",
    client_key_file: "otlp_client_key_file",
};
/// How long the exporter waits for the collector to take one batch.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long opening a connection to the collector may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The path OTLP/HTTP trace exports are sent to when the endpoint names none.
const HTTP_TRACES_PATH: &str = "/v1/traces";
/// The largest answer read from an OTLP/HTTP collector (its answers are small).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The OTLP protocol spans are exported with, named as `OTEL_EXPORTER_OTLP_PROTOCOL` names
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    /// OTLP/gRPC, usually on port 4317.
    #[default]
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP/HTTP with protobuf bodies, usually on port 4318.
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl std::fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Grpc => "OTLP/gRPC",
            Self::HttpProtobuf => "OTLP/HTTP",
        })
    }
}

/// Where spans are exported to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpExport {
    /// The collector: `http://host:4317` (gRPC) or `http://host:4318` (HTTP), `https://` for
    /// TLS. Over HTTP an address without a path is sent to `/v1/traces`; one with a path is
    /// used as it is.
    pub endpoint: String,
    /// The protocol.
    pub protocol: OtlpProtocol,
    /// TLS to an `https://` collector: the CA certificates its certificate is checked
    /// against (the public CAs when none) and the client certificate presented to it (none
    /// when not named).
    pub tls: OutgoingTlsFiles,
}

/// Why spans cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The endpoint is not an `http://` or `https://` address with a host.
    #[error(
        "otlp_endpoint {0:?} is not an OTLP address such as http://otel-collector:4317 (gRPC) or \
         http://otel-collector:4318 (HTTP), or https:// for TLS; leave it empty to export no \
         spans"
    )]
    Endpoint(String),
    /// A TLS file cannot be read or used.
    #[error(transparent)]
    Tls(#[from] OutgoingTlsError),
    /// The endpoint's host cannot be a TLS server name.
    #[error("otlp_endpoint {0:?}: its host cannot be checked against a certificate")]
    ServerName(String),
    /// The HTTP client could not be built.
    #[error("OTLP/HTTP client: {0}")]
    HttpClient(#[from] reqwest::Error),
    /// The OTLP exporter could not be built.
    #[error("OTLP span exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Checks that `endpoint` is an address spans can be exported to: `http://` (plain text) or
/// `https://` (TLS), with a host.
pub fn check_endpoint(endpoint: &str) -> Result<(), OtlpError> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| OtlpError::Endpoint(endpoint.to_owned()))?;
    let scheme_known = matches!(uri.scheme_str(), Some("http" | "https"));
    if !scheme_known || uri.host().is_none_or(str::is_empty) {
        return Err(OtlpError::Endpoint(endpoint.to_owned()));
    }
    Ok(())
}

/// The span exporter `export` describes, its TLS files read now, and for an `https://`
/// collector the TLS it uses, to install renewed files in. Over gRPC it must be built inside
/// a tokio runtime.
pub(crate) fn span_exporter(
    export: &OtlpExport,
) -> Result<(SpanExporter, Option<CollectorTls>), OtlpError> {
    check_endpoint(&export.endpoint)?;
    let tls = export
        .endpoint
        .starts_with("https://")
        .then(|| CollectorTls::new(export))
        .transpose()?;
    let exporter = match export.protocol {
        OtlpProtocol::Grpc => {
            let builder = SpanExporter::builder()
                .with_tonic()
                .with_timeout(EXPORT_TIMEOUT);
            match tls.as_ref().map(|tls| &tls.installed) {
                Some(Installed::Grpc(config)) => {
                    builder.with_channel(tls_channel(&export.endpoint, config)?)
                }
                _ => builder.with_endpoint(&export.endpoint),
            }
            .build()?
        }
        OtlpProtocol::HttpProtobuf => {
            let client = match tls.as_ref().map(|tls| &tls.installed) {
                Some(Installed::Http(client)) => Arc::clone(client),
                _ => Arc::new(ArcSwap::from_pointee(http_client(None)?)),
            };
            SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(http_traces_url(&export.endpoint))
                .with_timeout(EXPORT_TIMEOUT)
                .with_http_client(ReqwestClient(client))
                .build()?
        }
    };
    Ok((exporter, tls))
}

/// TLS to an `https://` collector as the exporter uses it. [`CollectorTls::reload`] builds it
/// from the files again (they were renewed) and installs it; the exporter's next connection
/// uses it, open ones keep theirs.
#[derive(Clone)]
pub struct CollectorTls {
    files: OutgoingTlsFiles,
    installed: Installed,
}

/// What the exporter reads its TLS from, per protocol.
#[derive(Clone)]
enum Installed {
    /// What new OTLP/gRPC connections make their TLS with (HTTP/2 alone).
    Grpc(Arc<ArcSwap<ClientConfig>>),
    /// The OTLP/HTTP client, its TLS built in (HTTP/2 or HTTP/1.1).
    Http(Arc<ArcSwap<reqwest::Client>>),
}

impl std::fmt::Debug for CollectorTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectorTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl CollectorTls {
    fn new(export: &OtlpExport) -> Result<Self, OtlpError> {
        let files = &export.tls;
        let installed = match export.protocol {
            OtlpProtocol::Grpc => Installed::Grpc(Arc::new(ArcSwap::new(grpc_config(files)?))),
            OtlpProtocol::HttpProtobuf => {
                Installed::Http(Arc::new(ArcSwap::from_pointee(https_client(files)?)))
            }
        };
        Ok(Self {
            files: files.clone(),
            installed,
        })
    }

    /// The files TLS to the collector is built from, to watch for renewals.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.files.paths()
    }

    /// Builds TLS to the collector from its files again and installs it for the exporter's
    /// next connection; on an error the previous one stays in use.
    pub fn reload(&self) -> Result<(), OtlpError> {
        match &self.installed {
            Installed::Grpc(config) => config.store(grpc_config(&self.files)?),
            Installed::Http(client) => client.store(Arc::new(https_client(&self.files)?)),
        }
        Ok(())
    }
}

/// The TLS configuration of OTLP/gRPC connections `files` describe.
fn grpc_config(files: &OutgoingTlsFiles) -> Result<Arc<ClientConfig>, OtlpError> {
    Ok(files.client_config(&OTLP_TLS_SETTINGS, ALPN_H2)?)
}

/// The OTLP/HTTP client to an `https://` collector with the TLS `files` describe.
fn https_client(files: &OutgoingTlsFiles) -> Result<reqwest::Client, OtlpError> {
    let config = files.client_config(&OTLP_TLS_SETTINGS, ALPN_HTTP)?;
    Ok(http_client(Some(&config))?)
}

/// A tonic channel to the `https://` collector at `endpoint` whose connections make their TLS
/// with the configuration `config` holds when they open. tonic is given the address as
/// `http://`, so it leaves TLS to this channel's connector, and the `https://` origin the
/// requests name.
fn tls_channel(
    endpoint: &str,
    config: &Arc<ArcSwap<ClientConfig>>,
) -> Result<tonic::transport::Channel, OtlpError> {
    let not_usable = || OtlpError::Endpoint(endpoint.to_owned());
    let origin: http::Uri = endpoint.parse().map_err(|_| not_usable())?;
    let host = origin.host().ok_or_else(not_usable)?;
    let port = origin.port_u16().unwrap_or(443);
    let name = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let server_name = ServerName::try_from(name.clone())
        .map_err(|_| OtlpError::ServerName(endpoint.to_owned()))?;
    let plain = format!("http://{host}:{port}");
    let config = Arc::clone(config);
    let connector = tower::service_fn(move |_: http::Uri| {
        let (config, server_name, name) = (config.load_full(), server_name.clone(), name.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect((name.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(server_name, tcp)
                .await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    Ok(tonic::transport::Endpoint::from_shared(plain)
        .map_err(|_| not_usable())?
        .origin(origin)
        .timeout(EXPORT_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_with_connector_lazy(connector))
}

/// The OTLP/HTTP client: with `tls` for an `https://` collector.
fn http_client(tls: Option<&ClientConfig>) -> Result<reqwest::Client, reqwest::Error> {
    http_client_builder(tls).timeout(EXPORT_TIMEOUT).build()
}

/// The URL OTLP/HTTP trace exports are POSTed to: `endpoint` + `/v1/traces` when it names no
/// path, as OpenTelemetry's SDKs treat `OTEL_EXPORTER_OTLP_ENDPOINT`; else `endpoint` itself.
fn http_traces_url(endpoint: &str) -> String {
    let has_path = endpoint
        .parse::<http::Uri>()
        .is_ok_and(|uri| !matches!(uri.path(), "" | "/"));
    if has_path {
        endpoint.to_owned()
    } else {
        format!("{}{HTTP_TRACES_PATH}", endpoint.trim_end_matches('/'))
    }
}

/// opentelemetry-http's client trait over a reqwest client made here (see the module docs);
/// each export uses the client installed then.
#[derive(Debug)]
struct ReqwestClient(Arc<ArcSwap<reqwest::Client>>);

#[tonic::async_trait]
impl opentelemetry_http::HttpClient for ReqwestClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let client = self.0.load_full();
        let mut answer = client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let status = answer.status();
        let headers = std::mem::take(answer.headers_mut());
        let Some(read) = crate::http_answers::body_within(&mut answer, MAX_ANSWER_BYTES).await?
        else {
            return Err(Box::new(opentelemetry_http::ResponseBodyTooLarge::new()));
        };
        let mut response = http::Response::builder()
            .status(status)
            .body(Bytes::from(read))?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_http_or_https_with_a_host() {
        check_endpoint("http://otel-collector:4317").expect("valid");
        check_endpoint("http://127.0.0.1:4317").expect("valid");
        check_endpoint("https://otlp.example.com:443").expect("valid");
        for bad in [
            "",
            "otel-collector:4317",
            "http://",
            "grpc://c:1",
            "ftp://c:1",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_http_endpoint_without_a_path_is_sent_to_v1_traces() {
        let cases = [
            ("http://collector:4318", "http://collector:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            (
                "https://otel.example.com/otlp/v1/traces",
                "https://otel.example.com/otlp/v1/traces",
            ),
        ];
        for (endpoint, url) in cases {
            assert_eq!(http_traces_url(endpoint), url);
        }
    }

    #[test]
    fn the_protocol_reads_as_otel_exporter_otlp_protocol_names_it() {
        #[derive(Deserialize)]
        struct Setting {
            protocol: OtlpProtocol,
        }
        let read = |text: &str| toml::from_str::<Setting>(text).map(|setting| setting.protocol);
        assert_eq!(read(r#"protocol = "grpc""#).ok(), Some(OtlpProtocol::Grpc));
        assert_eq!(
            read(r#"protocol = "http/protobuf""#).ok(),
            Some(OtlpProtocol::HttpProtobuf)
        );
        let error = read(r#"protocol = "http/json""#).expect_err("not supported");
        assert!(error.to_string().contains("http/protobuf"), "{error}");
    }
}
