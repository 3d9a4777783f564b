//! A part of the configuration file put in force again while the server runs: the file is
//! watched every `tls_reload_interval` as the TLS files are ([`super::tls_reload`]), and when
//! it changes the part is read from it and handed on, each change counted as put in force or
//! refused. [`watch_configuration`] starts every such watch the server has.

use std::sync::Arc;
use std::time::Duration;

use super::provider_tls::ProviderTls;
use super::reload_stats::{ReloadStats, ReloadedFiles};
use super::server_options::ServerOptions;
use super::server_tls::ServedTls;
use super::serving::ServingState;
use super::tls_reload::spawn_counted;
use crate::access::LiveTenantAccess;
use crate::config::ConfigSource;
use crate::invoke::limits::{RateLimitConfig, RateLimits};
use crate::mcp::import::LiveImports;
use crate::otlp::CollectorTls;

/// What the server puts changes of its configuration files in force in while it runs.
pub(super) struct Reloadable {
    /// The MCP imports running.
    pub imports: LiveImports,
    /// The TLS it serves with, when it serves TLS.
    pub served_tls: Option<ServedTls>,
    /// The TLS it calls providers with.
    pub provider_tls: ProviderTls,
    /// The TLS it exports spans with, when it exports them over TLS.
    pub collector_tls: Option<CollectorTls>,
    /// Who may call it.
    pub access: Arc<LiveTenantAccess>,
    /// The call limits in force.
    pub limits: Arc<RateLimits>,
}

/// Watches, every `options.tls_reload_interval` (never when it is zero) and when asked to
/// (SIGHUP, [`super::hangups`]) until the server stops serving, the files of `options` that
/// may change while it runs: the MCP imports, the TLS files, tenant access and the rate
/// limits, each change put in force in `live` and counted in `stats`.
pub(super) fn watch_configuration(
    options: &ServerOptions,
    live: Reloadable,
    stats: &Arc<ReloadStats>,
    serving: &ServingState,
) {
    let interval = options.tls_reload_interval;
    if let Some(source) = options.mcp_imports_source.clone() {
        super::import_reload::watch(source, live.imports, interval, stats, &serving.subscribe());
    }
    super::tls_reload::watch_all(
        live.served_tls.zip(options.tls.clone()),
        (live.provider_tls, options.provider_tls.clone()),
        live.collector_tls,
        interval,
        stats,
        &serving.subscribe(),
    );
    super::access_reload::watch(
        live.access,
        options.tenant_access_source.clone(),
        interval,
        stats,
        &serving.subscribe(),
    );
    if let Some(source) = options.rate_limits_source.clone() {
        let limits = live.limits;
        let apply = move |config: RateLimitConfig| {
            if limits.reconfigure(&config) {
                tracing::info!("rate limits changed in the configuration file put in force");
            }
            Ok(())
        };
        watch(
            source,
            ReloadedFiles::RateLimitsConfig,
            apply,
            interval,
            stats,
            &serving.subscribe(),
        );
    }
}

/// Watches the file of `source` until `serving` turns false: on each change, the part read
/// from it is given to `apply`, and the change is counted in `stats` as `files`, refused when
/// the file does not load or `apply` refuses it (what was in force then stays).
pub(super) fn watch<T: 'static>(
    source: ConfigSource<T>,
    files: ReloadedFiles,
    apply: impl Fn(T) -> Result<(), String> + Send + Sync + 'static,
    interval: Duration,
    stats: &Arc<ReloadStats>,
    serving: &tokio::sync::watch::Receiver<bool>,
) {
    let ConfigSource {
        file,
        file_read,
        read,
    } = source;
    spawn_counted(
        files,
        move || vec![file.clone()],
        Some(vec![Some(file_read)]),
        stats,
        interval,
        move || apply(read()?),
        serving,
    );
}
