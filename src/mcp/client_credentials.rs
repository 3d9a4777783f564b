//! OAuth client credentials for an imported MCP server (the `oauth_client_credentials` table of
//! an `[[mcp_imports]]` entry): toolplane, a service rather than a user, gets its access tokens
//! from the server's authorization server with the client credentials grant (MCP's
//! OAuth client credentials extension, SEP-1046), authenticating as a pre-registered client
//! with a secret (`client_secret_basic` or `client_secret_post`, as the authorization server
//! offers) or with a signed JWT (`private_key_jwt`, RFC 7523).
//!
//! This module holds the table and its check; [`super::access_tokens`] gets and renews the
//! tokens.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::import_config::{ReadFile, Secret, read_from_disk};
use crate::registry::ServiceName;

/// The `oauth_client_credentials` table of an `[[mcp_imports]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCredentialsConfig {
    /// The client id toolplane is registered with at the authorization server.
    pub client_id: String,
    /// The environment variable holding the client's secret; or set `private_key_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// A PEM file holding the private key (PKCS#8, or PKCS#1 for RSA) the client signs its
    /// JWT assertions with; or set `client_secret_env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_file: Option<PathBuf>,
    /// The algorithm of those assertions: `ES256` (the default), `ES384`, `RS256`, `RS384` or
    /// `RS512`, matching the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_algorithm: Option<String>,
    /// The scopes asked for; by default, those the MCP server names (in its 401 challenge,
    /// else its metadata's `scopes_supported`), else none (the authorization server's
    /// default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The issuer the authorization server must have. When set, toolplane sends its
    /// credentials to no other, whatever the MCP server's metadata names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_server: Option<String>,
}

/// Client credentials, checked: who toolplane is at the authorization server, and how it
/// proves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The client id.
    pub client_id: String,
    /// How the client authenticates.
    pub proof: ClientProof,
    /// The scopes asked for; when none, those the server names.
    pub scopes: Vec<String>,
    /// The issuer the authorization server must have, when pinned.
    pub authorization_server: Option<String>,
}

/// How toolplane authenticates as the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientProof {
    /// With the client's secret.
    Secret(Secret),
    /// With a JWT signed by the key in a PEM file.
    PrivateKey {
        /// The key, as its PEM text when the configuration was read.
        pem: Secret,
        /// The file it was read from, read again before each token request (so a rotated
        /// key is used from the next one).
        file: PathBuf,
        /// The algorithm it signs with.
        algorithm: SigningAlgorithm,
    },
}

/// The algorithms a client's JWT assertion may be signed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningAlgorithm {
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// ECDSA on P-384 with SHA-384.
    Es384,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    Rs512,
}

impl SigningAlgorithm {
    /// The algorithm named `name` (its JOSE name), if it is one toolplane signs with.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|algorithm| algorithm.name() == name)
    }

    /// Every algorithm toolplane signs with.
    const ALL: [Self; 5] = [
        Self::Es256,
        Self::Es384,
        Self::Rs256,
        Self::Rs384,
        Self::Rs512,
    ];

    /// Its JOSE name.
    fn name(self) -> &'static str {
        match self {
            Self::Es256 => "ES256",
            Self::Es384 => "ES384",
            Self::Rs256 => "RS256",
            Self::Rs384 => "RS384",
            Self::Rs512 => "RS512",
        }
    }

    /// The SDK's name for it.
    pub fn for_rmcp(self) -> rmcp::transport::auth::JwtSigningAlgorithm {
        use rmcp::transport::auth::JwtSigningAlgorithm as Rmcp;
        match self {
            Self::Es256 => Rmcp::ES256,
            Self::Es384 => Rmcp::ES384,
            Self::Rs256 => Rmcp::RS256,
            Self::Rs384 => Rmcp::RS384,
            Self::Rs512 => Rmcp::RS512,
        }
    }

    fn for_jsonwebtoken(self) -> jsonwebtoken::Algorithm {
        use jsonwebtoken::Algorithm;
        match self {
            Self::Es256 => Algorithm::ES256,
            Self::Es384 => Algorithm::ES384,
            Self::Rs256 => Algorithm::RS256,
            Self::Rs384 => Algorithm::RS384,
            Self::Rs512 => Algorithm::RS512,
        }
    }

    fn is_rsa(self) -> bool {
        matches!(self, Self::Rs256 | Self::Rs384 | Self::Rs512)
    }
}

impl std::fmt::Display for SigningAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `config check` says of them: the client, how it authenticates, and what is pinned or
/// asked for (never the secret or the key).
impl std::fmt::Display for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OAuth client credentials of client {}, ", self.client_id)?;
        match &self.proof {
            ClientProof::Secret(_) => f.write_str("with a secret")?,
            ClientProof::PrivateKey { algorithm, .. } => {
                write!(f, "with an {algorithm} key (private_key_jwt)")?;
            }
        }
        if !self.scopes.is_empty() {
            write!(f, ", scopes {}", self.scopes.join(" "))?;
        }
        if let Some(issuer) = &self.authorization_server {
            write!(f, ", authorization server {issuer}")?;
        }
        Ok(())
    }
}

impl ClientCredentialsConfig {
    /// The credentials this table gives for `service`'s import: the secret read from the
    /// environment, or the key read from its file (by `read_file`) and tried (it must sign
    /// with the algorithm named). The error names what to fix.
    pub fn check(
        &self,
        service: &ServiceName,
        read_file: &ReadFile<'_>,
    ) -> Result<ClientCredentials, String> {
        let problem = |what: String| {
            format!("mcp_imports: oauth_client_credentials of service {service}: {what}")
        };
        if self.client_id.is_empty() {
            return Err(problem("client_id is empty".to_owned()));
        }
        if let Some(scope) = self
            .scopes
            .iter()
            .find(|scope| scope.is_empty() || scope.contains(char::is_whitespace))
        {
            return Err(problem(format!(
                "scopes holds {scope:?}: each scope is one word, none empty"
            )));
        }
        if let Some(issuer) = &self.authorization_server
            && !(issuer.starts_with("https://") || issuer.starts_with("http://"))
        {
            return Err(problem(format!(
                "authorization_server {issuer:?} is no issuer URL, e.g. https://auth.example.com"
            )));
        }
        let proof = match (&self.client_secret_env, &self.private_key_file) {
            (Some(variable), None) => {
                if self.signing_algorithm.is_some() {
                    return Err(problem(
                        "signing_algorithm is for private_key_file, not client_secret_env"
                            .to_owned(),
                    ));
                }
                ClientProof::Secret(Secret(std::env::var(variable).map_err(|_| {
                    problem(format!(
                        "client_secret_env names {variable}, which is not set (or not UTF-8) \
                         in toolplane's environment"
                    ))
                })?))
            }
            (None, Some(file)) => {
                let name = self.signing_algorithm.as_deref().unwrap_or("ES256");
                let algorithm = SigningAlgorithm::parse(name).ok_or_else(|| {
                    let names = SigningAlgorithm::ALL.map(SigningAlgorithm::name);
                    problem(format!(
                        "signing_algorithm {name:?} is not one of {}",
                        names.join(", ")
                    ))
                })?;
                ClientProof::PrivateKey {
                    pem: read_key_with(file, algorithm, read_file).map_err(problem)?,
                    file: file.clone(),
                    algorithm,
                }
            }
            _ => {
                return Err(problem(
                    "set either client_secret_env (client_secret_basic or client_secret_post) \
                     or private_key_file (private_key_jwt), not both"
                        .to_owned(),
                ));
            }
        };
        Ok(ClientCredentials {
            client_id: self.client_id.clone(),
            proof,
            scopes: self.scopes.clone(),
            authorization_server: self.authorization_server.clone(),
        })
    }
}

/// The signing key in the PEM file `file`, once a test signature with `algorithm` has shown
/// it is one; the error names the file and what is wrong with it.
pub fn read_key(file: &Path, algorithm: SigningAlgorithm) -> Result<Secret, String> {
    read_key_with(file, algorithm, &read_from_disk)
}

/// As [`read_key`], the file read by `read_file`.
fn read_key_with(
    file: &Path,
    algorithm: SigningAlgorithm,
    read_file: &ReadFile<'_>,
) -> Result<Secret, String> {
    let pem = read_file(file)
        .map_err(|error| format!("cannot read private_key_file {}: {error}", file.display()))?;
    signs(&pem, algorithm).map_err(|error| {
        format!(
            "private_key_file {} holds no {algorithm} signing key: {error}",
            file.display()
        )
    })?;
    Ok(Secret(pem))
}

/// Whether `pem` signs with `algorithm`: a test signature, so a wrong key is found when the
/// configuration is read rather than at the first token request.
fn signs(pem: &str, algorithm: SigningAlgorithm) -> Result<(), jsonwebtoken::errors::Error> {
    let key = if algorithm.is_rsa() {
        jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes())?
    } else {
        jsonwebtoken::EncodingKey::from_ec_pem(pem.as_bytes())?
    };
    let header = jsonwebtoken::Header::new(algorithm.for_jsonwebtoken());
    jsonwebtoken::encode(&header, &serde_json::json!({"test": true}), &key).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key (PKCS#8), made for this test.
    const P256_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgBGA2tOWUoBICwFdQ
B3Bw5pGw3CFP3eqyHoVODNftQYmhRANCAATHwqVHH6z57nQOBuDd9iszE3FQ8uTA
Fde3GdQKEE/tJbYtk9RbtNKXEuRM4wl0Yvx2gK57cl0j1QqTAAsrGQaA
-----END PRIVATE KEY-----
";

    fn table(client_id: &str) -> ClientCredentialsConfig {
        ClientCredentialsConfig {
            client_id: client_id.into(),
            client_secret_env: None,
            private_key_file: None,
            signing_algorithm: None,
            scopes: Vec::new(),
            authorization_server: None,
        }
    }

    fn service() -> ServiceName {
        ServiceName::parse("crm").expect("a service name")
    }

    #[test]
    fn a_secret_comes_from_the_environment_and_a_key_from_a_file_that_signs() {
        let with_secret = ClientCredentialsConfig {
            client_secret_env: Some("PATH".into()),
            scopes: vec!["tools:call".into()],
            ..table("toolplane")
        };
        let checked = with_secret
            .check(&service(), &read_from_disk)
            .expect("PATH is set");
        assert_eq!(checked.scopes, ["tools:call"]);
        assert!(format!("{checked:?}").contains("Secret([redacted])"));

        let dir = tempfile::tempdir().expect("a directory");
        let key_file = dir.path().join("key.pem");
        std::fs::write(&key_file, P256_KEY).expect("written");
        let with_key = ClientCredentialsConfig {
            private_key_file: Some(key_file.clone()),
            ..table("toolplane")
        };
        let ClientProof::PrivateKey { algorithm, .. } = with_key
            .check(&service(), &read_from_disk)
            .expect("a P-256 key")
            .proof
        else {
            panic!("a private key");
        };
        assert_eq!(algorithm, SigningAlgorithm::Es256);

        for (bad, named) in [
            (table("toolplane"), "set either"),
            (
                ClientCredentialsConfig {
                    client_secret_env: Some("PATH".into()),
                    ..with_key.clone()
                },
                "not both",
            ),
            (
                ClientCredentialsConfig {
                    client_secret_env: Some("TOOLPLANE_TEST_VARIABLE_NEVER_SET".into()),
                    ..table("toolplane")
                },
                "not set",
            ),
            (
                ClientCredentialsConfig {
                    client_secret_env: Some("PATH".into()),
                    ..table("")
                },
                "client_id",
            ),
            (
                ClientCredentialsConfig {
                    signing_algorithm: Some("RS256".into()),
                    ..with_key.clone()
                },
                "holds no RS256 signing key",
            ),
            (
                ClientCredentialsConfig {
                    signing_algorithm: Some("HS256".into()),
                    ..with_key.clone()
                },
                "not one of",
            ),
            (
                ClientCredentialsConfig {
                    private_key_file: Some(dir.path().join("missing.pem")),
                    ..table("toolplane")
                },
                "cannot read",
            ),
            (
                ClientCredentialsConfig {
                    scopes: vec!["two words".into()],
                    ..with_secret.clone()
                },
                "scopes",
            ),
            (
                ClientCredentialsConfig {
                    authorization_server: Some("auth.example.com".into()),
                    ..with_secret.clone()
                },
                "issuer URL",
            ),
        ] {
            let error = bad.check(&service(), &read_from_disk).expect_err("refused");
            assert!(
                error.contains(named) && error.contains("service crm"),
                "{error}"
            );
        }
    }
}
