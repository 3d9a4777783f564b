//! The `[[mcp_imports]]` entries read again while the server runs: the configuration file they
//! came from, watched every `tls_reload_interval` as the TLS files are
//! ([`super::tls_reload`]), and each change put in force by [`LiveImports::apply`].

use std::sync::Arc;
use std::time::Duration;

use super::reload_stats::{ReloadStats, ReloadedFiles};
use super::tls_reload::spawn_counted;
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
    let McpImportsSource {
        file,
        file_read,
        read,
    } = source;
    let rebuild = move || {
        let now = read()?;
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
    spawn_counted(
        ReloadedFiles::McpImportsConfig,
        move || vec![file.clone()],
        Some(vec![Some(file_read)]),
        stats,
        interval,
        rebuild,
        serving,
    );
}
