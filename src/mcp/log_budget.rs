//! How much of an MCP server's log toolplane's own log takes: at most [`LOG_BURST`] events in
//! each [`LOG_WINDOW`] per server (the lines of a started server's standard error and its
//! session's log messages together), journald's default limit for a service; the rest of a
//! window's are counted, not logged ([`crate::log_budget`]). A server writing without pause (a
//! loop printing an error) would otherwise fill toolplane's log, and the disk or the log
//! shipper behind it, with its lines. When a server first passes the limit in a window a WARN
//! says so (field `limit`); how many were left out is logged (WARN, field `left_out`) when the
//! window ends, with the server's next event after it, or when its standard error ends.

use std::sync::Arc;
use std::time::Duration;

use super::server_logs::TARGET;
use crate::log_budget::{LogBudget, OverBudget};

/// The most events one server's log puts in toolplane's in a [`LOG_WINDOW`].
pub const LOG_BURST: u32 = 10_000;
/// The window [`LOG_BURST`] counts in.
pub const LOG_WINDOW: Duration = Duration::from_secs(30);

/// The log budget of the server `server` (as events name it: its endpoint), shared by its
/// standard error's relay and its session.
pub fn server_log_budget(server: Arc<str>) -> LogBudget {
    LogBudget::new(LOG_BURST, LOG_WINDOW, ServerLog { server })
}

/// What is said of a server over its budget.
struct ServerLog {
    server: Arc<str>,
}

impl OverBudget for ServerLog {
    fn limit_reached(&self, burst: u32, window: Duration) {
        tracing::warn!(target: TARGET, mcp_server = &*self.server, limit = burst, ?window, "the MCP server logs more than the limit in a window: the rest of this window's lines and messages are counted, not logged");
    }

    fn left_out(&self, count: u64) {
        tracing::warn!(target: TARGET, mcp_server = &*self.server, left_out = count, "lines and messages of the MCP server were not logged, over the limit of their window");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WARNs name the server and carry the limit and the count left out as fields.
    #[test]
    fn a_server_over_its_budget_is_named_with_the_numbers() {
        let budget = server_log_budget("mcp+stdio://0/s".into());
        let (allowed, logs) = crate::test_logs::logged(|| {
            let allowed = (0..LOG_BURST + 5).filter(|_| budget.allows()).count();
            budget.ended();
            allowed
        });
        assert_eq!(allowed, LOG_BURST as usize);
        let events: Vec<serde_json::Value> = (logs.lines())
            .map(|line| serde_json::from_str(line).expect("JSON"))
            .collect();
        assert_eq!(events.len(), 2, "{logs}");
        for event in &events {
            assert_eq!(event["level"], "WARN");
            assert_eq!(event["fields"]["mcp_server"], "mcp+stdio://0/s");
        }
        assert_eq!(events[0]["fields"]["limit"], LOG_BURST);
        assert_eq!(events[1]["fields"]["left_out"], 5);
    }
}
