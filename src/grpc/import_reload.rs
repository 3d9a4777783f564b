//! The `[[mcp_imports]]` entries read again while the server runs (see
//! [`super::config_watch`]), each change put in force by [`LiveImports::apply`].

use std::sync::Arc;
use std::time::Duration;

use super::reload_stats::{ReloadStats, ReloadedFiles};
use crate::mcp::import::{LiveImports, McpImportsSource};

/// Watches the configuration file of `source` until `serving` turns false, each change counted
/// in `stats`: the imports it gives are made the running `imports` (a file that does not load
/// is refused, and the imports running stay as they are).
pub(super) fn watch(
    source: McpImportsSource,
    imports: LiveImports,
    interval: Duration,
    stats: &Arc<ReloadStats>,
    serving: &tokio::sync::watch::Receiver<bool>,
) {
    let apply = move |now: Vec<_>| {
        let changes = imports.apply(&now);
        if !changes.is_empty() {
            tracing::info!(
                started = changes.started,
                restarted = changes.restarted,
                stopped = changes.stopped,
                approvals_changed = changes.approvals_changed,
                "mcp_imports changed in the configuration file put in force"
            );
        }
        Ok(())
    };
    super::config_watch::watch(
        source,
        ReloadedFiles::McpImportsConfig,
        apply,
        interval,
        stats,
        serving,
    );
}
