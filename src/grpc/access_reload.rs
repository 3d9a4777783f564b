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
/// (the rules read from it put in force when it changes; see [`LiveTenantAccess::replace`]).
/// On a server that started without rules (`live` is `None`), rules added to the file are
/// logged at WARN, as they take a restart.
pub(super) fn watch(
    live: Option<Arc<LiveTenantAccess>>,
    source: Option<TenantAccessSource>,
    interval: Duration,
    stats: &Arc<ReloadStats>,
    serving: &tokio::sync::watch::Receiver<bool>,
) {
    if let Some(live) = live.clone()
        && (source.is_some() || !live.token_files().is_empty())
    {
        let (files, read) = (Arc::clone(&live), live.token_files_read());
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
    let apply = move |rules: TenantAccess| match &live {
        Some(live) => live.replace(rules),
        None if rules.is_open() => Ok(()),
        None => Err(
            "tenant_access entries were added, but the server started without any and \
             checks no call's tenant: they take effect at a restart"
                .to_owned(),
        ),
    };
    super::config_watch::watch(
        source,
        ReloadedFiles::TenantAccessConfig,
        apply,
        interval,
        stats,
        serving,
    );
}
