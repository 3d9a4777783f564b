//! The `approved_tools` of `[[mcp_imports]]` read again while the server runs: the
//! configuration file they came from, watched every `tls_reload_interval` as the TLS files
//! are ([`super::tls_reload`]).

use std::sync::Arc;
use std::time::Duration;

use super::reload_stats::{ReloadStats, ReloadedFiles};
use super::tls_reload::spawn_counted;
use crate::mcp::import::{ImportStates, McpImport, McpImportsSource};

/// Watches the configuration file of `source` until `serving` turns false, each change counted
/// in `stats`: the `approved_tools` it gives the running `imports` are put in force in
/// `states` (a file that does not load is refused, and the approvals in force stay).
pub(super) fn watch(
    source: McpImportsSource,
    imports: Vec<McpImport>,
    states: ImportStates,
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
        let changed = states.approve(&imports, &now);
        if changed > 0 {
            tracing::info!(imports = changed, "mcp_imports approved_tools put in force");
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
