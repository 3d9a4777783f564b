//! A test PKI made with rcgen: a CA, and certificates it signs for servers and clients.

use std::path::{Path, PathBuf};

use toolplane::grpc::outgoing_tls::{
    ALPN_HTTP, ClientIdentityFiles, OutgoingTlsFiles, OutgoingTlsSettings, http_client_builder,
};
use toolplane::grpc::server_tls::ServerTlsFiles;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};

/// A certificate authority of its own.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, both PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// As tonic's server identity.
    pub fn identity(&self) -> tonic::transport::Identity {
        tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem)
    }

    /// Writes the certificate and key into `dir` as `NAME.crt` and `NAME.key`.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("certificate written");
        std::fs::write(&key, &self.key_pem).expect("key written");
        (cert, key)
    }

    /// Writes the certificate and key into `dir` as `NAME.crt` and `NAME.key`, named as TLS
    /// to serve (asking callers for no certificate).
    pub fn served_from(&self, dir: &Path, name: &str) -> ServerTlsFiles {
        let (cert_file, key_file) = self.write(dir, name);
        ServerTlsFiles {
            cert_file,
            key_file,
            client_ca_file: None,
        }
    }
}

impl TestCa {
    /// A new CA with a new key.
    pub fn new() -> Self {
        static CAS_MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Names of their own: rcgen names every certificate alike, and OpenSSL-based peers
        // (gRPC C-core) take a certificate whose issuer's name is its own for self-signed.
        let made = CAS_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("toolplane test CA {made}"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        Self { issuer }
    }

    /// The CA's certificate (PEM).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA's certificate to `dir/NAME`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.pem()).expect("CA written");
        path
    }

    /// TLS for a server on 127.0.0.1 asking callers for certificates this CA signed: a server
    /// certificate written into `dir` as `server.crt` and `server.key`, and the CA as `ca.pem`.
    pub fn served_to_clients(&self, dir: &Path) -> ServerTlsFiles {
        let (cert_file, key_file) = self.server(&["127.0.0.1"]).write(dir, "server");
        ServerTlsFiles {
            cert_file,
            key_file,
            client_ca_file: Some(self.write(dir, "ca.pem")),
        }
    }

    /// An HTTPS client trusting only this CA, presenting `who`'s certificate when given. Its TLS
    /// is made as toolplane's own clients' is (`outgoing_tls`, the ring provider): no test
    /// installs a process-wide crypto provider, which would hide, from every test sharing the
    /// process, a code path that panics without one.
    pub fn https_client(&self, who: Option<&Issued>) -> reqwest::Client {
        const SETTINGS: OutgoingTlsSettings = OutgoingTlsSettings {
            ca_file: "the test client's CA",
            client_cert_file: "the test client's certificate",
            client_key_file: "the test client's key",
        };
        let dir = tempfile::tempdir().expect("temporary directory");
        let files = OutgoingTlsFiles {
            ca_file: Some(self.write(dir.path(), "ca.pem")),
            client_identity: who.map(|issued| {
                let (cert_file, key_file) = issued.write(dir.path(), "client");
                ClientIdentityFiles {
                    cert_file,
                    key_file,
                }
            }),
        };
        let config = files
            .client_config(&SETTINGS, ALPN_HTTP)
            .expect("the test client's TLS");
        http_client_builder(Some(&config))
            .build()
            .expect("an HTTPS client")
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Issued {
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate naming `name`.
    pub fn client(&self, name: &str) -> Issued {
        self.issue(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A client certificate whose one name is the URI `uri` (a SPIFFE id, as service meshes
    /// issue them).
    pub fn client_uri(&self, uri: &str) -> Issued {
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![SanType::URI(uri.try_into().expect("an IA5 string"))];
        self.sign(params, uri, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Issued {
        let params = CertificateParams::new(
            names
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )
        .expect("parameters");
        self.sign(
            params,
            names.first().copied().unwrap_or("toolplane test"),
            usage,
        )
    }

    fn sign(
        &self,
        mut params: CertificateParams,
        common_name: &str,
        usage: ExtendedKeyUsagePurpose,
    ) -> Issued {
        let key = KeyPair::generate().expect("key");
        params.extended_key_usages = vec![usage];
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let certificate = params.signed_by(&key, &self.issuer).expect("certificate");
        Issued {
            cert_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// The example provider's flags to serve TLS with `cert` and `key`, accepting only callers
/// with a certificate `client_ca` signed.
pub fn provider_tls_flags(cert: &Path, key: &Path, client_ca: &Path) -> Vec<String> {
    [
        ("--tls-cert", cert),
        ("--tls-key", key),
        ("--tls-client-ca", client_ca),
    ]
    .into_iter()
    .flat_map(|(flag, path)| [flag.to_owned(), path.to_string_lossy().into_owned()])
    .collect()
}
