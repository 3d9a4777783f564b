//! How a client connects to a toolplane that serves TLS (an `https://` endpoint): the
//! server's certificate checked against the public CAs or the CA certificates in a file, and a
//! client certificate for a server that asks for one.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// TLS files that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClientTlsError(String);

/// The files a client's TLS is configured with; all empty checks the server against the
/// public CAs and presents no certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// CA certificates (PEM) the server's certificate is checked against; `None` checks it
    /// against the public CAs.
    pub ca_file: Option<PathBuf>,
    /// A certificate chain (PEM) presented to a server that asks for one; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The private key (PEM) of `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl ClientTlsFiles {
    /// Whether any file is named.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// tonic's TLS configuration for these files, each read now.
    pub fn config(&self, domain: &str) -> Result<ClientTlsConfig, ClientTlsError> {
        let mut config = ClientTlsConfig::new().domain_name(domain);
        config = match &self.ca_file {
            Some(path) => config.ca_certificate(Certificate::from_pem(read("CA file", path)?)),
            None => config.with_webpki_roots(),
        };
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Ok(config.identity(Identity::from_pem(
                read("client certificate", cert)?,
                read("client key", key)?,
            ))),
            (None, None) => Ok(config),
            _ => Err(ClientTlsError(
                "a client certificate and its key go together: give both or neither".to_owned(),
            )),
        }
    }
}

impl ClientTlsFiles {
    /// `endpoint` set up to connect as these files say when it is `https://` (its host is the
    /// name the server's certificate must carry); an `http://` endpoint is refused when any
    /// file is named, as they would be ignored.
    pub fn apply_to(&self, endpoint: Endpoint) -> Result<Endpoint, ClientTlsError> {
        let uri = endpoint.uri().clone();
        if uri.scheme_str() != Some("https") {
            if self.is_empty() {
                return Ok(endpoint);
            }
            return Err(ClientTlsError(format!(
                "TLS files are given but {uri} is not an https:// endpoint"
            )));
        }
        let host = uri.host().unwrap_or_default();
        let domain = host.trim_start_matches('[').trim_end_matches(']');
        endpoint
            .tls_config(self.config(domain)?)
            .map_err(|error| ClientTlsError(super::error_chain(&error)))
    }
}

fn read(what: &str, path: &Path) -> Result<Vec<u8>, ClientTlsError> {
    std::fs::read(path)
        .map_err(|error| ClientTlsError(format!("{what} {}: {error}", path.display())))
}
