//! The `toolplane` binary: the server (`serve`) and the client commands (`preflight`,
//! `services`, `tools`, `search`, `health`, ...).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolplane::cli;
use toolplane::cli::agent;
use toolplane::cli::client_args::{ClientArgs, connect};
use toolplane::client::{ClientError, ToolRequirement, ToolplaneClient};
use toolplane::config::{LogFormat, ServerConfig};
use toolplane::outln;

/// toolplane: a gRPC control plane for AI tool services.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane server (in-memory store). Stops on SIGTERM/SIGINT after draining;
    /// SIGHUP reads the files it watches (TLS, tenant access, the config file) again at once.
    Serve {
        /// Address to listen on [default: 127.0.0.1:50051, or `listen` from the config file or TOOLPLANE_LISTEN].
        #[arg(long, value_parser = toolplane::config::parse_listen_address)]
        listen: Option<std::net::SocketAddr>,
        /// Address to serve Prometheus metrics on, as GET /metrics over HTTP/1.1 [default: none, or `metrics_listen` from the config file or TOOLPLANE_METRICS_LISTEN].
        #[arg(long, value_parser = toolplane::config::parse_listen_address)]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Address to serve the registered tools to MCP clients on, as MCP's Streamable HTTP at /mcp [default: none, or `mcp_listen` from the config file or TOOLPLANE_MCP_LISTEN].
        #[arg(long, value_parser = toolplane::config::parse_listen_address)]
        mcp_listen: Option<std::net::SocketAddr>,
        /// Config file [default: ./toolplane.toml when it exists].
        #[arg(long, env = "TOOLPLANE_CONFIG")]
        config: Option<PathBuf>,
        /// Log format [default: text, or `log_format` from the config file or TOOLPLANE_LOG_FORMAT].
        #[arg(long, value_enum)]
        log_format: Option<LogFormat>,
    },
    /// Check that required tools are registered; exit 1 listing what is missing when not.
    Preflight {
        /// A required service and its tools: SERVICE:TOOL[,TOOL...] (or just SERVICE). Repeatable.
        #[arg(long = "require", value_name = "SERVICE:TOOLS")]
        required: Vec<ToolRequirement>,
        /// An optional service and its tools; a miss is only a warning. Repeatable.
        #[arg(long = "optional", value_name = "SERVICE:TOOLS")]
        optional: Vec<ToolRequirement>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List the live services.
    Services {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List the live tools.
    Tools {
        #[command(flatten)]
        selection: cli::SelectionArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Find the live tools that best match a query of words, best first.
    Search {
        /// The words to search for (tool names, descriptions, parameters, service names).
        query: String,
        #[command(flatten)]
        selection: cli::SelectionArgs,
        /// The most matches to show: 1 to 100.
        #[arg(long, default_value_t = 10)]
        max_results: i32,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Write the live tools as RTFS capability definitions, DIR/SERVICE/TOOL.rtfs each, and
    /// print the files written.
    ExportRtfs {
        /// The directory to write under (created when missing; files are replaced).
        dir: PathBuf,
        /// Only the tools of this service.
        #[arg(long)]
        service: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Invoke a tool through the control plane and print its output.
    Invoke {
        /// The tool to call.
        tool: String,
        /// The input, a JSON object; `@FILE` reads it from a file, `-` from standard input.
        #[arg(long, default_value = "{}")]
        input: String,
        /// The service offering the tool, when several do.
        #[arg(long)]
        service: Option<String>,
        /// How long to wait, e.g. 2s or 500ms (sent as the gRPC deadline) [default: the tool's timeout_ms, at most the server's max_invoke_timeout].
        #[arg(long, value_parser = cli::parse_timeout)]
        timeout: Option<std::time::Duration>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List recent invocation records, newest first.
    Records {
        /// Only the record of this invocation id (as a failed call's error names it), whether
        /// among the latest in the server's memory or older, in its record files.
        #[arg(long, conflicts_with_all = ["tool", "service", "status", "trace_id", "correlation_id", "limit"])]
        id: Option<String>,
        /// Only records of this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Only records of this service.
        #[arg(long)]
        service: Option<String>,
        /// Only records with this status, as the listing prints it: succeeded, failed, timedout ...
        #[arg(long, value_parser = cli::parse_invocation_status)]
        status: Option<toolplane::pb::InvocationStatus>,
        /// Only records of calls made in this W3C trace (32 lowercase hex digits).
        #[arg(long)]
        trace_id: Option<String>,
        /// Only records with this correlation id (the envelope's, or an MCP session's id).
        #[arg(long)]
        correlation_id: Option<String>,
        /// How many records, newest first (the listing's pages are followed).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i32).range(1..))]
        limit: i32,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Check a server configuration as `serve` would read it, without serving: settings, TLS
    /// files, the records directory. Exit 0 when it can be used, 2 when not.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Work with invocation record logs.
    Audit {
        #[command(subcommand)]
        command: cli::audit::AuditCommand,
    },
    /// Create, list, show and chat with agents.
    Agent {
        #[command(subcommand)]
        command: agent::AgentCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show the health of a service, or of the control plane when none is named. Exit 0 when
    /// healthy or ready, 1 when not (or the service is not registered).
    Health {
        /// The service; omit for the control plane itself.
        service: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// mimalloc: glibc's allocator serialized the tonic worker threads on its arena locks (seen
/// in profiles as `__lll_lock_wait_private` under `malloc`); see BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A multi-threaded tokio runtime with `worker_threads` workers (0: one per available CPU,
/// tokio's default).
fn runtime(worker_threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if worker_threads > 0 {
        builder.worker_threads(worker_threads);
    }
    builder.enable_all().build()
}

/// What `toolplane config` does.
#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Read the configuration (defaults < file < TOOLPLANE_* environment) and check what
    /// `serve` checks before it serves; print what it would serve.
    Check {
        /// Config file [default: ./toolplane.toml when it exists].
        #[arg(long, env = "TOOLPLANE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// List the tools of each [[mcp_imports]] server as the server would import them, with
    /// each tool's definition_sha256 and whether the entry's approved_tools approve it; then
    /// the approved_tools line approving them as listed now.
    ReviewImports {
        /// Config file [default: ./toolplane.toml when it exists].
        #[arg(long, env = "TOOLPLANE_CONFIG")]
        config: Option<PathBuf>,
        /// Only the import of this service.
        #[arg(long)]
        service: Option<String>,
        /// Print JSON (with each tool's schemas) instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (worker_threads, run): (usize, std::pin::Pin<Box<dyn Future<Output = ExitCode>>>) =
        match cli.command {
            Command::Serve {
                listen,
                metrics_listen,
                mcp_listen,
                config,
                log_format,
            } => {
                // The configuration is read before the runtime exists: it sizes the runtime.
                let config = match ServerConfig::load_from_process(config.as_deref()) {
                    Ok(config) => config,
                    Err(error) => {
                        eprintln!("error: {error}");
                        return ExitCode::from(2);
                    }
                };
                let threads = config.worker_threads;
                let addresses = cli::serve::Addresses {
                    listen,
                    metrics_listen,
                    mcp_listen,
                };
                (
                    threads,
                    Box::pin(cli::serve::serve(addresses, config, log_format)),
                )
            }
            command => (
                0,
                Box::pin(async move {
                    let _log = cli::serve::init_tracing(LogFormat::Text);
                    match run_client(command).await {
                        Ok(code) => code,
                        Err(error) => {
                            eprintln!("error: {error}");
                            ExitCode::from(2)
                        }
                    }
                }),
            ),
        };
    match runtime(worker_threads) {
        Ok(runtime) => runtime.block_on(run),
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

fn print_json(value: &serde_json::Value) {
    outln!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

async fn run_client(command: Command) -> Result<ExitCode, ClientError> {
    match command {
        Command::Serve { .. } => unreachable!("serve is handled in main"),
        Command::Preflight {
            required,
            optional,
            client,
        } => {
            let mut requirements = required;
            requirements.extend(optional.into_iter().map(|r| ToolRequirement {
                optional: true,
                ..r
            }));
            if requirements.is_empty() {
                eprintln!("error: name at least one --require or --optional");
                return Ok(ExitCode::from(2));
            }
            preflight(&connect(&client).await?, &requirements, client.json).await
        }
        Command::Services { client } => {
            let services = connect(&client).await?.all_services().await?;
            if client.json {
                print_json(&services.iter().map(cli::service_json).collect());
            } else {
                outln!("{}", cli::services_table(&services));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools { selection, client } => {
            let tools = connect(&client)
                .await?
                .tools_selected(&selection.into())
                .await?;
            if client.json {
                print_json(&tools.iter().map(cli::tool_json).collect());
            } else {
                outln!("{}", cli::tools_table(&tools));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Search {
            query,
            selection,
            max_results,
            client,
        } => {
            let found = connect(&client)
                .await?
                .search_tools(&query, &selection.into(), max_results)
                .await?;
            if client.json {
                print_json(&cli::search_json(&found));
            } else {
                outln!("{}", cli::search_table(&found));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::ExportRtfs {
            dir,
            service,
            client,
        } => {
            let connected = connect(&client).await?;
            let written = cli::export_rtfs::export(&connected, &dir, service.as_deref()).await;
            let paths: Vec<String> = match written {
                Ok(paths) => paths.iter().map(|p| p.display().to_string()).collect(),
                Err(error) => {
                    eprintln!("error: {error}");
                    return Ok(ExitCode::from(2));
                }
            };
            match client.json {
                true => print_json(&paths.iter().map(|p| serde_json::json!(p)).collect()),
                false => paths.iter().for_each(|path| outln!("{path}")),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Invoke {
            tool,
            input,
            service,
            timeout,
            client,
        } => {
            let input = match cli::invoke_input(&input) {
                Ok(input) => input,
                Err(error) => {
                    eprintln!("error: {error}");
                    return Ok(ExitCode::from(2));
                }
            };
            let answer = match connect(&client)
                .await?
                .invoke(&tool, service.as_deref(), &input, timeout)
                .await
            {
                Ok(answer) => answer,
                Err(ClientError::Rpc(status)) => {
                    eprintln!("error: {}", toolplane::client::describe_status(&status));
                    use tonic_types::StatusExt;
                    let details = status.get_error_details();
                    if let Some(id) = details
                        .error_info()
                        .and_then(|info| info.metadata.get("invocation_id"))
                    {
                        eprintln!("  the call's record: toolplane records --id {id}");
                    }
                    return Ok(ExitCode::from(1));
                }
                Err(other) => return Err(other),
            };
            for warning in &answer.warnings {
                tracing::warn!("{warning}");
            }
            let output = answer
                .output
                .as_ref()
                .map(toolplane::json::value_to_json)
                .transpose()
                .ok()
                .flatten()
                .unwrap_or_default();
            if client.json {
                print_json(
                    &serde_json::json!({"output": output, "warnings": answer.warnings, "record": answer.record.as_ref().map(cli::record_json)}),
                );
            } else {
                print_json(&output);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Records {
            id,
            tool,
            service,
            status,
            trace_id,
            correlation_id,
            limit,
            client,
        } => {
            let filter = toolplane::client::RecordFilter {
                tool: tool.as_deref(),
                trace_id: trace_id.as_deref(),
                correlation_id: correlation_id.as_deref(),
                service: service.as_deref(),
                status,
            };
            let connected = connect(&client).await?;
            let records = match id {
                Some(id) => vec![connected.record(&id).await?],
                None => connected.records(&filter, limit).await?,
            };
            if client.json {
                print_json(&records.iter().map(cli::record_json).collect());
            } else {
                outln!("{}", cli::records_table(&records));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit { command } => Ok(command.run()),
        Command::Config {
            command: ConfigCommand::Check { config },
        } => Ok(cli::config_check::run(config.as_deref())),
        Command::Config {
            command:
                ConfigCommand::ReviewImports {
                    config,
                    service,
                    json,
                },
        } => Ok(cli::review_imports::run(config.as_deref(), service.as_deref(), json).await),
        Command::Agent { command, client } => agent::run(command, &client).await,
        Command::Health { service, client } => {
            let service = service.unwrap_or_default();
            let health = match connect(&client).await?.health(&service).await {
                Ok(health) => health,
                Err(ClientError::Rpc(status)) if status.code() == tonic::Code::NotFound => {
                    eprintln!("error: {}", toolplane::client::describe_status(&status));
                    return Ok(ExitCode::from(1));
                }
                Err(other) => return Err(other),
            };
            if client.json {
                print_json(&cli::health_json(&service, &health));
            } else {
                outln!("{}", cli::health_table(&service, &health));
            }
            let taking_work = matches!(
                toolplane::pb::HealthState::try_from(health.status),
                Ok(toolplane::pb::HealthState::Healthy | toolplane::pb::HealthState::Ready)
            );
            Ok(ExitCode::from(u8::from(!taking_work)))
        }
    }
}

async fn preflight(
    client: &ToolplaneClient,
    requirements: &[ToolRequirement],
    json: bool,
) -> Result<ExitCode, ClientError> {
    let response = match client.preflight(requirements).await {
        Ok(response) => response,
        Err(ClientError::MissingTools(missing)) => missing.response,
        Err(error) => return Err(error),
    };
    for service in &response.services {
        for tool in &service.available_tools {
            tracing::info!(service = %service.service_name, version = %service.service_version, tool = %tool.tool_name, "found tool");
        }
    }
    for missing in &response.missing_optional {
        tracing::warn!(service = %missing.service_name, tool = %missing.tool_name, "optional tool missing: {}", missing.detail);
    }
    let missing_required = &response.missing_required;
    if json {
        print_json(&serde_json::json!({
            "ok": response.ok,
            "missing_required": missing_required.iter().map(cli::missing_json).collect::<Vec<_>>(),
            "missing_optional": response.missing_optional.iter().map(cli::missing_json).collect::<Vec<_>>(),
        }));
    }
    if missing_required.is_empty() {
        if !json {
            outln!("pre-flight ok: every required tool is registered");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !json {
        eprintln!(
            "pre-flight failed: {} required tool(s) missing:",
            missing_required.len()
        );
        for missing in missing_required {
            eprintln!("  - {}", missing.detail);
        }
    }
    Ok(ExitCode::from(1))
}
