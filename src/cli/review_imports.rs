//! `toolplane config review-imports`: the review step of approving imported tools
//! ([`crate::mcp::approval`]). For each `[[mcp_imports]]` entry of a configuration (read as
//! `serve` reads it), it opens a session with the MCP server as the server would (the same
//! URL or command, bearer token and TLS), lists its tools, and prints each with its
//! `definition_sha256` and what the entry's `approved_tools` say of it; then, per service, the
//! `approved_tools` line that approves the tools as listed now, to paste once reviewed.

use std::path::Path;
use std::process::ExitCode;

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::new_table;
use crate::config::ServerConfig;
use crate::grpc::provider_tls::ProviderTls;
use crate::mcp::client::McpCaller;
use crate::mcp::import::{CheckedTools, ListedTool, McpImport, list_tools, read_listing};
use crate::mcp::session_keys::SessionKey;
use crate::outln;
use crate::registry::RegistrationLimits;
use crate::registry::model::ToolAnnotations;

/// How many servers are reviewed at once (each may be a process started for the review).
const REVIEWED_AT_ONCE: usize = 8;

/// Reviews the imports of the configuration `file` (only `service`'s, when given); prints a
/// table (or JSON) and exits 0, or exits 2 when the configuration cannot be used or a server
/// cannot be listed (saying why on stderr; the other servers are still reviewed).
pub async fn run(file: Option<&Path>, service: Option<&str>, json: bool) -> ExitCode {
    let options = match ServerConfig::load_from_process(file) {
        Ok(config) => config.server_options(),
        Err(error) => return fail(&error.to_string()),
    };
    let imports: Vec<&McpImport> = (options.mcp_imports.iter())
        .filter(|import| service.is_none_or(|name| import.service.as_str() == name))
        .collect();
    if imports.is_empty() {
        return fail(&match service {
            Some(name) => format!("no [[mcp_imports]] entry imports service {name}"),
            None => "the configuration has no [[mcp_imports]] entries".to_owned(),
        });
    }
    let tls = match ProviderTls::from_files(&options.provider_tls) {
        Ok(tls) => tls,
        Err(error) => return fail(&error.to_string()),
    };
    let caller = McpCaller::for_imports(&options.mcp_imports, tls);
    // Several at once, each bounded as an import's is: the session's opening (10 s for a
    // server at a URL, 60 s for one started) and the listing (60 s, or the lease when
    // shorter). One after another, a configuration of servers slow to start (`npx`, `uvx`)
    // took the sum of their starts. Answered in the configuration's order.
    let (caller, limits) = (&caller, &options.limits);
    let listings: Vec<_> = futures_util::stream::iter(imports)
        .map(|import| async move {
            let listing = list(caller, import, limits).await;
            (import, listing)
        })
        .buffered(REVIEWED_AT_ONCE)
        .collect()
        .await;
    let mut reviewed = Vec::new();
    let mut failed = false;
    for (import, listing) in listings {
        match listing {
            Ok(tools) => {
                let approved = import.approved_tools.as_ref();
                let mut checked = CheckedTools::default();
                let listed = read_listing(import, approved, &options.limits, &tools, &mut checked);
                reviewed.push((import, listed));
            }
            Err(error) => {
                eprintln!("error: service {}: {error}", import.service);
                failed = true;
            }
        }
    }
    // A server started for the review ends as MCP asks, not killed as the process exits.
    caller.close_all().await;
    if json {
        let tools: Vec<Value> = reviewed.iter().flat_map(tools_json).collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&tools).expect("JSON values serialize")
        );
    } else {
        outln!("{}", table(&reviewed));
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn fail(error: &str) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(2)
}

async fn list(
    caller: &McpCaller,
    import: &McpImport,
    limits: &RegistrationLimits,
) -> Result<Vec<rmcp::model::Tool>, String> {
    let session = caller.session(&SessionKey::of_import(import)).await?;
    list_tools(&session, import, limits)
        .await
        .map_err(|error| format!("cannot list the tools of {}: {error}", import.source))
}

/// What the table and JSON call a tool's standing.
fn approval(listed: &ListedTool) -> &'static str {
    match &listed.verdict {
        None => "not_required",
        Some(verdict) => verdict.as_str(),
    }
}

fn tools_json((import, listed): &(&McpImport, Vec<ListedTool>)) -> Vec<Value> {
    listed
        .iter()
        .map(|tool| {
            json!({
                "service_name": import.service.as_str(),
                "tool_name": tool.spec.name,
                "approval": approval(tool),
                "definition_sha256": tool.sha256,
                "description": tool.spec.description,
                "annotations": tool.spec.annotations.to_mcp_json(),
                "tool_schema": tool.spec.input_schema,
                "output_schema": tool.spec.output_schema,
            })
        })
        .collect()
}

/// The tools as a table, then each service's `approved_tools` line.
fn table(reviewed: &[(&McpImport, Vec<ListedTool>)]) -> String {
    let mut table = new_table(&[
        "SERVICE",
        "TOOL",
        "APPROVAL",
        "DEFINITION_SHA256",
        "HINTS",
        "DESCRIPTION",
    ]);
    let mut lines = Vec::new();
    for (import, listed) in reviewed {
        for tool in listed {
            table.add_row(vec![
                import.service.to_string(),
                tool.spec.name.clone(),
                approval(tool).to_owned(),
                tool.sha256.clone(),
                hints(&tool.spec.annotations),
                tool.spec.description.clone(),
            ]);
        }
        lines.push(format!(
            "# service {}: approves its tools as listed now (review them first; --json shows \
             their schemas and titles)\n{}",
            import.service,
            approved_tools_line(listed)
        ));
    }
    format!("{}\n\n{}", table.trim_fmt(), lines.join("\n"))
}

/// The `approved_tools` line (TOML) that approves `listed` at the definitions listed.
pub(crate) fn approved_tools_line(listed: &[ListedTool]) -> String {
    let pins: Vec<String> = (listed.iter())
        .map(|tool| format!("{} = \"{}\"", toml_key(&tool.spec.name), tool.sha256))
        .collect();
    format!("approved_tools = {{ {} }}", pins.join(", "))
}

/// The hints the server gives a tool, in words (`read-only, closed world`); those it does
/// not give are left out (MCP's defaults then apply).
fn hints(annotations: &ToolAnnotations) -> String {
    let said = |hint: Option<bool>, yes: &'static str, no: &'static str| {
        hint.map(|hint| if hint { yes } else { no })
    };
    [
        said(annotations.read_only, "read-only", "not read-only"),
        said(annotations.destructive, "destructive", "not destructive"),
        said(annotations.idempotent, "idempotent", "not idempotent"),
        said(annotations.open_world, "open world", "closed world"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ")
}

/// A tool name as a TOML key: bare when TOML allows it (`[A-Za-z0-9_-]`), else quoted (a
/// tool name may hold dots).
fn toml_key(name: &str) -> String {
    if name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    {
        name.to_owned()
    } else {
        format!("\"{name}\"")
    }
}
