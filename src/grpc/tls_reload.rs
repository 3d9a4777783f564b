//! Certificates renewed on disk take effect without a restart.
//!
//! cert-manager, Vault agents and the like replace certificate and key files in place (a
//! Kubernetes secret volume swaps a symlink) well before the old certificate expires. Every
//! `tls_reload_interval` the files a TLS configuration was built from are read again; when
//! their contents have changed, the configuration is built anew and used for every new
//! connection (open ones keep theirs). A change that does not build (a certificate written
//! before its key, a file that is not PEM) is logged at WARN, once per content, and the
//! previous configuration is kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::outgoing_tls::OutgoingTlsFiles;
use super::provider_tls::ProviderTls;
use super::reload_stats::{ReloadStats, ReloadedFiles};
use super::server_tls::{ServedTls, ServerTlsFiles};
use crate::otlp::CollectorTls;

/// How often the files are read again by default.
pub const DEFAULT_TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The sha256 of each file's content, in order (`None` for a file that cannot be read).
pub type Fingerprint = Vec<Option<[u8; 32]>>;

/// The sha256 of a file's content, as a [`Fingerprint`] holds it.
pub fn content_digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// How long a file read again must read the same for its text to be taken.
const SETTLING: Duration = Duration::from_millis(50);

/// How many times a file is read again for it to settle before it is refused (a second's
/// worth).
const SETTLING_READS: u32 = 20;

/// The text of `path` once it reads the same twice 50 ms apart: how a file watched for
/// changes is read again (the configuration file, token files). A file rewritten in place
/// (truncated, then written, as `echo >`, many editors and `std::fs::write` do) reads empty
/// or half written in between, and taking that would put what it half says in force until
/// the next read: no MCP imports, default rate limits, a token cut short. A file replaced
/// whole (by a rename, as Kubernetes volumes are) settles at once. Blocking: called off the
/// serving threads, as the watch reads files; not at the start, where no writer is expected.
pub fn settled_text(path: &Path) -> std::io::Result<String> {
    let mut text = std::fs::read_to_string(path)?;
    for _ in 0..SETTLING_READS {
        std::thread::sleep(SETTLING);
        let again = std::fs::read_to_string(path)?;
        if again == text {
            return Ok(text);
        }
        text = again;
    }
    Err(std::io::Error::other(format!(
        "it was still being written after {:?}",
        SETTLING * SETTLING_READS
    )))
}

/// What `paths` hold now, as the watch compares them.
pub(crate) fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    paths
        .iter()
        .map(|path| std::fs::read(path).ok().map(|bytes| content_digest(&bytes)))
        .collect()
}

/// Reads `paths` every `interval` until `serving` turns false; when their contents change,
/// calls `rebuild`, which builds and installs the new configuration or says why it cannot.
/// `what` names the configuration in the log. (Tenant access's configuration file is watched
/// the same way.)
pub async fn watch<F>(
    what: &'static str,
    paths: Vec<PathBuf>,
    interval: Duration,
    rebuild: F,
    serving: tokio::sync::watch::Receiver<bool>,
) where
    F: Fn() -> Result<(), String> + Send + Sync + 'static,
{
    let watched = Watched {
        paths: move || paths.clone(),
        read: None,
        counted_in: None,
    };
    watch_changing(what, watched, interval, rebuild, serving).await;
}

/// The files [`watch_changing`] reads.
pub struct Watched<P> {
    /// Asked for the list of files each time (a changed list counts as a change).
    pub paths: P,
    /// What they held when the configuration in use was read from them, so that a change
    /// made before the watch starts is seen; `None` takes what they hold when it starts.
    pub read: Option<Fingerprint>,
    /// Where each change put in use or refused is counted, as which files.
    pub counted_in: Option<(Arc<ReloadStats>, ReloadedFiles)>,
}

impl<P> std::fmt::Debug for Watched<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("read", &self.read)
            .field("counted_in", &self.counted_in)
            .finish_non_exhaustive()
    }
}

/// As [`watch`], for files that change with what they configure (tenant access's token files
/// are those of the rules in force) or were read before the watch starts (the configuration
/// file, read before the server starts).
pub async fn watch_changing<P, F>(
    what: &'static str,
    watched: Watched<P>,
    interval: Duration,
    rebuild: F,
    mut serving: tokio::sync::watch::Receiver<bool>,
) where
    P: Fn() -> Vec<PathBuf> + Send + Sync + 'static,
    F: Fn() -> Result<(), String> + Send + Sync + 'static,
{
    let rebuild = std::sync::Arc::new(rebuild);
    let files = std::sync::Arc::new(watched.paths);
    let mut seen = match watched.read {
        Some(read) => read,
        None => {
            let files = std::sync::Arc::clone(&files);
            tokio::task::spawn_blocking(move || fingerprint(&files()))
                .await
                .unwrap_or_default()
        }
    };
    // An interval of zero, or past what the clock counts, never comes: the files are read
    // only at the start, and when asked to (SIGHUP). (Adding a huge one to the clock panicked
    // the task, leaving a provider whose `--tls-reload-interval` was 500000000000y serving
    // without saying so.)
    let mut ticker = (tokio::time::Instant::now().checked_add(interval))
        .filter(|_| !interval.is_zero())
        .map(|first| {
            let mut ticker = tokio::time::interval_at(first, interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
    let mut requests = super::hangups::requests();
    loop {
        let tick = async {
            match &mut ticker {
                Some(ticker) => {
                    ticker.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tick => {}
            // The requests never end (their sender is the process's).
            Ok(()) = requests.changed() => {}
            () = super::serving::shutting_down(&mut serving) => return,
        }
        let (files, rebuild, previous) = (
            std::sync::Arc::clone(&files),
            std::sync::Arc::clone(&rebuild),
            seen.clone(),
        );
        // File reads and certificate parsing are blocking work, done off the serving threads.
        let checked = tokio::task::spawn_blocking(move || {
            let now = fingerprint(&files());
            let outcome = (now != previous).then(|| rebuild());
            (now, outcome)
        })
        .await;
        let Ok((now, outcome)) = checked else {
            continue;
        };
        seen = now;
        let Some(outcome) = outcome else {
            continue;
        };
        if let Some((stats, files)) = &watched.counted_in {
            stats.record(*files, outcome.is_ok());
        }
        match outcome {
            Ok(()) => tracing::info!(what, "files changed: reloaded"),
            Err(error) => tracing::warn!(
                what,
                %error,
                "files changed but cannot be used; keeping the previous ones"
            ),
        }
    }
}

/// Watches the files of the served TLS (when there is one), of TLS to providers (when it
/// names files) and of TLS to the OTLP collector (when there is one and it names files), each
/// reloaded as [`watch`] says and counted in `stats`, until `serving` turns false. With an
/// interval of zero they are read again only when asked to ([`super::hangups`]).
pub fn watch_all(
    served: Option<(ServedTls, ServerTlsFiles)>,
    providers: (ProviderTls, OutgoingTlsFiles),
    collector: Option<CollectorTls>,
    interval: Duration,
    stats: &Arc<ReloadStats>,
    serving: &tokio::sync::watch::Receiver<bool>,
) {
    if let Some((tls, files)) = served {
        let paths = super::server_tls::watched_files(&files);
        let rebuild = move || tls.reload(&files).map_err(|error| error.to_string());
        spawn_counted(
            ReloadedFiles::ServedTls,
            move || paths.clone(),
            None,
            stats,
            interval,
            rebuild,
            serving,
        );
    }
    let (tls, files) = providers;
    let paths = files.paths();
    if !paths.is_empty() {
        let rebuild = move || tls.reload(&files).map_err(|error| error.to_string());
        spawn_counted(
            ReloadedFiles::ProviderTls,
            move || paths.clone(),
            None,
            stats,
            interval,
            rebuild,
            serving,
        );
    }
    if let Some(tls) = collector {
        let paths = tls.paths();
        if !paths.is_empty() {
            let rebuild = move || tls.reload().map_err(|error| error.to_string());
            spawn_counted(
                ReloadedFiles::CollectorTls,
                move || paths.clone(),
                None,
                stats,
                interval,
                rebuild,
                serving,
            );
        }
    }
}

/// Spawns the watch of the files `paths` names (see [`Watched`]; `read` is what they held when
/// they were read, `None` taking what they hold when the watch starts), logged as `files` are
/// named and counted in `stats`.
pub(super) fn spawn_counted<P, F>(
    files: ReloadedFiles,
    paths: P,
    read: Option<Fingerprint>,
    stats: &Arc<ReloadStats>,
    interval: Duration,
    rebuild: F,
    serving: &tokio::sync::watch::Receiver<bool>,
) where
    P: Fn() -> Vec<PathBuf> + Send + Sync + 'static,
    F: Fn() -> Result<(), String> + Send + Sync + 'static,
{
    let watched = Watched {
        paths,
        read,
        counted_in: Some((Arc::clone(stats), files)),
    };
    tokio::spawn(watch_changing(
        files.what(),
        watched,
        interval,
        rebuild,
        serving.clone(),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload interval past what the clock counts (where the watch panicked adding it to
    /// the clock) or of zero reads the files only at the start and when asked to (SIGHUP):
    /// a change is put in force at the request, not before; the watch ends with the server.
    #[tokio::test(flavor = "multi_thread")]
    async fn with_no_interval_the_files_are_read_again_only_when_asked() {
        for interval in [Duration::MAX, Duration::ZERO] {
            let dir = tempfile::tempdir().expect("temporary directory");
            let file = dir.path().join("cert.pem");
            std::fs::write(&file, "first").expect("written");
            let (serving, serving_changes) = tokio::sync::watch::channel(true);
            let rebuilt = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counted = Arc::clone(&rebuilt);
            let rebuild = move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            };
            let watching = tokio::spawn(watch(
                "test",
                vec![file.clone()],
                interval,
                rebuild,
                serving_changes,
            ));
            // Once the watch has read the files it starts from.
            tokio::time::sleep(Duration::from_millis(300)).await;
            std::fs::write(&file, "second").expect("written");
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                rebuilt.load(std::sync::atomic::Ordering::Relaxed),
                0,
                "{interval:?}"
            );
            super::super::hangups::request();
            let give_up = std::time::Instant::now() + Duration::from_secs(10);
            while rebuilt.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                assert!(
                    std::time::Instant::now() < give_up,
                    "read when asked: {interval:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            serving.send_replace(false);
            tokio::time::timeout(Duration::from_secs(10), watching)
                .await
                .expect("the watch ends with the server")
                .expect("no panic");
        }
    }

    /// A file rewritten in place, a piece at a time, is read as one of its whole versions,
    /// never as the empty or half-written file between them, unless the writer itself stalled
    /// for as long as a file takes to settle, or the reader was held up across two rewrites
    /// (which a busy machine can do: a torn read is then what `settled_text` is documented to
    /// give, not a fault).
    #[test]
    fn a_file_being_rewritten_is_read_once_it_settles() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("toolplane.toml");
        let versions =
            ["rate_limit_per_second = 5\n", "rate_limit_burst = 9\n"].map(|line| line.repeat(40));
        std::fs::write(&file, &versions[0]).expect("write");
        let writing = std::sync::atomic::AtomicBool::new(true);
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                // The longest the file was left half-written between two steps of a rewrite.
                let mut longest_stall = Duration::ZERO;
                for round in 0..6 {
                    // Truncated, then written in four pieces 5 ms apart, then left alone. The
                    // clock starts before the truncation: a writer held up between truncating
                    // (inside `create`) and reading the clock leaves the file empty that long.
                    let mut last_step = std::time::Instant::now();
                    let mut rewritten = std::fs::File::create(&file).expect("truncate");
                    for piece in versions[round % 2].as_bytes().chunks(250) {
                        std::thread::sleep(Duration::from_millis(5));
                        rewritten.write_all(piece).expect("write");
                        longest_stall = longest_stall.max(last_step.elapsed());
                        last_step = std::time::Instant::now();
                    }
                    drop(rewritten);
                    std::thread::sleep(Duration::from_millis(120));
                }
                writing.store(false, std::sync::atomic::Ordering::Relaxed);
                longest_stall
            });
            let (mut reads, mut torn) = (0, Vec::new());
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                let began = std::time::Instant::now();
                let text = settled_text(&file).expect("settles");
                // A reader held up past the writer's rest between rewrites (120 ms) can read
                // the same half-written state in two of them.
                let held_up = began.elapsed() >= Duration::from_millis(120);
                if !versions.contains(&text) && !held_up {
                    torn.push(text);
                }
                reads += 1;
            }
            let longest_stall = writer.join().expect("the writer finished");
            assert!(
                torn.is_empty() || longest_stall >= SETTLING,
                "{} torn reads (the first {:?}) while the writer never stalled for {SETTLING:?} \
                 (at most {longest_stall:?}) and the reader was never held up",
                torn.len(),
                torn.first()
            );
            assert!(reads > 5, "{reads} reads");
        });
    }
}
