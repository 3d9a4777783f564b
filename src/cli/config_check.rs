//! `toolplane config check`: reads a configuration as `serve` does (defaults < file <
//! `TOOLPLANE_*` environment) and checks what `serve` checks before it serves (the settings,
//! the TLS files it serves and connects with, the chat model's settings, the records file's
//! directory, the agents kept in `agents_path`), without binding an address or writing a file, so a configuration can be
//! checked before it is rolled out (a ConfigMap, say).

use std::path::Path;
use std::process::ExitCode;

use crate::agent::store::AgentFiles;
use crate::config::ServerConfig;
use crate::grpc::outgoing_tls::ALPN_H2;
use crate::grpc::server::{ServerOptions, check_tls_files, model_provider};
use crate::mcp::import_config::{McpSource, ServerAuth};
use crate::otlp::OTLP_TLS_SETTINGS;
use crate::outln;

/// Checks the configuration `file` (or `./toolplane.toml` when it exists) with the process's
/// environment laid over it; prints what it would serve and exits 0, or prints why it cannot
/// be used and exits 2, as `serve` would.
pub fn run(file: Option<&Path>) -> ExitCode {
    let checked = ServerConfig::load_from_process(file)
        .map_err(|error| error.to_string())
        .and_then(|config| {
            let options = config.server_options();
            check_files(&options)?;
            let agents = match &options.agents_path {
                Some(directory) => kept_agents(directory)?,
                None => "in memory only".to_owned(),
            };
            Ok(summary(&config, &options, &agents))
        });
    match checked {
        Ok(summary) => {
            outln!("{summary}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// Reads the files `options` name, as the server does when it starts.
fn check_files(options: &ServerOptions) -> Result<(), String> {
    check_tls_files(options).map_err(|error| error.to_string())?;
    if let Some(export) = &options.otlp {
        export
            .tls
            .client_config(&OTLP_TLS_SETTINGS, ALPN_H2)
            .map_err(|error| error.to_string())?;
    }
    model_provider(options.model.as_ref(), &Default::default())
        .map_err(|error| format!("model client: {error}"))?;
    if let Some(path) = &options.records_path {
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        if !directory.is_dir() {
            return Err(format!(
                "records_path {}: its directory {} does not exist",
                path.display(),
                directory.display()
            ));
        }
        if path.is_dir() {
            return Err(format!(
                "records_path {} is a directory: name the file records are written to",
                path.display()
            ));
        }
    }
    Ok(())
}

/// What `agents_path` holds, read as the server reads it at the start (without creating the
/// directory or removing a write a crash cut short).
fn kept_agents(directory: &Path) -> Result<String, String> {
    if directory.exists() && !directory.is_dir() {
        return Err(format!(
            "agents_path {} is not a directory: name the directory agents are kept in",
            directory.display()
        ));
    }
    let agents = AgentFiles::read(directory).map_err(|error| error.to_string())?;
    Ok(format!(
        "{} ({} kept there now)",
        directory.display(),
        agents.len()
    ))
}

/// What a server with this configuration serves, one line each.
fn summary(config: &ServerConfig, options: &ServerOptions, agents: &str) -> String {
    let grpc_tls = match &options.tls {
        None => "plain text",
        Some(files) if files.client_ca_file.is_some() => "TLS, client certificates required",
        Some(_) => "TLS",
    };
    let or_off = |address: &str| {
        if address.is_empty() {
            "off".to_owned()
        } else {
            address.to_owned()
        }
    };
    let records = options.records_path.as_ref().map_or_else(
        || "in memory only".to_owned(),
        |path| path.display().to_string(),
    );
    let spans = options.otlp.as_ref().map_or_else(
        || "off".to_owned(),
        |export| format!("{} to {}", export.protocol, export.endpoint),
    );
    let access = &options.tenant_access;
    let tenants = if access.is_open() {
        "any tenant a caller names".to_owned()
    } else {
        let proxies = access.forwarded_client_cert_proxies();
        let forwarded = if proxies.is_empty() {
            String::new()
        } else {
            let listed: Vec<String> = proxies.iter().map(ToString::to_string).collect();
            format!(
                ", callers named in {} by {}",
                access.forwarded_identity_header().name(),
                listed.join(", ")
            )
        };
        format!(
            "granted to {} certificate identities and {} bearer tokens (tenant_access){forwarded}",
            access.identities(),
            access.tokens()
        )
    };
    let imports: Vec<String> = options
        .mcp_imports
        .iter()
        .map(|import| {
            let mut details = vec![import.source.to_string()];
            match &import.auth {
                None => {}
                Some(ServerAuth::Bearer(_)) => details.push("bearer token".to_owned()),
                Some(ServerAuth::BearerFile { path, .. }) => {
                    details.push(format!("bearer token file {}", path.display()));
                }
                Some(ServerAuth::ClientCredentials(credentials)) => {
                    details.push(credentials.to_string());
                }
            }
            if let Some(approved) = &import.approved_tools {
                details.push(format!("{} tools approved", approved.len()));
            }
            format!("{} ({})", import.service, details.join("; "))
        })
        .collect();
    let missing_commands = options.mcp_imports.iter().filter_map(|import| {
        let McpSource::Stdio(server) = &import.source else {
            return None;
        };
        let program = server.command.first()?;
        let path = server
            .env
            .iter()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.0.clone())
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        (!runnable(program, &path)).then(|| {
            format!(
                "  warning:     MCP import {}: command {program:?} is not found (as a file, or on \
                 PATH); serve starts anyway, and tries it again at each call and refresh",
                import.service
            )
        })
    });
    [
        "configuration ok".to_owned(),
        format!("  gRPC:        {} ({grpc_tls})", config.listen),
        format!("  metrics:     {}", or_off(&config.metrics_listen)),
        format!("  MCP:         {}", or_off(&config.mcp_listen)),
        format!("  tenants:     {tenants}"),
        format!("  records:     {records}"),
        format!("  agents:      {agents}"),
        format!("  spans:       {spans}"),
        format!(
            "  MCP imports: {}",
            if imports.is_empty() {
                "none".to_owned()
            } else {
                imports.join(", ")
            }
        ),
    ]
    .into_iter()
    .chain(missing_commands)
    .chain((config.unread_variables().iter()).map(|warning| format!("  warning:     {warning}")))
    .collect::<Vec<_>>()
    .join("\n")
}

/// Whether `program` names a file that can be run: itself when it holds a `/`, else in one of
/// the directories of `path`, as the operating system looks a command up. Written here: the
/// `which` crate would be a new dependency for one warning.
fn runnable(program: &str, path: &str) -> bool {
    let is_runnable = |file: &Path| {
        file.metadata()
            .is_ok_and(|meta| meta.is_file() && executable(&meta))
    };
    if program.contains('/') {
        return is_runnable(Path::new(program));
    }
    std::env::split_paths(path).any(|directory| is_runnable(&directory.join(program)))
}

/// Whether a file's permissions let it be run.
#[cfg(unix)]
fn executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

/// Whether a file's permissions let it be run: elsewhere than Unix, any file may be.
#[cfg(not(unix))]
fn executable(_meta: &std::fs::Metadata) -> bool {
    true
}
