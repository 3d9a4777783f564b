//! What the `toolplane` client commands print: tables for people, JSON for scripts.

pub mod agent;
pub mod audit;
pub mod client_args;
pub mod config_check;
pub mod export_rtfs;
pub mod review_imports;
pub mod serve;

use comfy_table::{Table, presets::NOTHING};
use serde_json::{Value, json};

use crate::client::ToolSelection;
use crate::json::struct_to_json;
use crate::pb;

/// `println!` for what the commands answer on standard output. When the reader has gone
/// (`toolplane records | head -3`), the command ends quietly with status 141, as a program that
/// SIGPIPE ends does, where `println!` would panic: Rust ignores SIGPIPE, and putting its default
/// back would also end the command on a write to a server that closed its connection.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_line(::std::format_args!($($arg)*))
    };
}

/// Writes one line to standard output, for [`outln!`](crate::outln).
pub fn write_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
        Err(error) => {
            eprintln!("error: cannot write to standard output: {error}");
            std::process::exit(1);
        }
    }
}

/// The input `toolplane invoke --input` names: the JSON object itself, `@FILE` for the one in
/// a file, or `-` for the one on standard input; else why it cannot be used.
pub fn invoke_input(given: &str) -> Result<Value, String> {
    let (text, from) = match given {
        "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|error| format!("--input -: cannot read standard input: {error}"))?;
            (text, "standard input")
        }
        _ => match given.strip_prefix('@') {
            Some(path) => (
                std::fs::read_to_string(path)
                    .map_err(|error| format!("--input {given}: cannot read {path}: {error}"))?,
                path,
            ),
            None => (given.to_owned(), "--input"),
        },
    };
    match serde_json::from_str(&text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(format!("the input ({from}) must be a JSON object")),
        Err(error) => Err(format!("the input ({from}) is not JSON: {error}")),
    }
}

/// The lowercase label of a proto enum value name without its prefix, as the seeds write them
/// (`HEALTH_STATE_HEALTHY` -> `healthy`, `AGENT_STATE_TOOL_CALL` -> `toolcall`).
pub(crate) fn label(name: &str, prefix: &str) -> String {
    name.trim_start_matches(prefix)
        .replace('_', "")
        .to_ascii_lowercase()
}

fn capability_name(value: i32) -> String {
    pb::ServiceCapability::try_from(value).map_or_else(
        |_| value.to_string(),
        |v| label(v.as_str_name(), "SERVICE_CAPABILITY_"),
    )
}

/// The seed's lowercase name of a health state.
pub fn health_name(value: i32) -> String {
    pb::HealthState::try_from(value).map_or_else(
        |_| value.to_string(),
        |v| label(v.as_str_name(), "HEALTH_STATE_"),
    )
}

pub(crate) fn timestamp(value: Option<&prost_types::Timestamp>) -> String {
    value.map(ToString::to_string).unwrap_or_default()
}

/// A table without borders, as kubectl and docker print them: columns three spaces apart, none
/// before the first. Print it with [`Table::trim_fmt`], so no line ends in padding.
pub(crate) fn new_table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(NOTHING).set_header(header.to_vec());
    for column in table.column_iter_mut() {
        column.set_padding((0, 3));
    }
    table
}

/// The filters of `toolplane tools` and `toolplane search`.
#[derive(Debug, Clone, clap::Args)]
pub struct SelectionArgs {
    /// Only the tools of this service.
    #[arg(long)]
    pub service: Option<String>,
    /// Only tools with this domain or one under it (`github` takes `github.issues`).
    #[arg(long)]
    pub domain: Option<String>,
    /// Only tools with this category or one under it (`crud.read`, `crud`, `search` ...).
    #[arg(long)]
    pub category: Option<String>,
}

impl From<SelectionArgs> for ToolSelection {
    fn from(args: SelectionArgs) -> Self {
        Self {
            service: args.service,
            domain: args.domain,
            category: args.category,
        }
    }
}

/// A tool as JSON.
pub fn tool_json(tool: &pb::ToolRegistration) -> Value {
    json!({
        "tool_name": tool.tool_name,
        "service_name": tool.service_name,
        "service_version": tool.service_version,
        "description": tool.description,
        "capabilities": tool.capabilities.iter().map(|c| capability_name(*c)).collect::<Vec<_>>(),
        "timeout_ms": tool.timeout_ms,
        "definition_sha256": tool.definition_sha256,
        "domains": tool.domains,
        "categories": tool.categories,
        "tool_schema": tool.tool_schema.as_ref().and_then(|s| struct_to_json(s).ok()),
        "output_schema": tool.output_schema.as_ref().and_then(|s| struct_to_json(s).ok()),
    })
}

/// A service as JSON.
pub fn service_json(service: &pb::DiscoveryInfo) -> Value {
    json!({
        "service_name": service.service_name,
        "service_version": service.service_version,
        "endpoint": service.endpoint,
        "service_health": health_name(service.service_health),
        "uptime_seconds": service.uptime_seconds,
        "registered_at": timestamp(service.registered_at.as_ref()),
        "expires_at": timestamp(service.expires_at.as_ref()),
        "available_tools": service.available_tools.iter().map(tool_json).collect::<Vec<_>>(),
        "instances": service.instances.iter().map(|instance| json!({
            "instance_id": instance.instance_id,
            "endpoint": instance.endpoint,
            "health": health_name(instance.health),
            "registered_at": timestamp(instance.registered_at.as_ref()),
            "expires_at": timestamp(instance.expires_at.as_ref()),
        })).collect::<Vec<_>>(),
    })
}

/// A table of services.
pub fn services_table(services: &[pb::DiscoveryInfo]) -> String {
    let mut table = new_table(&[
        "SERVICE",
        "VERSION",
        "HEALTH",
        "TOOLS",
        "INSTANCES",
        "ENDPOINT",
        "EXPIRES AT",
    ]);
    for service in services {
        table.add_row(vec![
            service.service_name.clone(),
            service.service_version.clone(),
            health_name(service.service_health),
            service.available_tools.len().to_string(),
            service.instances.len().to_string(),
            service.endpoint.clone(),
            timestamp(service.expires_at.as_ref()),
        ]);
    }
    table.trim_fmt()
}

/// A table of tools.
pub fn tools_table(tools: &[pb::ToolRegistration]) -> String {
    let mut table = new_table(&[
        "TOOL",
        "SERVICE",
        "VERSION",
        "CAPABILITIES",
        "CATEGORIES",
        "DOMAINS",
        "DESCRIPTION",
    ]);
    for tool in tools {
        table.add_row(vec![
            tool.tool_name.clone(),
            tool.service_name.clone(),
            tool.service_version.clone(),
            tool.capabilities
                .iter()
                .map(|c| capability_name(*c))
                .collect::<Vec<_>>()
                .join(","),
            tool.categories.join(","),
            tool.domains.join(","),
            tool.description.clone(),
        ]);
    }
    table.trim_fmt()
}

/// A search's answer as JSON: `total_matches`, and `matches` best first, each with its `score`
/// and `tool`.
pub fn search_json(found: &pb::SearchToolsResponse) -> Value {
    json!({
        "total_matches": found.total_matches,
        "matches": found.matches.iter().map(|found| json!({
            "score": found.score,
            "tool": found.tool.as_ref().map(tool_json),
        })).collect::<Vec<_>>(),
    })
}

/// A table of a search's matches, best first, and how many matched in all.
pub fn search_table(found: &pb::SearchToolsResponse) -> String {
    let mut table = new_table(&["SCORE", "TOOL", "SERVICE", "DESCRIPTION"]);
    for found in &found.matches {
        let tool = found.tool.clone().unwrap_or_default();
        table.add_row(vec![
            format!("{:.2}", found.score),
            tool.tool_name,
            tool.service_name,
            tool.description,
        ]);
    }
    format!(
        "{}\n{} of {} matching tools shown",
        table.trim_fmt(),
        found.matches.len(),
        found.total_matches
    )
}

/// A health answer as JSON.
pub fn health_json(service: &str, health: &pb::GetServiceHealthResponse) -> Value {
    json!({
        "service_name": service,
        "status": health_name(health.status),
        "timestamp": timestamp(health.timestamp.as_ref()),
        "uptime_seconds": health.uptime_seconds,
        "tools_count": health.tools_count,
        "tools": health.tools,
    })
}

/// A health answer as a table.
pub fn health_table(service: &str, health: &pb::GetServiceHealthResponse) -> String {
    let mut table = new_table(&["SERVICE", "STATUS", "UPTIME (S)", "TOOLS"]);
    let name = if service.is_empty() {
        "(control plane)"
    } else {
        service
    };
    let tools = if health.tools.is_empty() {
        health.tools_count.to_string()
    } else {
        health.tools.join(",")
    };
    table.add_row(vec![
        name.to_owned(),
        health_name(health.status),
        health.uptime_seconds.to_string(),
        tools,
    ]);
    table.trim_fmt()
}

/// A missing tool as JSON.
pub fn missing_json(missing: &pb::MissingTool) -> Value {
    json!({
        "service_name": missing.service_name,
        "tool_name": missing.tool_name,
        "reason": pb::MissingReason::try_from(missing.reason).map(|r| r.as_str_name()).unwrap_or("MISSING_REASON_UNSPECIFIED"),
        "detail": missing.detail,
    })
}

pub(crate) fn invocation_status_name(value: i32) -> String {
    pb::InvocationStatus::try_from(value).map_or_else(
        |_| value.to_string(),
        |v| label(v.as_str_name(), "INVOCATION_STATUS_"),
    )
}

/// A `--timeout`: a duration above zero (a deadline of zero would end the call before it
/// began; leaving it out waits as long as the tool and the server allow).
pub fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text) {
        Ok(timeout) if timeout.is_zero() => Err("a timeout must be above zero; leave it out to \
             wait as long as the tool (its timeout_ms) and the server (max_invoke_timeout) allow"
            .to_owned()),
        Ok(timeout) => Ok(timeout),
        Err(error) => Err(format!("{error}; write it as 2s, 500ms or 1m")),
    }
}

/// The invocation status `--status` names: as the commands print it (`timedout`), with
/// underscores (`timed_out`) or as the proto names it (`INVOCATION_STATUS_TIMED_OUT`), in any
/// case.
pub fn parse_invocation_status(text: &str) -> Result<pb::InvocationStatus, String> {
    let wanted = label(&text.to_ascii_uppercase(), "INVOCATION_STATUS_");
    let named: Vec<(pb::InvocationStatus, String)> = (1..64)
        .filter_map(|value| pb::InvocationStatus::try_from(value).ok())
        .map(|status| (status, invocation_status_name(status as i32)))
        .collect();
    match named.iter().find(|(_, name)| *name == wanted) {
        Some((status, _)) => Ok(*status),
        None => {
            let names: Vec<&str> = named.iter().map(|(_, name)| name.as_str()).collect();
            Err(format!("not a status; one of {}", names.join(", ")))
        }
    }
}

/// An invocation record as JSON.
pub fn record_json(record: &pb::InvocationRecord) -> Value {
    json!({
        "invocation_id": record.invocation_id,
        "sequence": record.sequence,
        "correlation_id": record.correlation_id,
        "tool_name": record.tool_name,
        "service_name": record.service_name,
        "status": invocation_status_name(record.status),
        "error_reason": record.error_reason,
        "attempts": record.attempts,
        "started_at": timestamp(record.started_at.as_ref()),
        "duration_us": record.duration.map(|d| d.seconds * 1_000_000 + i64::from(d.nanos) / 1000),
        "input_sha256": record.input_sha256,
        "output_sha256": record.output_sha256,
        "record_sha256": record.record_sha256,
        "trace_id": record.trace_id,
    })
}

/// A table of invocation records.
pub fn records_table(records: &[pb::InvocationRecord]) -> String {
    let mut table = new_table(&[
        "SEQ",
        "STARTED AT",
        "TOOL",
        "SERVICE",
        "STATUS",
        "REASON",
        "ATTEMPTS",
        "MS",
    ]);
    for record in records {
        let millis = record
            .duration
            .map(|d| d.seconds * 1000 + i64::from(d.nanos) / 1_000_000)
            .unwrap_or_default();
        table.add_row(vec![
            record.sequence.to_string(),
            timestamp(record.started_at.as_ref()),
            record.tool_name.clone(),
            record.service_name.clone(),
            invocation_status_name(record.status),
            record.error_reason.clone(),
            record.attempts.to_string(),
            millis.to_string(),
        ]);
    }
    table.trim_fmt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invoke_input_is_given_or_read_from_a_file() {
        assert_eq!(invoke_input(r#"{"a": 1}"#), Ok(json!({"a": 1})));
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("input.json");
        std::fs::write(&file, r#"{"b": [2]}"#).expect("written");
        let named = format!("@{}", file.display());
        assert_eq!(invoke_input(&named), Ok(json!({"b": [2]})));
        std::fs::write(&file, "[1]").expect("written");
        assert_eq!(
            invoke_input(&named),
            Err(format!(
                "the input ({}) must be a JSON object",
                file.display()
            ))
        );
        let missing = format!("@{}", dir.path().join("missing.json").display());
        let error = invoke_input(&missing).expect_err("no such file");
        assert!(
            error.starts_with(&format!("--input {missing}: cannot read ")),
            "{error}"
        );
        let error = invoke_input("{oops").expect_err("not JSON");
        assert!(
            error.starts_with("the input (--input) is not JSON: "),
            "{error}"
        );
    }

    #[test]
    fn a_timeout_is_a_duration_above_zero() {
        assert_eq!(
            parse_timeout("500ms"),
            Ok(std::time::Duration::from_millis(500))
        );
        let zero = parse_timeout("0s").expect_err("zero");
        assert!(
            zero.starts_with("a timeout must be above zero; leave it out"),
            "{zero}"
        );
        let unit = parse_timeout("5 parsecs").expect_err("no such unit");
        assert!(unit.ends_with("; write it as 2s, 500ms or 1m"), "{unit}");
    }

    #[test]
    fn a_status_is_named_as_printed_with_underscores_or_as_the_proto_does() {
        for named in [
            "timedout",
            "timed_out",
            "TIMED_OUT",
            "INVOCATION_STATUS_TIMED_OUT",
        ] {
            assert_eq!(
                parse_invocation_status(named),
                Ok(pb::InvocationStatus::TimedOut),
                "{named}"
            );
        }
        let wrong = parse_invocation_status("unspecified").expect_err("not a status");
        assert!(
            wrong.starts_with("not a status; one of succeeded, "),
            "{wrong}"
        );
    }
}
