//! The options every `toolplane` client command takes (endpoint, tenant, TLS files, bearer
//! token, `--json`), and the connection they make.

use std::path::PathBuf;

use crate::client::{BearerToken, ClientError, ClientTlsFiles, ToolplaneClient};
use crate::envelope::TenantId;

/// The endpoint client commands use by default.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:50051";

/// Options shared by the client commands.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// The toolplane server to talk to.
    #[arg(long, global = true, env = "TOOLPLANE_ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub endpoint: String,
    /// The tenant to act for.
    #[arg(long, global = true, env = "TOOLPLANE_TENANT_ID", default_value_t = 0)]
    pub tenant: u64,
    /// CA certificates (PEM) an https:// server's certificate is checked against [default: the public CAs].
    #[arg(long, global = true, env = "TOOLPLANE_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for a server that asks for one; with --client-key-file.
    #[arg(
        long,
        global = true,
        env = "TOOLPLANE_CLIENT_CERT_FILE",
        requires = "client_key_file"
    )]
    pub client_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --client-cert-file.
    #[arg(
        long,
        global = true,
        env = "TOOLPLANE_CLIENT_KEY_FILE",
        requires = "client_cert_file"
    )]
    pub client_key_file: Option<PathBuf>,
    /// A bearer token sent as `authorization: Bearer TOKEN` on every call, for a server whose
    /// tenant_access grants tenants to tokens; prefer the variable, as other users of the
    /// machine can read a flag in the process list.
    #[arg(long, global = true, env = "TOOLPLANE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding that token (its first line that is not blank).
    #[arg(
        long,
        global = true,
        env = "TOOLPLANE_TOKEN_FILE",
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,
    /// Print JSON for scripts instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Connects to the server `args` name, with the TLS files and bearer token they give.
pub async fn connect(args: &ClientArgs) -> Result<ToolplaneClient, ClientError> {
    let tls = ClientTlsFiles {
        ca_file: args.ca_file.clone(),
        cert_file: args.client_cert_file.clone(),
        key_file: args.client_key_file.clone(),
    };
    // Read before connecting, so a token that cannot be sent is named before anything is.
    let token = match (&args.token, &args.token_file) {
        (Some(token), _) => Some(BearerToken::new(token)?),
        (None, Some(path)) => Some(BearerToken::from_file(path)?),
        (None, None) => None,
    };
    let client =
        ToolplaneClient::connect_with_tls(&args.endpoint, TenantId(args.tenant), &tls).await?;
    Ok(match token {
        Some(token) => client.with_bearer_token(token),
        None => client,
    })
}
