//! `toolplane-bench`: measures toolplane against its baselines on loopback and reports
//! medians, spreads and ratios (see BENCHMARKS.md). It asserts nothing about speed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, ServerTlsConfig};

use clap::{Parser, Subcommand};
use toolplane::bench::fixtures::{BaselineDiscovery, bench_tools};
use toolplane::bench::passthrough::PassThroughInvoke;
use toolplane::bench::report::table;
use toolplane::bench::tls::TlsDir;
use toolplane::bench::{Bench, Binaries, Sizes};
use toolplane::grpc::connections::serve_connections;
use toolplane::grpc::outgoing_tls::OutgoingTlsFiles;
use toolplane::grpc::provider_tls::ProviderTls;
use toolplane::grpc::server_tls::{self, ServedTls, ServerTlsFiles};
use toolplane::grpc::unary_client::UnaryChannel;
use toolplane::provider::{ProviderConfig, ProviderServer};

/// Benchmarks toolplane against a bare tonic server and against calling the provider directly.
#[derive(Debug, Parser)]
#[command(version, long_about = None)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every scenario and print the table (Markdown) and, with --json, the raw values.
    Run {
        /// A tiny run that only checks that every scenario works (numbers mean nothing).
        #[arg(long)]
        quick: bool,
        /// Write every row, with each repetition's value, as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Run only these scenarios (1-5; repeatable) [default: all].
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=5))]
        only: Vec<u8>,
        /// Repeat every measurement N times, alternating toolplane and its baseline; the table
        /// gives the median and spread of the N. More repetitions steady the medians on a noisy
        /// machine [default: 3; 1 with --quick].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=100))]
        repetitions: Option<u16>,
        /// Every connection over TLS: a CA and a certificate for 127.0.0.1 are made for the
        /// run, every server (toolplane, the baselines, the bench provider) serves that
        /// certificate, and every client trusts that CA, so toolplane and its baselines pay
        /// for TLS alike.
        #[arg(long)]
        tls: bool,
    },
    /// (Used by `run`.) The baseline: a bare tonic DiscoveryService answering GetTool,
    /// ListTools and SearchTools with the responses stored in DIR, their tools sent as the
    /// stored bytes.
    Baseline {
        /// Address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Directory with get_tool.bin, list_tools.bin and search_tools.bin.
        #[arg(long)]
        responses: PathBuf,
        #[command(flatten)]
        tls: TlsDirArg,
    },
    /// (Used by `run`.) The invocation floor: a bare tonic ToolInvokeService forwarding each
    /// InvokeTool to PROVIDER's CallTool and doing nothing else.
    Passthrough {
        /// Address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// The provider to forward to.
        #[arg(long)]
        provider: String,
        #[command(flatten)]
        tls: TlsDirArg,
    },
    /// (Used by `run`.) The bench provider: bench_simple and bench_complex, registered with
    /// the control plane.
    Provider {
        /// Address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// The control plane to register with.
        #[arg(long)]
        control_plane: String,
        #[command(flatten)]
        tls: TlsDirArg,
    },
}

/// A bench mode's `--tls-dir`.
#[derive(clap::Args, Debug)]
struct TlsDirArg {
    /// Serve TLS (and connect over TLS) with the run's certificates in DIR (from `run --tls`).
    #[arg(long, value_name = "DIR")]
    tls_dir: Option<PathBuf>,
}

impl TlsDirArg {
    /// The run's certificate files, when given.
    fn files(&self) -> Option<TlsDir> {
        self.tls_dir.as_deref().map(TlsDir::new)
    }
}

/// How a bench server accepts and serves connections.
#[derive(Debug, Clone, Copy)]
enum Accept {
    /// As tonic does, with Nagle off.
    Plain,
    /// As toolplane does: Nagle off, writes coalesced (`grpc::coalesce`) and each connection's
    /// calls run on its own task (`grpc::connections`, with toolplane's default scheduling).
    LikeToolplane,
}

/// Serves `routes` and grpc.health.v1 (reporting SERVING) on `listen` until SIGTERM/SIGINT,
/// over TLS with the run's certificate when `tls` is given.
async fn serve_routes(
    listen: std::net::SocketAddr,
    routes: tonic::service::Routes,
    accept: Accept,
    tls: Option<&TlsDir>,
) -> Result<(), String> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| e.to_string())?;
    let routes = routes.add_service(health);
    let stop = toolplane::grpc::shutdown_signal();
    match accept {
        Accept::Plain => {
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            let mut server = tonic::transport::Server::builder();
            if let Some(tls) = tls {
                server = server
                    .tls_config(ServerTlsConfig::new().identity(identity(tls)?))
                    .map_err(|e| e.to_string())?;
            }
            server
                .add_routes(routes)
                .serve_with_incoming_shutdown(incoming, stop)
                .await
                .map_err(|e| e.to_string())
        }
        Accept::LikeToolplane => {
            let settings = toolplane::grpc::ServerOptions::default().connection_settings();
            let service = routes.prepare();
            match tls {
                Some(tls) => {
                    let files = ServerTlsFiles {
                        cert_file: tls.cert.clone(),
                        key_file: tls.key.clone(),
                        client_ca_file: None,
                    };
                    let served = ServedTls::from_files(&files).map_err(|e| e.to_string())?;
                    let incoming = server_tls::incoming(listener, served);
                    serve_connections(incoming, service, settings, None, stop).await;
                }
                None => {
                    let incoming = toolplane::grpc::coalesce::incoming(listener);
                    serve_connections(incoming, service, settings, None, stop).await;
                }
            }
            Ok(())
        }
    }
}

/// The run's server certificate and key, as tonic's server identity.
fn identity(tls: &TlsDir) -> Result<Identity, String> {
    let read = |path: &PathBuf| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
    Ok(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?))
}

async fn baseline(
    listen: std::net::SocketAddr,
    responses: PathBuf,
    tls: Option<TlsDir>,
) -> Result<(), String> {
    let read = |name: &str| std::fs::read(responses.join(name)).map_err(|e| format!("{name}: {e}"));
    let service = BaselineDiscovery::from_encoded(
        &read("get_tool.bin")?,
        &read("list_tools.bin")?,
        &read("search_tools.bin")?,
    )?;
    let routes = tonic::service::Routes::new(service.server());
    serve_routes(listen, routes, Accept::Plain, tls.as_ref()).await
}

async fn passthrough(
    listen: std::net::SocketAddr,
    provider: String,
    tls: Option<TlsDir>,
) -> Result<(), String> {
    let provider_tls = match &tls {
        Some(tls) => ProviderTls::from_files(&OutgoingTlsFiles {
            ca_file: Some(tls.ca.clone()),
            client_identity: None,
        })
        .map_err(|e| e.to_string())?,
        None => ProviderTls::default(),
    };
    let service = PassThroughInvoke {
        provider: Arc::new(UnaryChannel::with_tls(
            &provider,
            Duration::from_secs(1),
            &provider_tls,
        )?),
    };
    let routes =
        tonic::service::Routes::new(toolplane::grpc::invoke_wire::InvokeServer::new(service));
    serve_routes(listen, routes, Accept::LikeToolplane, tls.as_ref()).await
}

async fn provider(
    listen: std::net::SocketAddr,
    control_plane: String,
    tls: Option<TlsDir>,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| e.to_string())?;
    let mut config = ProviderConfig::new("bench", "1.0.0", &control_plane);
    config.ttl = Duration::from_secs(60);
    if let Some(tls) = &tls {
        config.tls = Some(toolplane::grpc::server_tls::ServerTlsFiles {
            cert_file: tls.cert.clone(),
            key_file: tls.key.clone(),
            client_ca_file: None,
        });
        config.control_plane_tls.ca_file = Some(tls.ca.clone());
    }
    ProviderServer::new(bench_tools(), config)
        .serve(listener, toolplane::grpc::shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}

/// mimalloc: glibc's allocator serialized the tonic worker threads on its arena locks (seen
/// in profiles as `__lll_lock_wait_private` under `malloc`); see BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let result = match Args::parse().command {
        Command::Baseline {
            listen,
            responses,
            tls,
        } => baseline(listen, responses, tls.files()).await,
        Command::Passthrough {
            listen,
            provider,
            tls,
        } => passthrough(listen, provider, tls.files()).await,
        Command::Provider {
            listen,
            control_plane,
            tls,
        } => provider(listen, control_plane, tls.files()).await,
        Command::Run {
            quick,
            json,
            only,
            repetitions,
            tls,
        } => {
            let mut sizes = if quick { Sizes::quick() } else { Sizes::full() };
            if let Some(repetitions) = repetitions {
                sizes.repetitions = usize::from(repetitions);
            }
            let run = async {
                Bench::new(sizes, Binaries::beside_this_one(), tls)?
                    .run(&only)
                    .await
            };
            match run.await {
                Ok(rows) => {
                    println!("{}", table(&rows));
                    match json {
                        Some(path) => std::fs::write(
                            &path,
                            serde_json::to_string_pretty(&rows).unwrap_or_default(),
                        )
                        .map_err(|e| format!("{}: {e}", path.display())),
                        None => Ok(()),
                    }
                }
                Err(error) => Err(error),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
