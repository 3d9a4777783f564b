//! TLS for a benchmark run (`toolplane-bench run --tls`): a CA made for the run and one
//! certificate it signs for 127.0.0.1, which every server of the run serves (toolplane, the
//! baselines, the bench provider), and which every client of the run (the load generator,
//! toolplane and the pass-through towards the provider, the provider towards toolplane)
//! checks against that CA. With it each connection of the run is TLS, as in a deployment that
//! encrypts every hop, and the tables show what that costs against baselines that pay it too.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tonic::transport::{Certificate, ClientTlsConfig};

/// The CA certificate's file name in the run's TLS directory.
pub const CA_FILE: &str = "ca.crt";
/// The servers' certificate's file name in the run's TLS directory.
pub const CERT_FILE: &str = "server.crt";
/// The servers' private key's file name in the run's TLS directory.
pub const KEY_FILE: &str = "server.key";

/// The run's CA and server certificate, written to a directory removed when this is dropped.
#[derive(Debug)]
pub struct RunTls {
    dir: tempfile::TempDir,
    /// The CA certificate (PEM), as written to [`CA_FILE`].
    ca_pem: String,
}

impl RunTls {
    /// Makes a new CA and a certificate for 127.0.0.1 signed by it, and writes them out.
    pub fn generate() -> Result<Self, String> {
        let fail = |e: rcgen::Error| format!("making the run's certificates: {e}");
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca =
            CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(fail)?).map_err(fail)?;
        let key = KeyPair::generate().map_err(fail)?;
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .map_err(fail)?
            .signed_by(&key, &ca)
            .map_err(fail)?;
        let dir = tempfile::Builder::new()
            .prefix("toolplane-bench-tls")
            .tempdir()
            .map_err(|e| format!("a directory for the run's certificates: {e}"))?;
        let ca_pem = ca.pem();
        for (name, pem) in [
            (CA_FILE, ca_pem.clone()),
            (CERT_FILE, server.pem()),
            (KEY_FILE, key.serialize_pem()),
        ] {
            std::fs::write(dir.path().join(name), pem)
                .map_err(|e| format!("writing the run's {name}: {e}"))?;
        }
        Ok(Self { dir, ca_pem })
    }

    /// The directory holding [`CA_FILE`], [`CERT_FILE`] and [`KEY_FILE`] (the bench modes'
    /// `--tls-dir`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The environment that makes toolplane serve the run's certificate and trust the run's
    /// CA for providers.
    pub fn toolplane_env(&self) -> Vec<(&'static str, String)> {
        let path = |name: &str| self.dir().join(name).display().to_string();
        vec![
            ("TOOLPLANE_TLS_CERT_FILE", path(CERT_FILE)),
            ("TOOLPLANE_TLS_KEY_FILE", path(KEY_FILE)),
            ("TOOLPLANE_PROVIDER_CA_FILE", path(CA_FILE)),
        ]
    }
}

/// The files of a run's TLS directory, as a bench mode given `--tls-dir DIR` reads them.
#[derive(Debug, Clone)]
pub struct TlsDir {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The server certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

impl TlsDir {
    /// The files in `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            ca: dir.join(CA_FILE),
            cert: dir.join(CERT_FILE),
            key: dir.join(KEY_FILE),
        }
    }
}

/// The client configuration the run's load generator connects to `https://` endpoints with,
/// set once when the run starts with `--tls`. A process-wide setting, so that every scenario's
/// connection helper ([`super::channel`]) follows the run without each call site carrying it.
static CLIENT_TLS: OnceLock<ClientTlsConfig> = OnceLock::new();

/// Makes this process's `https://` connections trust the run's CA (once per process).
pub(super) fn trust_for_clients(tls: &RunTls) {
    let ca = Certificate::from_pem(&tls.ca_pem);
    let _ = CLIENT_TLS.set(ClientTlsConfig::new().ca_certificate(ca));
}

/// The client configuration `https://` endpoints are connected to with.
pub(super) fn client_tls() -> ClientTlsConfig {
    CLIENT_TLS.get().cloned().unwrap_or_default()
}
