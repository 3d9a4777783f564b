//! Reading the PEM files TLS is configured with (certificates, CA certificates, private
//! keys), each error naming the setting and the file, so a bad file stops the start with a
//! message that says which one and why.

use std::path::{Path, PathBuf};

use tokio_rustls::rustls::RootCertStore;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    /// The file could not be read.
    #[error("{setting} {path}: cannot read it: {source}")]
    Read {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file was read but does not hold what the setting needs.
    #[error("{setting} {path}: {problem}")]
    Content {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|source| TlsFileError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

/// A file error: `problem` with what `setting` names.
pub(crate) fn content(
    setting: &'static str,
    path: &Path,
    problem: impl Into<String>,
) -> TlsFileError {
    TlsFileError::Content {
        setting,
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// The certificates (at least one) in the PEM file `setting` names.
pub(crate) fn certificates(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let pem = read(setting, path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| content(setting, path, format!("not PEM certificates: {error}")))?;
    if certificates.is_empty() {
        return Err(content(
            setting,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certificates)
}

/// The CA certificates (at least one) in the PEM file `setting` names, as trust anchors.
pub(crate) fn ca_certificates(
    setting: &'static str,
    path: &Path,
) -> Result<RootCertStore, TlsFileError> {
    let mut roots = RootCertStore::empty();
    for (index, certificate) in certificates(setting, path)?.into_iter().enumerate() {
        roots.add(certificate).map_err(|error| {
            content(
                setting,
                path,
                format!(
                    "certificate {} is not a usable CA certificate: {error}",
                    index + 1
                ),
            )
        })?;
    }
    Ok(roots)
}

/// The private key in the PEM file `setting` names.
pub(crate) fn private_key(
    setting: &'static str,
    path: &Path,
) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    let pem = read(setting, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|error| {
        content(
            setting,
            path,
            format!("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {error}"),
        )
    })
}
