//! TLS to providers registered at `https://` endpoints.
//!
//! A provider's certificate is checked against the public CAs (the webpki roots, Mozilla's
//! list) or, when `provider_ca_file` is set, against the CA certificates in that file alone,
//! as a cluster's own CA usually signs its services' certificates. When `provider_client_cert_file`
//! and `provider_client_key_file` are set, toolplane presents that certificate to providers
//! that ask for one (mutual TLS), so a provider can tell toolplane's calls from others'.
//! Every connection offers HTTP/2 by ALPN (`h2`), as gRPC servers expect.
//!
//! Built on rustls with the ring provider (tokio-rustls), the TLS stack tonic itself uses;
//! the HTTP/2 connection above it is `unary_client`'s.

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, ClientConfig};

use super::outgoing_tls::{
    ALPN_H2, ALPN_HTTP, OutgoingTlsError, OutgoingTlsFiles, OutgoingTlsSettings,
};
use super::stream_errors::refusal_hint;

/// The settings that name the files of TLS to providers.
pub const PROVIDER_TLS_SETTINGS: OutgoingTlsSettings = OutgoingTlsSettings {
    ca_file: "provider_ca_file",
    client_cert_file: "provider_client_cert_file",
    client_key_file: "provider_client_key_file",
};

/// How toolplane connects to `https://` providers; cheap to clone, shared by every provider
/// connection.
#[derive(Clone)]
pub struct ProviderTls {
    /// The configuration new connections use; replaced whole when the files change
    /// ([`Self::reload`]).
    config: Arc<ArcSwap<ClientConfig>>,
    /// Whether `provider_ca_file` replaced the public CAs (for error messages).
    own_ca: bool,
}

impl std::fmt::Debug for ProviderTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderTls")
            .field("own_ca", &self.own_ca)
            .finish_non_exhaustive()
    }
}

impl Default for ProviderTls {
    /// The public CAs and no client certificate.
    fn default() -> Self {
        static PUBLIC: OnceLock<ProviderTls> = OnceLock::new();
        PUBLIC
            .get_or_init(|| {
                let config = OutgoingTlsFiles::default()
                    .client_config(&PROVIDER_TLS_SETTINGS, ALPN_H2)
                    .expect("the public CAs and no client certificate read no file");
                Self {
                    config: Arc::new(ArcSwap::from(config)),
                    own_ca: false,
                }
            })
            .clone()
    }
}

impl ProviderTls {
    /// TLS as `files` say: their CA certificates (or the public CAs) and client certificate.
    /// Every file is read and checked now, so a bad one stops the start, naming it.
    pub fn from_files(files: &OutgoingTlsFiles) -> Result<Self, OutgoingTlsError> {
        if files == &OutgoingTlsFiles::default() {
            return Ok(Self::default());
        }
        Ok(Self {
            config: Arc::new(ArcSwap::from(built(files)?)),
            own_ca: files.ca_file.is_some(),
        })
    }

    /// Builds the configuration from `files` again (they were renewed on disk) and uses it
    /// for every new provider connection; on an error the previous one stays in use.
    pub fn reload(&self, files: &OutgoingTlsFiles) -> Result<(), OutgoingTlsError> {
        self.config.store(built(files)?);
        Ok(())
    }

    /// The connector that opens TLS over a new provider connection.
    pub(crate) fn connector(&self) -> TlsConnector {
        TlsConnector::from(self.config.load_full())
    }

    /// The configuration of a new HTTP connection to a provider (an MCP server at an
    /// `mcp+https://` endpoint): as gRPC's, offering HTTP/2 and HTTP/1.1.
    pub(crate) fn http_config(&self) -> ClientConfig {
        let mut config = ClientConfig::clone(&self.config.load());
        config.alpn_protocols = ALPN_HTTP.iter().map(|protocol| protocol.to_vec()).collect();
        config
    }

    /// What a provider's certificate that could not be verified was checked against, for
    /// the error that says so.
    pub(crate) fn checked_against(&self) -> &'static str {
        if self.own_ca {
            "the CA certificates in provider_ca_file"
        } else {
            "the public CAs (set provider_ca_file to the CA that signed it)"
        }
    }

    /// What to add to the message of a connection to a provider that failed with `error` (or
    /// an error under it): what a certificate that could not be verified was checked against,
    /// or why a provider that ended the TLS handshake likely did; empty for other failures.
    pub(crate) fn failure_hint(&self, error: &(dyn std::error::Error + 'static)) -> String {
        let mut text = String::new();
        for cause in causes(error) {
            if let Some(rustls::Error::InvalidCertificate(_)) = cause.downcast_ref() {
                return format!(
                    "; its certificate was checked against {}",
                    self.checked_against()
                );
            }
            text.push_str(&cause.to_string());
            text.push('\n');
        }
        refusal_hint(&text).to_owned()
    }
}

/// `error` and the errors under it, outermost first. An I/O error's `source` skips the error it
/// wraps, so the chain goes into that one instead.
pub(crate) fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |error| {
        match error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(wrapped) => Some(wrapped as &(dyn std::error::Error + 'static)),
            None => error.source(),
        }
    })
}

/// The client configuration `files` describe for providers, every file read now.
fn built(files: &OutgoingTlsFiles) -> Result<Arc<ClientConfig>, OutgoingTlsError> {
    files.client_config(&PROVIDER_TLS_SETTINGS, ALPN_H2)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::grpc::outgoing_tls::ClientIdentityFiles;

    fn written(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("written");
        path
    }

    fn ca_only(path: PathBuf) -> OutgoingTlsFiles {
        OutgoingTlsFiles {
            ca_file: Some(path),
            client_identity: None,
        }
    }

    #[test]
    fn a_missing_ca_file_is_named_with_its_setting() {
        let error = ProviderTls::from_files(&ca_only(PathBuf::from("/nonexistent/ca.pem")))
            .expect_err("missing");
        let text = error.to_string();
        assert!(
            text.starts_with("provider_ca_file /nonexistent/ca.pem: cannot read it"),
            "{text}"
        );
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let empty = written(&dir, "empty.pem", "not a certificate\n");
        let text = ProviderTls::from_files(&ca_only(empty))
            .expect_err("no certificate")
            .to_string();
        assert!(text.contains("holds no PEM certificate"), "{text}");
    }

    #[test]
    fn a_key_file_without_a_key_is_refused() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let ca = rcgen::generate_simple_self_signed(vec!["ca".to_owned()]).expect("certificate");
        let cert = written(&dir, "client.pem", &ca.cert.pem());
        let files = OutgoingTlsFiles {
            ca_file: None,
            client_identity: Some(ClientIdentityFiles {
                cert_file: cert.clone(),
                key_file: cert,
            }),
        };
        let text = ProviderTls::from_files(&files)
            .expect_err("no key")
            .to_string();
        assert!(text.starts_with("provider_client_key_file"), "{text}");
        assert!(text.contains("no usable PEM private key"), "{text}");
    }

    #[test]
    fn a_key_that_is_not_the_certificate_s_is_refused() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let one = rcgen::generate_simple_self_signed(vec!["one".to_owned()]).expect("one");
        let other = rcgen::generate_simple_self_signed(vec!["two".to_owned()]).expect("two");
        let files = OutgoingTlsFiles {
            ca_file: Some(written(&dir, "ca.pem", &one.cert.pem())),
            client_identity: Some(ClientIdentityFiles {
                cert_file: written(&dir, "client.pem", &one.cert.pem()),
                key_file: written(&dir, "client.key", &other.signing_key.serialize_pem()),
            }),
        };
        let text = ProviderTls::from_files(&files)
            .expect_err("mismatched")
            .to_string();
        assert!(text.contains("cannot be used together"), "{text}");
    }

    #[test]
    fn a_failure_hint_finds_the_certificate_error_inside_nested_io_errors() {
        let certificate =
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let nested = std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            certificate,
        ));
        let hint = ProviderTls::default().failure_hint(&nested);
        assert!(hint.contains("checked against the public CAs"), "{hint}");
        let refused = std::io::Error::other("received fatal alert: CertificateRequired");
        let hint = ProviderTls::default().failure_hint(&refused);
        assert!(hint.contains("set provider_client_cert_file"), "{hint}");
        let refused_connection = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(ProviderTls::default().failure_hint(&refused_connection), "");
    }

    #[test]
    fn matching_files_are_accepted() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let one = rcgen::generate_simple_self_signed(vec!["one".to_owned()]).expect("one");
        let files = OutgoingTlsFiles {
            ca_file: Some(written(&dir, "ca.pem", &one.cert.pem())),
            client_identity: Some(ClientIdentityFiles {
                cert_file: written(&dir, "client.pem", &one.cert.pem()),
                key_file: written(&dir, "client.key", &one.signing_key.serialize_pem()),
            }),
        };
        let tls = ProviderTls::from_files(&files).expect("accepted");
        assert!(tls.checked_against().contains("provider_ca_file"));
        assert!(
            ProviderTls::default()
                .checked_against()
                .contains("public CAs")
        );
    }
}
