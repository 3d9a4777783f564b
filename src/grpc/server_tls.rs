//! TLS on toolplane's own gRPC port, when `tls_cert_file` and `tls_key_file` are set: callers
//! connect with `https://` (HTTP/2 by ALPN), and with `tls_client_ca_file` set only callers
//! presenting a certificate that CA signed get a connection (mutual TLS). The provider SDK
//! serves its TLS the same way (`ProviderConfig::tls`).
//!
//! Each accepted connection's handshake runs beside the others (bounded by
//! [`HANDSHAKE_TIMEOUT`]), so a caller that connects and sends nothing holds up no one. The
//! HTTP/2 connection is served above TLS exactly as over plain TCP, its writes coalesced
//! before they are encrypted (`coalesce`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;

use super::coalesce::CoalescingIo;
use super::tls_files::{TlsFileError, ca_certificates, certificates, content, private_key};

/// How long a caller may take over its TLS handshake before its connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files toolplane serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The server's certificate chain (PEM), its own certificate first.
    pub cert_file: PathBuf,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// CA certificates (PEM) that callers' client certificates must be signed by; `None`
    /// asks callers for no certificate.
    pub client_ca_file: Option<PathBuf>,
}

/// What the settings naming the TLS files are called where they are configured, so an error
/// names the one to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsSettingNames {
    /// The setting naming [`ServerTlsFiles::cert_file`].
    pub cert: &'static str,
    /// The setting naming [`ServerTlsFiles::key_file`].
    pub key: &'static str,
    /// The setting naming [`ServerTlsFiles::client_ca_file`].
    pub client_ca: &'static str,
}

/// toolplane's own settings (`toolplane.toml`).
pub const TOOLPLANE_TLS_SETTINGS: TlsSettingNames = TlsSettingNames {
    cert: "tls_cert_file",
    key: "tls_key_file",
    client_ca: "tls_client_ca_file",
};

/// Why TLS cannot be served as configured.
#[derive(Debug, thiserror::Error)]
pub enum ServerTlsError {
    /// A file could not be read or does not hold what its setting needs.
    #[error(transparent)]
    File(#[from] TlsFileError),
    /// The certificate and key were read but cannot be used together.
    #[error("{} {cert} and {} {key} cannot be used together: {error}", .names.cert, .names.key)]
    Identity {
        /// What the files' settings are called.
        names: TlsSettingNames,
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls found (boxed: the error is large and rare).
        error: Box<rustls::Error>,
    },
}

/// The TLS a server serves: the configuration new connections are accepted with, replaced
/// whole when the files change ([`Self::reload`]).
#[derive(Clone)]
pub struct ServedTls {
    config: Arc<ArcSwap<ServerConfig>>,
    names: TlsSettingNames,
    /// The ALPN protocols offered instead of `h2` alone ([`Self::for_http1_and_h2`]).
    alpn: Option<Vec<Vec<u8>>>,
}

impl std::fmt::Debug for ServedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedTls").finish_non_exhaustive()
    }
}

impl ServedTls {
    /// TLS as `files` say, every file read and checked now; errors name toolplane's
    /// settings.
    pub fn from_files(files: &ServerTlsFiles) -> Result<Self, ServerTlsError> {
        Self::from_files_named(files, TOOLPLANE_TLS_SETTINGS)
    }

    /// TLS as `files` say, every file read and checked now; errors (now and on reloads) call
    /// the files' settings `names`.
    pub fn from_files_named(
        files: &ServerTlsFiles,
        names: TlsSettingNames,
    ) -> Result<Self, ServerTlsError> {
        Ok(Self {
            config: Arc::new(ArcSwap::from(server_config(files, names)?)),
            names,
            alpn: None,
        })
    }

    /// The same TLS (the same files, reloaded with it) for a port that serves HTTP/1.1 as well
    /// as HTTP/2, as the MCP endpoint does: both are offered by ALPN.
    pub fn for_http1_and_h2(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
            names: self.names,
            alpn: Some(vec![b"h2".to_vec(), b"http/1.1".to_vec()]),
        }
    }

    /// Builds the configuration from `files` again (they were renewed on disk) and accepts
    /// every new connection with it; on an error the previous one stays in use.
    pub fn reload(&self, files: &ServerTlsFiles) -> Result<(), ServerTlsError> {
        self.config.store(server_config(files, self.names)?);
        Ok(())
    }

    fn acceptor(&self) -> TlsAcceptor {
        let config = self.config.load_full();
        match &self.alpn {
            None => TlsAcceptor::from(config),
            Some(protocols) => {
                let mut config = ServerConfig::clone(&config);
                config.alpn_protocols.clone_from(protocols);
                TlsAcceptor::from(Arc::new(config))
            }
        }
    }
}

/// The files a served TLS configuration is built from, to watch for renewals.
pub fn watched_files(files: &ServerTlsFiles) -> Vec<PathBuf> {
    let mut paths = vec![files.cert_file.clone(), files.key_file.clone()];
    paths.extend(files.client_ca_file.iter().cloned());
    paths
}

fn server_config(
    files: &ServerTlsFiles,
    names: TlsSettingNames,
) -> Result<Arc<ServerConfig>, ServerTlsError> {
    let chain = certificates(names.cert, &files.cert_file)?;
    let key = private_key(names.key, &files.key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("ring supports rustls's default protocol versions");
    let builder = match &files.client_ca_file {
        Some(path) => {
            let roots = ca_certificates(names.client_ca, path)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| content(names.client_ca, path, error.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder
            .with_single_cert(chain, key)
            .map_err(|error| ServerTlsError::Identity {
                names,
                cert: files.cert_file.clone(),
                key: files.key_file.clone(),
                error: Box::new(error),
            })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A served connection's transport, asked who is at its other end (for `tenant_access`): the
/// certificate its caller presented, and its address.
pub trait ConnectionPeer {
    /// The caller's own certificate (DER), if it presented one.
    fn peer_certificate(&self) -> Option<&[u8]>;
    /// The caller's address, if the socket still knows it.
    fn peer_address(&self) -> Option<std::net::SocketAddr>;
}

impl ConnectionPeer for TcpStream {
    fn peer_certificate(&self) -> Option<&[u8]> {
        None
    }

    fn peer_address(&self) -> Option<std::net::SocketAddr> {
        self.peer_addr().ok()
    }
}

impl ConnectionPeer for TlsStream<TcpStream> {
    fn peer_certificate(&self) -> Option<&[u8]> {
        let (_, session) = self.get_ref();
        session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|certificate| certificate.as_ref())
    }

    fn peer_address(&self) -> Option<std::net::SocketAddr> {
        self.get_ref().0.peer_addr().ok()
    }
}

impl<T: ConnectionPeer> ConnectionPeer for CoalescingIo<T> {
    fn peer_certificate(&self) -> Option<&[u8]> {
        self.get_ref().peer_certificate()
    }

    fn peer_address(&self) -> Option<std::net::SocketAddr> {
        self.get_ref().peer_address()
    }
}

/// The connections a server accepts on `listener` over TLS, with Nagle off and writes
/// coalesced (as its HTTP/2 wants, see `coalesce`); see [`handshaken`].
pub fn incoming(
    listener: TcpListener,
    tls: ServedTls,
) -> impl Stream<Item = io::Result<CoalescingIo<TlsStream<TcpStream>>>> + Send + 'static {
    handshaken(listener, tls).map(|accepted| accepted.map(CoalescingIo::new))
}

/// The connections a server accepts on `listener` over TLS, with Nagle off; a connection
/// whose handshake fails or outlasts [`HANDSHAKE_TIMEOUT`] is closed (and logged at DEBUG)
/// without ending the stream, and accepting waits a moment after failing
/// ([`super::accepting`]).
pub fn handshaken(
    listener: TcpListener,
    tls: ServedTls,
) -> impl Stream<Item = io::Result<TlsStream<TcpStream>>> + Send + 'static {
    let accepting = super::accepting::accepted(listener);
    let state = (Box::pin(accepting), FuturesUnordered::new(), tls);
    futures_util::stream::unfold(state, |(mut accepting, mut handshakes, tls)| async move {
        loop {
            tokio::select! {
                accepted = accepting.next() => match accepted {
                    Some(Ok(stream)) => handshakes.push(handshake(tls.acceptor(), stream)),
                    Some(Err(error)) => {
                        return Some((Err(error), (accepting, handshakes, tls)));
                    }
                    None => return None,
                },
                Some(done) = handshakes.next(), if !handshakes.is_empty() => match done {
                    Ok(stream) => return Some((Ok(stream), (accepting, handshakes, tls))),
                    Err(error) => tracing::debug!(%error, "a caller's TLS handshake failed"),
                },
            }
        }
    })
}

async fn handshake(acceptor: TlsAcceptor, stream: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    let peer = stream.peer_addr()?;
    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{peer}: no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
            )
        })?
        .map_err(|error| io::Error::new(error.kind(), format!("{peer}: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Written {
        _dir: tempfile::TempDir,
        cert: PathBuf,
        key: PathBuf,
        other_key: PathBuf,
    }

    fn written() -> Written {
        let dir = tempfile::tempdir().expect("temporary directory");
        let one = rcgen::generate_simple_self_signed(vec!["one".to_owned()]).expect("one");
        let other = rcgen::generate_simple_self_signed(vec!["two".to_owned()]).expect("two");
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("written");
            path
        };
        Written {
            cert: write("server.crt", one.cert.pem()),
            key: write("server.key", one.signing_key.serialize_pem()),
            other_key: write("other.key", other.signing_key.serialize_pem()),
            _dir: dir,
        }
    }

    #[test]
    fn a_certificate_and_its_key_serve_with_or_without_a_client_ca() {
        let files = written();
        let plain = ServerTlsFiles {
            cert_file: files.cert.clone(),
            key_file: files.key.clone(),
            client_ca_file: None,
        };
        assert!(ServedTls::from_files(&plain).is_ok());
        let mutual = ServerTlsFiles {
            client_ca_file: Some(files.cert.clone()),
            ..plain
        };
        assert!(ServedTls::from_files(&mutual).is_ok());
    }

    #[test]
    fn a_key_that_is_not_the_certificate_s_is_refused() {
        let files = written();
        let error = ServedTls::from_files(&ServerTlsFiles {
            cert_file: files.cert.clone(),
            key_file: files.other_key.clone(),
            client_ca_file: None,
        })
        .expect_err("mismatched");
        assert!(
            error.to_string().contains("cannot be used together"),
            "{error}"
        );
    }

    #[test]
    fn each_file_is_named_with_its_setting() {
        let files = written();
        let cases = [
            (
                "/nonexistent/a.crt",
                files.key.to_str(),
                None,
                "tls_cert_file /nonexistent/a.crt",
            ),
            (
                files.cert.to_str().expect("utf-8"),
                Some("/nonexistent/a.key"),
                None,
                "tls_key_file /nonexistent/a.key",
            ),
            (
                files.cert.to_str().expect("utf-8"),
                files.key.to_str(),
                Some("/nonexistent/ca.pem"),
                "tls_client_ca_file /nonexistent/ca.pem",
            ),
            (
                files.key.to_str().expect("utf-8"),
                files.key.to_str(),
                None,
                "holds no PEM certificate",
            ),
        ];
        for (cert, key, client_ca, expected) in cases {
            let error = ServedTls::from_files(&ServerTlsFiles {
                cert_file: cert.into(),
                key_file: key.expect("utf-8").into(),
                client_ca_file: client_ca.map(PathBuf::from),
            })
            .expect_err("bad file");
            assert!(error.to_string().contains(expected), "{error}");
        }
    }
}
