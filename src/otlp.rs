//! Where and how spans are exported: the OTLP protocol (`otlp_protocol`), the collector's
//! address (`otlp_endpoint`) and, over TLS, what its certificate is checked against
//! (`otlp_ca_file`).
//!
//! OTLP/gRPC goes through tonic (opentelemetry-otlp's exporter). OTLP/HTTP (`http/protobuf`,
//! the protobuf bodies POSTed to `/v1/traces`) goes through the same exporter with this
//! crate's reqwest client: opentelemetry-otlp's own reqwest client is a later reqwest major
//! version than the one the agents' chat models are called with, and would bring a second
//! HTTP and TLS stack into the build; `ReqwestClient` adapts the one already here.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use serde::{Deserialize, Serialize};
use tokio_rustls::rustls::pki_types::CertificateDer;

use crate::grpc::tls_files::{TlsFileError, certificates};

/// The setting that names the collector's CA file, as errors call it.
const CA_FILE_SETTING: &str = "otlp_ca_file";
/// How long the exporter waits for the collector to take one batch.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
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
    /// CA certificates (PEM) an `https://` collector's certificate is checked against; `None`
    /// checks it against the public CAs (Mozilla's list, built in).
    pub ca_file: Option<PathBuf>,
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
    /// The CA certificate file cannot be read, or holds no certificate.
    #[error(transparent)]
    CaFile(#[from] TlsFileError),
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

/// The span exporter `export` describes, its CA file read now. Over gRPC it must be built
/// inside a tokio runtime.
pub(crate) fn span_exporter(export: &OtlpExport) -> Result<SpanExporter, OtlpError> {
    check_endpoint(&export.endpoint)?;
    let tls = export.endpoint.starts_with("https://");
    let ca_file = export.ca_file.as_deref().filter(|_| tls);
    let ca_certificates = ca_file
        .map(|path| certificates(CA_FILE_SETTING, path))
        .transpose()?;
    let exporter = match export.protocol {
        OtlpProtocol::Grpc => {
            let mut builder = SpanExporter::builder()
                .with_tonic()
                .with_endpoint(&export.endpoint)
                .with_timeout(EXPORT_TIMEOUT);
            if tls {
                builder = builder.with_tls_config(match ca_file {
                    Some(path) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(
                        std::fs::read(path).map_err(|source| TlsFileError::Read {
                            setting: CA_FILE_SETTING,
                            path: path.to_owned(),
                            source,
                        })?,
                    )),
                    None => ClientTlsConfig::new().with_webpki_roots(),
                });
            }
            builder.build()?
        }
        OtlpProtocol::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(http_traces_url(&export.endpoint))
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(ReqwestClient::new(ca_certificates)?)
            .build()?,
    };
    Ok(exporter)
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

/// opentelemetry-http's client trait over this crate's reqwest (see the module docs).
#[derive(Debug)]
struct ReqwestClient(reqwest::Client);

impl ReqwestClient {
    /// A client trusting the CA certificates `ca_certificates` alone, or the public CAs
    /// when `None`.
    fn new(ca_certificates: Option<Vec<CertificateDer<'static>>>) -> Result<Self, OtlpError> {
        let mut builder = reqwest::Client::builder().timeout(EXPORT_TIMEOUT);
        if let Some(certificates) = ca_certificates {
            builder = builder.tls_built_in_root_certs(false);
            for certificate in certificates {
                builder =
                    builder.add_root_certificate(reqwest::Certificate::from_der(&certificate)?);
            }
        }
        Ok(Self(builder.build()?))
    }
}

#[tonic::async_trait]
impl opentelemetry_http::HttpClient for ReqwestClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let mut answer = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let status = answer.status();
        let headers = std::mem::take(answer.headers_mut());
        let mut read = bytes::BytesMut::new();
        while let Some(chunk) = answer.chunk().await? {
            if read.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(Box::new(opentelemetry_http::ResponseBodyTooLarge::new()));
            }
            read.extend_from_slice(&chunk);
        }
        let mut response = http::Response::builder()
            .status(status)
            .body(read.freeze())?;
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
