//! TLS on the connections toolplane opens (to providers, to the OTLP collector): the files
//! that configure it, and the rustls client configuration built from them.
//!
//! The server's certificate is checked against the public CAs (the webpki roots, Mozilla's
//! list) or, when a CA file is named, against the CA certificates in that file alone, as a
//! cluster's own CA usually signs its services' certificates. When a client certificate and
//! key are named, toolplane presents that certificate to servers that ask for one (mutual
//! TLS). Built on rustls with the ring provider (tokio-rustls), the TLS stack tonic itself
//! uses.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use super::tls_files::{TlsFileError, ca_certificates, certificates, private_key};

/// The ALPN of gRPC connections: HTTP/2 alone.
pub const ALPN_H2: &[&[u8]] = &[b"h2"];
/// The ALPN of HTTP connections (OTLP/HTTP, chat models, MCP servers): HTTP/2 and HTTP/1.1,
/// whichever the server picks.
pub const ALPN_HTTP: &[&[u8]] = &[b"h2", b"http/1.1"];

/// The settings of no files: the TLS of HTTP clients no setting configures.
const NO_SETTINGS: OutgoingTlsSettings = OutgoingTlsSettings {
    ca_file: "",
    client_cert_file: "",
    client_key_file: "",
};

/// The files that say how toolplane connects to an `https://` server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutgoingTlsFiles {
    /// CA certificates (PEM) servers' certificates are checked against; `None` checks them
    /// against the public CAs.
    pub ca_file: Option<PathBuf>,
    /// The certificate toolplane presents to servers that ask for one; `None` presents none.
    pub client_identity: Option<ClientIdentityFiles>,
}

/// A client certificate chain and its private key, both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentityFiles {
    /// The certificate chain (PEM), toolplane's own certificate first.
    pub cert_file: PathBuf,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// What the settings naming an [`OutgoingTlsFiles`]' files are called, so an error names the
/// one to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutgoingTlsSettings {
    /// The setting naming [`OutgoingTlsFiles::ca_file`].
    pub ca_file: &'static str,
    /// The setting naming [`ClientIdentityFiles::cert_file`].
    pub client_cert_file: &'static str,
    /// The setting naming [`ClientIdentityFiles::key_file`].
    pub client_key_file: &'static str,
}

/// Why TLS on outgoing connections cannot be set up as configured.
#[derive(Debug, thiserror::Error)]
pub enum OutgoingTlsError {
    /// A file could not be read or does not hold what its setting needs.
    #[error(transparent)]
    File(#[from] TlsFileError),
    /// The client certificate and key were read but cannot be used together.
    #[error(
        "{} {cert} and {} {key} cannot be used together: {error}",
        .settings.client_cert_file,
        .settings.client_key_file
    )]
    Identity {
        /// What the settings are called.
        settings: &'static OutgoingTlsSettings,
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls found.
        error: rustls::Error,
    },
}

impl OutgoingTlsFiles {
    /// Every file named, to watch for renewals.
    pub fn paths(&self) -> Vec<PathBuf> {
        let identity = self
            .client_identity
            .iter()
            .flat_map(|identity| [identity.cert_file.clone(), identity.key_file.clone()]);
        self.ca_file.iter().cloned().chain(identity).collect()
    }

    /// The rustls client configuration these files describe, every file read now, offering
    /// `alpn` (HTTP/2 alone, `h2`, for gRPC).
    pub fn client_config(
        &self,
        settings: &'static OutgoingTlsSettings,
        alpn: &[&[u8]],
    ) -> Result<Arc<ClientConfig>, OutgoingTlsError> {
        let roots = match &self.ca_file {
            Some(path) => ca_certificates(settings.ca_file, path)?,
            None => public_roots(),
        };
        let identity = match &self.client_identity {
            Some(identity) => Some((
                certificates(settings.client_cert_file, &identity.cert_file)?,
                private_key(settings.client_key_file, &identity.key_file)?,
                identity,
            )),
            None => None,
        };
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("ring supports rustls's default protocol versions")
                .with_root_certificates(roots);
        let mut config = match identity {
            Some((chain, key, files)) => {
                builder.with_client_auth_cert(chain, key).map_err(|error| {
                    OutgoingTlsError::Identity {
                        settings,
                        cert: files.cert_file.clone(),
                        key: files.key_file.clone(),
                        error,
                    }
                })?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// A reqwest client builder whose TLS is `tls` or, when `None`, checks servers against the
/// public CAs and presents no client certificate (offering [`ALPN_HTTP`]), made with the ring
/// provider. Every reqwest client of toolplane starts here: reqwest is built without a crypto
/// provider of its own (as toolplane's TLS uses ring, its default aws-lc would be a second
/// one), and its own TLS setup would panic without a provider installed process-wide.
pub fn http_client_builder(tls: Option<&ClientConfig>) -> reqwest::ClientBuilder {
    static PUBLIC: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    let config = match tls {
        Some(config) => config.clone(),
        None => ClientConfig::clone(PUBLIC.get_or_init(|| {
            OutgoingTlsFiles::default()
                .client_config(&NO_SETTINGS, ALPN_HTTP)
                .expect("the public CAs and no client certificate read no file")
        })),
    };
    reqwest::Client::builder().tls_backend_preconfigured(config)
}

/// The public CAs (Mozilla's list, as webpki-roots carries it).
pub(crate) fn public_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}
