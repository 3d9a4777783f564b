//! A part of the configuration file put in force again while the server runs: the file is
//! watched every `tls_reload_interval` as the TLS files are ([`super::tls_reload`]), and when
//! it changes the part is read from it and handed on, each change counted as put in force or
//! refused.

use std::sync::Arc;
use std::time::Duration;

use super::reload_stats::{ReloadStats, ReloadedFiles};
use super::tls_reload::spawn_counted;
use crate::config::ConfigSource;

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
