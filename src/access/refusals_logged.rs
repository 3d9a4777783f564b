//! Refused calls in the log: each call tenant access refuses is logged at INFO (`call
//! refused`, or `MCP request refused` at the MCP endpoint) with why, up to [`REFUSALS_BURST`]
//! in each [`REFUSALS_WINDOW`] for the whole process; past it the rest of the window's are
//! counted, not logged ([`crate::log_budget`]), with a WARN (field `limit`) as they begin and
//! another (field `left_out`) when the window ends. A caller retrying a refused call without
//! pause, or any caller that can reach the port sending tokens at random, would otherwise
//! write a line per call: an unauthenticated way to fill the disk or the log shipper. The
//! metrics count every refusal whatever the log says (`grpc_server_handled_total` by code,
//! `toolplane_mcp_requests_refused_total`).

use std::sync::LazyLock;
use std::time::Duration;

use super::AccessError;
use crate::log_budget::{LogBudget, OverBudget};

/// The most refusals logged in a [`REFUSALS_WINDOW`].
pub const REFUSALS_BURST: u32 = 100;
/// The window [`REFUSALS_BURST`] counts in.
pub const REFUSALS_WINDOW: Duration = Duration::from_secs(10);

/// The log is the process's, so the budget is too: one for every server it runs.
static REFUSALS: LazyLock<LogBudget> =
    LazyLock::new(|| LogBudget::new(REFUSALS_BURST, REFUSALS_WINDOW, RefusalLog));

/// Where a call was refused.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RefusedAt {
    /// A gRPC call.
    Grpc,
    /// A request to the MCP endpoint.
    Mcp,
}

/// Logs that a call was refused, and why (`refused`), within the process's budget.
pub(crate) fn log_refused(refused: &AccessError, at: RefusedAt) {
    if !REFUSALS.allows() {
        return;
    }
    match at {
        RefusedAt::Grpc => tracing::info!(%refused, "call refused"),
        RefusedAt::Mcp => tracing::info!(%refused, "MCP request refused"),
    }
}

/// What is said of refusals over the budget.
struct RefusalLog;

impl OverBudget for RefusalLog {
    fn limit_reached(&self, burst: u32, window: Duration) {
        tracing::warn!(
            limit = burst,
            ?window,
            "more calls were refused than the log takes in a window: the rest of this window's refusals are counted in the metrics, not logged"
        );
    }

    fn left_out(&self, count: u64) {
        tracing::warn!(
            left_out = count,
            "refused calls were not logged, over the limit of their window"
        );
    }
}
