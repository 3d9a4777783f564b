//! What MCP servers log, in toolplane's own log: each `notifications/message` a server sends
//! (at its MCP level: `debug` as DEBUG, `info` and `notice` as INFO, `warning` as WARN,
//! `error` and above as ERROR), and each line a server toolplane started writes to its
//! standard error (at INFO), within the server's [`LogBudget`]. Each event names the server (`mcp_server`: the endpoint of the
//! session, `mcp+stdio://TENANT/SERVICE` for a server toolplane started), under the target
//! [`TARGET`], so `RUST_LOG` can select them and a JSON log stays one object per line.
//!
//! MCP 2026-07-28 deprecates `notifications/message` (SEP-2577: servers are to log to their
//! standard error, or to OpenTelemetry); servers of the 2025 revisions, which toolplane's
//! sessions speak, still send them, so they are logged through the deprecation window.

use std::sync::Arc;

#[allow(deprecated)] // MCP logging: see the module docs.
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use crate::log_budget::LogBudget;

/// The target of the events logged for MCP servers.
pub const TARGET: &str = "toolplane::mcp_server";

/// Where what the server `endpoint` (one toolplane started) wrote to its standard error is,
/// for messages about its ending.
pub fn where_its_stderr_is(endpoint: &str) -> String {
    format!("what it wrote to its standard error is in toolplane's log, with mcp_server={endpoint}")
}

/// The longest text an event carries: a longer message is cut (saying how much was), and a
/// longer standard-error line is logged in pieces of this size.
pub const MAX_TEXT: usize = 16 * 1024;

/// Logs `message`, a `notifications/message` from the MCP server `server`.
#[allow(deprecated)] // MCP logging: see the module docs.
pub fn log_message(server: &str, message: &LoggingMessageNotificationParam) {
    let text = match &message.data {
        Value::String(text) => cut(text),
        data => cut(&data.to_string()),
    };
    let logger = message.logger.as_deref();
    let mcp_level = level_name(message.level);
    match message.level {
        LoggingLevel::Debug => {
            tracing::debug!(target: TARGET, mcp_server = server, mcp_level, logger, "{text}")
        }
        LoggingLevel::Info | LoggingLevel::Notice => {
            tracing::info!(target: TARGET, mcp_server = server, mcp_level, logger, "{text}")
        }
        LoggingLevel::Warning => {
            tracing::warn!(target: TARGET, mcp_server = server, mcp_level, logger, "{text}")
        }
        LoggingLevel::Error
        | LoggingLevel::Critical
        | LoggingLevel::Alert
        | LoggingLevel::Emergency => {
            tracing::error!(target: TARGET, mcp_server = server, mcp_level, logger, "{text}")
        }
    }
}

/// Logs each line `stderr` (a server's standard error) carries until it ends, within the
/// server's `budget`, from a task of its own. The stream is read to its end whatever it holds
/// (a line over [`MAX_TEXT`] is logged in pieces, bytes that are not UTF-8 as U+FFFD, lines
/// past the budget counted), so the server never blocks writing to a full pipe.
pub fn relay_stderr(
    server: Arc<str>,
    stderr: impl AsyncRead + Send + Unpin + 'static,
    budget: Arc<LogBudget>,
) {
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr);
        while let Some(piece) = next_piece(&mut reader).await {
            if !piece.trim().is_empty() && budget.allows() {
                tracing::info!(target: TARGET, mcp_server = &*server, stream = "stderr", "{piece}");
            }
        }
        budget.ended();
    });
}

/// The next line `reader` holds, without its line end, or its next [`MAX_TEXT`] bytes when
/// the line is longer; `None` at the end (or when it cannot be read).
async fn next_piece(reader: &mut (impl AsyncBufRead + Unpin)) -> Option<String> {
    let mut piece = Vec::new();
    match reader
        .take(MAX_TEXT as u64)
        .read_until(b'\n', &mut piece)
        .await
    {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            let text = String::from_utf8_lossy(&piece);
            Some(text.trim_end_matches(['\n', '\r']).to_owned())
        }
    }
}

/// MCP's name of `level`.
#[allow(deprecated)] // MCP logging: see the module docs.
fn level_name(level: LoggingLevel) -> &'static str {
    match level {
        LoggingLevel::Debug => "debug",
        LoggingLevel::Info => "info",
        LoggingLevel::Notice => "notice",
        LoggingLevel::Warning => "warning",
        LoggingLevel::Error => "error",
        LoggingLevel::Critical => "critical",
        LoggingLevel::Alert => "alert",
        LoggingLevel::Emergency => "emergency",
    }
}

/// `text`, cut to [`MAX_TEXT`] bytes (at a character boundary) with a note of how many bytes
/// were left out.
fn cut(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} more bytes)", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The event `message` is logged as, in toolplane's JSON log (all levels shown).
    #[allow(deprecated)] // MCP logging: see the module docs.
    fn logged(message: &LoggingMessageNotificationParam) -> Value {
        let ((), text) = crate::test_logs::logged(|| log_message("mcp+stdio://0/s", message));
        serde_json::from_str(text.trim()).expect("one JSON event")
    }

    #[test]
    #[allow(deprecated)] // MCP logging: see the module docs.
    fn each_mcp_level_is_logged_at_its_level_with_its_name() {
        let levels = [
            (LoggingLevel::Debug, "DEBUG", "debug"),
            (LoggingLevel::Info, "INFO", "info"),
            (LoggingLevel::Notice, "INFO", "notice"),
            (LoggingLevel::Warning, "WARN", "warning"),
            (LoggingLevel::Error, "ERROR", "error"),
            (LoggingLevel::Critical, "ERROR", "critical"),
            (LoggingLevel::Alert, "ERROR", "alert"),
            (LoggingLevel::Emergency, "ERROR", "emergency"),
        ];
        for (level, tracing_level, name) in levels {
            let message =
                LoggingMessageNotificationParam::new(level, json!({"rows": 3})).with_logger("db");
            let event = logged(&message);
            assert_eq!(event["level"], tracing_level, "{name}");
            assert_eq!(event["target"], TARGET);
            let fields = &event["fields"];
            assert_eq!(fields["mcp_level"], name);
            assert_eq!(fields["logger"], "db");
            assert_eq!(fields["mcp_server"], "mcp+stdio://0/s");
            assert_eq!(
                fields["message"], "{\"rows\":3}",
                "data that is not a string, as JSON"
            );
        }
        let text = LoggingMessageNotificationParam::new(LoggingLevel::Info, json!("as it is"));
        let event = logged(&text);
        assert_eq!(event["fields"]["message"], "as it is");
        assert!(
            event["fields"].get("logger").is_none(),
            "no logger, no field"
        );
    }

    #[test]
    fn a_long_text_is_cut_at_a_character_boundary_saying_how_much() {
        let text = format!("{}é{}", "a".repeat(MAX_TEXT - 1), "b".repeat(10));
        let cut = cut(&text);
        assert!(cut.starts_with(&"a".repeat(MAX_TEXT - 1)));
        assert!(
            cut.ends_with("... (12 more bytes)"),
            "{}",
            &cut[MAX_TEXT - 5..]
        );
        assert_eq!(super::cut("short"), "short");
    }

    #[tokio::test]
    async fn standard_error_is_read_in_lines_and_long_lines_in_pieces() {
        let long = "x".repeat(MAX_TEXT + 3);
        let mut bytes = b"first\r\nsecond \xff\n".to_vec();
        bytes.extend_from_slice(format!("{long}\n\nlast").as_bytes());
        let mut reader = BufReader::new(bytes.as_slice());
        let mut pieces = Vec::new();
        while let Some(piece) = next_piece(&mut reader).await {
            pieces.push(piece);
        }
        assert_eq!(
            pieces,
            [
                "first".to_owned(),
                "second \u{fffd}".to_owned(),
                "x".repeat(MAX_TEXT),
                "xxx".to_owned(),
                String::new(),
                "last".to_owned(),
            ]
        );
    }
}
