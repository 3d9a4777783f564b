//! SIGHUP asks every watch of the files a server reads again while it runs (the TLS files,
//! tenant access and its token files, the configuration file's `[[mcp_imports]]`,
//! `[[tenant_access]]` and call limits; see [`super::tls_reload`]) to read them at once, as
//! `systemctl reload` and `kill -HUP` ask of a daemon: what changed is put in force then,
//! rather than at the next `tls_reload_interval`, also with an interval of `0s`. Without it,
//! SIGHUP's default action ended the process at once, undrained. A bearer token file a
//! client or provider sends from (`BearerAuth::from_file`) is read again by its next call.
//!
//! A signal is the process's, so the requests are too: one channel, which every watch (and
//! token file) of the process follows.

use std::sync::LazyLock;

use tokio::sync::watch;

/// Counts the requests made: each watch reads its files once for any number made since it
/// last did.
static REQUESTS: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::channel(0).0);

/// What changes at each request to read the watched files again ([`watch::Receiver::changed`]
/// completes once for those made since it last did; never with an error).
pub(crate) fn requests() -> watch::Receiver<u64> {
    REQUESTS.subscribe()
}

/// Asks every watch of the process to read its files again.
pub(crate) fn request() {
    REQUESTS.send_modify(|count| *count = count.wrapping_add(1));
}

/// Makes each SIGHUP the process gets from now on a request to read the watched files again,
/// logged at INFO. Call it within a Tokio runtime, before announcing that the server serves
/// (a SIGHUP before would end the process). Elsewhere than Unix there is no SIGHUP, and
/// nothing to do.
pub fn read_again_on_sighup() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP: reading the watched files again");
                request();
            }
        });
    }
    Ok(())
}

// Tested with the watch that follows the requests (`tls_reload`'s tests: the only test that
// makes requests, as every watch of the test process sees them) and through `toolplane serve`
// sent SIGHUP (tests/rate_limit_reload.rs).
