//! Tenant access read again while the server runs: the token files of the rules in force, and
//! the configuration file the rules came from, each watched every `tls_reload_interval` as the
//! TLS files are ([`super::tls_reload`]).

use std::sync::Arc;
use std::time::Duration;

use super::reload_stats::{ReloadStats, ReloadedFiles};
use super::tls_reload::spawn_counted;
use crate::access::{LiveTenantAccess, TenantAccess, TenantAccessSource};

/// Watches, until `serving` turns false, each change counted in `stats`: the token files of
/// the rules in force (read again when they change), and the configuration file of `source`
/// (the rules read from it put in force when it changes, also on a server that started
/// without rules; see [`LiveTenantAccess::replace`]).
pub(super) fn watch(
    live: Arc<LiveTenantAccess>,
    source: Option<TenantAccessSource>,
    interval: Duration,
    stats: &Arc<ReloadStats>,
    serving: &tokio::sync::watch::Receiver<bool>,
) {
    if source.is_some() || !live.token_files().is_empty() {
        let (files, read) = (Arc::clone(&live), live.token_files_read());
        let live = Arc::clone(&live);
        spawn_counted(
            ReloadedFiles::TenantAccessTokenFiles,
            move || files.token_files(),
            Some(read),
            stats,
            interval,
            move || live.reload_token_files(),
            serving,
        );
    }
    let Some(source) = source else {
        return;
    };
    let apply = move |rules: TenantAccess| live.replace(rules);
    super::config_watch::watch(
        source,
        ReloadedFiles::TenantAccessConfig,
        apply,
        interval,
        stats,
        serving,
    );
}
