//! `toolplane serve`: the server binary's start, from a loaded configuration to its exit
//! code.

use std::io::IsTerminal;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, ServerConfig};

/// What is logged without `RUST_LOG`: INFO and above, but nothing of the MCP SDK's own, which
/// logs every MCP session's start and end at INFO and a client's mistakes and departures at
/// WARN and ERROR (`RUST_LOG=info,rmcp=debug` shows them).
pub const DEFAULT_LOG_FILTER: &str = "info,rmcp=off";

/// The most log lines waiting to be written to stderr; past them, new lines are dropped
/// (`toolplane_log_lines_dropped_total` counts them) until the reader takes some.
pub const LOG_LINES_WAITING: usize = 128_000;

/// Logs to stderr in `format`, at the level `RUST_LOG` sets (default [`DEFAULT_LOG_FILTER`],
/// with a WARN saying why when `RUST_LOG` is set but does not read).
/// A panic is logged too, as an ERROR event (target `tracing_panic`, with its message,
/// location and, when `RUST_BACKTRACE` asks for one, backtrace), not written to stderr beside
/// the log as Rust's own hook writes it, so a JSON log stays one object per line.
///
/// Lines are written by a thread of their own, at most [`LOG_LINES_WAITING`] waiting: a
/// server thread logging never waits on stderr, whose reader (a log shipper, a terminal) may
/// stall; with stderr written directly, a full pipe held every thread that logged, one of them
/// holding the registry's lock. Keep the answered guard until the end: dropping it writes the
/// lines still waiting.
pub fn init_tracing(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    // A RUST_LOG that does not read is said once logging is up, not ignored unsaid.
    let (filter, unread) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(error) => {
            let set = std::env::var_os(EnvFilter::DEFAULT_ENV).filter(|value| !value.is_empty());
            let unread = set.map(|value| (value.to_string_lossy().into_owned(), error));
            (EnvFilter::new(DEFAULT_LOG_FILTER), unread)
        }
    };
    let (stderr, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(LOG_LINES_WAITING)
        .thread_name("toolplane-log")
        .finish(std::io::stderr());
    crate::metrics::log_lines::watch(stderr.error_counter());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    std::panic::set_hook(Box::new(tracing_panic::panic_hook));
    if let Some((rust_log, error)) = unread {
        tracing::warn!(
            rust_log,
            %error,
            "RUST_LOG cannot be read (it is a list of directives such as info or \
             toolplane=debug,rmcp=info); logging as without it ({DEFAULT_LOG_FILTER})"
        );
    }
    guard
}

/// The addresses given on the command line, over the configuration's.
#[derive(Debug, Clone, Copy)]
pub struct Addresses {
    /// `--listen`.
    pub listen: Option<std::net::SocketAddr>,
    /// `--metrics-listen`.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `--mcp-listen`.
    pub mcp_listen: Option<std::net::SocketAddr>,
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
    let _log = init_tracing(log_format.unwrap_or(config.log_format));
    for warning in config.unread_variables() {
        tracing::warn!("{warning}");
    }
    // The configuration's addresses were checked when it was loaded; the flags may stand
    // in for them.
    let metrics_address = addresses
        .metrics_listen
        .or_else(|| config.metrics_address().unwrap_or_default());
    let mcp_address = addresses
        .mcp_listen
        .or_else(|| config.mcp_address().unwrap_or_default());
    let listen = addresses.listen.unwrap_or(config.listen);
    let named = |flag: Option<_>, flag_name, setting| flag.map_or(setting, |_| flag_name);
    let mut endpoints = vec![(named(addresses.listen, "--listen", "listen"), listen)];
    endpoints.extend(metrics_address.map(|address| {
        let name = named(
            addresses.metrics_listen,
            "--metrics-listen",
            "metrics_listen",
        );
        (name, address)
    }));
    endpoints.extend(mcp_address.map(|address| {
        let name = named(addresses.mcp_listen, "--mcp-listen", "mcp_listen");
        (name, address)
    }));
    if let Some(collision) = crate::config::colliding_endpoints(&endpoints) {
        tracing::error!(error = %collision, "cannot start");
        return ExitCode::from(2);
    }
    let Some((listener, bound)) = bind(listen).await else {
        return ExitCode::from(2);
    };
    let mut side = crate::grpc::SideListeners::default();
    for (address, slot, what) in [
        (
            metrics_address,
            &mut side.metrics,
            "metrics served at /metrics",
        ),
        (mcp_address, &mut side.mcp, "MCP served at /mcp"),
    ] {
        if let Some(address) = address {
            let Some((listener, bound)) = bind(address).await else {
                return ExitCode::from(2);
            };
            tracing::info!(address = %bound, "{what}");
            *slot = Some(listener);
        }
    }
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
    // drains. So for SIGHUP, which reads the watched files again (its default ends the process).
    let shutdown = crate::grpc::shutdown_signal();
    if let Err(error) = crate::grpc::hangups::read_again_on_sighup() {
        tracing::warn!(%error, "cannot listen for SIGHUP: it ends the process");
    }
    if let Err(error) = crate::mcp::orphans::reap_when_init() {
        tracing::warn!(%error, "cannot listen for SIGCHLD: as PID 1, orphans stay zombies");
    }
    // Tests and scripts read the address from this line.
    tracing::info!(address = %bound, "toolplane serving");
    match crate::grpc::serve_with(listener, side, options, shutdown).await {
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
