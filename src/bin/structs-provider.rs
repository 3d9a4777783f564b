//! `structs-provider`: the example tool provider. It serves five Structs tools (seed 004)
//! through ToolProviderService and keeps them registered with a toolplane control plane.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use toolplane::client::{BearerToken, ClientTlsFiles};
use toolplane::envelope::TenantId;
use toolplane::grpc::server_tls::{ServerTlsFiles, TlsSettingNames};
use toolplane::provider::structs::structs_tools;
use toolplane::provider::{DEFAULT_PROVIDER_TTL, ProviderConfig, ProviderError, ProviderServer};

/// What errors about the served TLS files call them: this binary's flags.
const TLS_FLAGS: TlsSettingNames = TlsSettingNames {
    cert: "--tls-cert",
    key: "--tls-key",
    client_ca: "--tls-client-ca",
};

/// The example Structs tool provider for toolplane.
#[derive(Debug, Parser)]
#[command(version, long_about = None)]
struct Args {
    /// Address to serve ToolProviderService on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:50061")]
    listen: std::net::SocketAddr,
    /// The toolplane control plane to register with.
    #[arg(
        long,
        env = "TOOLPLANE_ENDPOINT",
        default_value = "http://127.0.0.1:50051"
    )]
    control_plane: String,
    /// The service name to register under.
    #[arg(long, default_value = "structs")]
    service_name: String,
    /// The tenant to register in.
    #[arg(long, env = "TOOLPLANE_TENANT_ID", default_value_t = 0)]
    tenant: u64,
    /// Which replica of the service this is (for example its pod name): replicas with
    /// different ids hold their registrations side by side and share the calls [default:
    /// none, so each registration of the service replaces the last].
    #[arg(
        long,
        env = "TOOLPLANE_INSTANCE_ID",
        default_value = "",
        hide_default_value = true
    )]
    instance_id: String,
    /// The endpoint to advertise [default: http:// (https:// with --tls-cert) + the bound
    /// address].
    #[arg(long)]
    advertise: Option<String>,
    /// Serve over TLS with this certificate chain (PEM, the provider's own first).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Accept only callers that present a certificate this CA (PEM) signed (mutual TLS).
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// CA certificates (PEM) an https:// control plane's certificate is checked against
    /// [default: the public CAs].
    #[arg(long, env = "TOOLPLANE_CA_FILE")]
    control_plane_ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for a control plane that asks for one; with
    /// --control-plane-key-file.
    #[arg(
        long,
        env = "TOOLPLANE_CLIENT_CERT_FILE",
        requires = "control_plane_key_file"
    )]
    control_plane_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --control-plane-cert-file.
    #[arg(
        long,
        env = "TOOLPLANE_CLIENT_KEY_FILE",
        requires = "control_plane_cert_file"
    )]
    control_plane_key_file: Option<PathBuf>,
    /// A bearer token sent on registrations and heartbeats, for a control plane whose
    /// tenant_access grants tenants to tokens; prefer the variable, as other users of the
    /// machine can read a flag in the process list.
    #[arg(long, env = "TOOLPLANE_TOKEN", hide_env_values = true)]
    control_plane_token: Option<String>,
    /// A file holding that token (its first line that is not blank: a mounted Secret), read
    /// again every --tls-reload-interval and after SIGHUP (by the next call), so a rotated
    /// token is sent without a restart.
    #[arg(
        long,
        env = "TOOLPLANE_TOKEN_FILE",
        conflicts_with = "control_plane_token"
    )]
    control_plane_token_file: Option<PathBuf>,
    /// How often the TLS files (--tls-*, --control-plane-*-file) are read again, so renewed
    /// certificates are used without a restart; 0s reads them only at the start. SIGHUP reads
    /// them again at once.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    tls_reload_interval: Duration,
    /// Lease TTL to ask for; heartbeats go every third of it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    ttl: Duration,
}

/// mimalloc: glibc's allocator serialized the tonic worker threads on its arena locks (seen
/// in profiles as `__lll_lock_wait_private` under `malloc`); see BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let tools = match structs_tools() {
        Ok(tools) => tools,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let control_plane_token = match args
        .control_plane_token
        .as_deref()
        .map(BearerToken::new)
        .transpose()
    {
        Ok(token) => token,
        Err(error) => {
            eprintln!("error: --control-plane-token (TOOLPLANE_TOKEN): {error}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("error: cannot listen on {}: {error}", args.listen);
            return ExitCode::from(2);
        }
    };
    let mut config = ProviderConfig::new(
        &args.service_name,
        env!("CARGO_PKG_VERSION"),
        &args.control_plane,
    );
    config.tenant = TenantId(args.tenant);
    config.instance_id = args.instance_id;
    config.ttl = if args.ttl.is_zero() {
        DEFAULT_PROVIDER_TTL
    } else {
        args.ttl
    };
    config.advertised_endpoint = args.advertise.clone().unwrap_or_default();
    config.tls = args
        .tls_cert
        .clone()
        .zip(args.tls_key.clone())
        .map(|(cert_file, key_file)| ServerTlsFiles {
            cert_file,
            key_file,
            client_ca_file: args.tls_client_ca.clone(),
        });
    config.tls_setting_names = TLS_FLAGS;
    config.control_plane_tls = ClientTlsFiles {
        ca_file: args.control_plane_ca_file.clone(),
        cert_file: args.control_plane_cert_file.clone(),
        key_file: args.control_plane_key_file.clone(),
    };
    config.control_plane_token = control_plane_token;
    config.control_plane_token_file = args.control_plane_token_file;
    config.tls_reload_interval = args.tls_reload_interval;
    // Listening from before it serves: SIGHUP's default action would end it undrained.
    let shutdown = toolplane::grpc::shutdown_signal();
    if let Err(error) = toolplane::grpc::hangups::read_again_on_sighup() {
        tracing::warn!(%error, "cannot listen for SIGHUP: it ends the process");
    }
    match ProviderServer::new(tools, config)
        .serve(listener, shutdown)
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(
            error @ (ProviderError::Tls(_)
            | ProviderError::ControlPlaneTls(_)
            | ProviderError::ControlPlaneToken(_)
            | ProviderError::ControlPlane(_)
            | ProviderError::Lease(_)),
        ) => {
            // Found before anything is served or registered: the flags need fixing.
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
