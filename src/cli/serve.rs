//! `toolplane serve`: the server binary's start, from a loaded configuration to its exit
//! code.

use std::io::IsTerminal;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, ServerConfig};

/// Logs to stderr in `format`, at the level `RUST_LOG` sets (default `info`).
pub fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The addresses given on the command line, over the configuration's.
#[derive(Debug, Clone, Copy)]
pub struct Addresses {
    /// `--listen`.
    pub listen: Option<std::net::SocketAddr>,
    /// `--metrics-listen`.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Binds `address`; answers the listener and the address it is bound to.
async fn bind(address: std::net::SocketAddr) -> Option<(tokio::net::TcpListener, String)> {
    match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => {
            let bound = listener
                .local_addr()
                .map_or_else(|_| address.to_string(), |a| a.to_string());
            Some((listener, bound))
        }
        Err(error) => {
            tracing::error!(%address, %error, "cannot listen");
            None
        }
    }
}

/// `toolplane serve`: sets up logging, binds, checks the TLS files, announces the address
/// (`toolplane serving address=...`, which scripts read) and serves until SIGTERM/SIGINT.
pub async fn serve(
    addresses: Addresses,
    config: ServerConfig,
    log_format: Option<LogFormat>,
) -> ExitCode {
    init_tracing(log_format.unwrap_or(config.log_format));
    // The configuration's address was checked when it was loaded.
    let metrics_address = addresses
        .metrics_listen
        .or_else(|| config.metrics_address().unwrap_or_default());
    let Some((listener, bound)) = bind(addresses.listen.unwrap_or(config.listen)).await else {
        return ExitCode::from(2);
    };
    let metrics_listener = match metrics_address {
        Some(address) => match bind(address).await {
            Some((listener, bound)) => {
                tracing::info!(address = %bound, "metrics served at /metrics");
                Some(listener)
            }
            None => return ExitCode::from(2),
        },
        None => None,
    };
    let options = config.server_options();
    if let Err(error) = crate::grpc::server::check_tls_files(&options) {
        tracing::error!(%error, "cannot start");
        return ExitCode::from(2);
    }
    if let Some(tls) = &options.tls {
        let client_certificates = if tls.client_ca_file.is_some() {
            "required"
        } else {
            "not asked for"
        };
        tracing::info!(client_certificates, "serving TLS");
    }
    // Listening for SIGTERM from before the address is announced: a stop sent right after it
    // drains.
    let shutdown = crate::grpc::shutdown_signal();
    // Tests and scripts read the address from this line.
    tracing::info!(address = %bound, "toolplane serving");
    match crate::grpc::serve_with_metrics(listener, metrics_listener, options, shutdown).await {
        Ok(()) => {
            tracing::info!("toolplane stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(%error, "server failed");
            ExitCode::FAILURE
        }
    }
}
