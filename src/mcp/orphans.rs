//! Reaping orphans when toolplane is its PID namespace's init: PID 1, as the `ENTRYPOINT` of a
//! container run without an init (`deploy/Dockerfile`'s image, in Kubernetes). The kernel makes
//! PID 1 the parent of every process orphaned in the namespace, and a process that ends stays a
//! zombie, holding its process id, until its parent waits for it. A server toolplane starts may
//! leave orphans behind (a helper started in the background by a launcher, one that moved to a
//! session of its own); as PID 1, toolplane left them as zombies for as long as it ran.
//!
//! With [`reap_when_init`], each SIGCHLD has toolplane look through `/proc` for zombies it is
//! the parent of and wait for each, except the servers it started (noted as each starts),
//! which their sessions wait for (tokio's `Child`, through rmcp and process-wrap): waiting for
//! one of those here would take its exit status from its session. Not PID 1, toolplane has no
//! orphans to reap: they go to the namespace's init.
//!
//! Written here because the crate made for a Rust PID 1, `pid1`, starts the program again as
//! its child and stays PID 1 itself, passing on only SIGTERM and SIGINT and killing the child
//! a fixed time (2 s) after SIGTERM: SIGHUP (toolplane's files read again) would be lost and a
//! drain cut short. An init's own reaper, `waitpid(-1)` as in tini, would take the exit
//! statuses of the servers' sessions too.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

/// The process ids of the servers toolplane started whose sessions have not ended.
static STARTED: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

fn started() -> MutexGuard<'static, BTreeSet<u32>> {
    // Each change is one set operation: nothing is left half-done.
    STARTED.lock().unwrap_or_else(|error| error.into_inner())
}

/// Servers being started or started: held while a server is started, so that the reaper does
/// not find it ended before it is noted ([`Started::note`]).
pub(super) struct Started(MutexGuard<'static, BTreeSet<u32>>);

impl Started {
    /// Holds off the reaper while a server is started.
    pub(super) fn starting() -> Self {
        Self(started())
    }

    /// Notes the server `pid`, which its session waits for, and lets the reaper go on.
    pub(super) fn note(mut self, pid: Option<u32>) {
        self.0.extend(pid);
    }

    /// Forgets the server `pid`: its session has ended, and waited for it (or dropped it,
    /// and tokio waits for it, as the reaper may).
    pub(super) fn forget(pid: u32) {
        started().remove(&pid);
    }
}

/// When toolplane is PID 1, reaps, at each SIGCHLD from now on, the zombies it is the parent of
/// that are not servers it started. Call it within a Tokio runtime; elsewhere than Linux, and
/// not as PID 1, it does nothing.
pub fn reap_when_init() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    if std::process::id() == 1 {
        use tokio::signal::unix::{SignalKind, signal};
        let mut ended = signal(SignalKind::child())?;
        tokio::spawn(async move {
            // Those ended before it listened too.
            reap(|_| true);
            while ended.recv().await.is_some() {
                reap(|_| true);
            }
        });
        tracing::info!("toolplane runs as PID 1: it reaps the processes orphaned under it");
    }
    Ok(())
}

/// Waits for each zombie whose parent is this process and that is not a server it started,
/// of those `among` takes (every one, but in a test, where other tests' children are not to
/// be waited for).
#[cfg(target_os = "linux")]
fn reap(among: impl Fn(u32) -> bool) {
    let me = std::process::id();
    let started = started();
    let Ok(processes) = procfs::process::all_processes() else {
        return;
    };
    // A process gone since the listing, or unreadable, is passed over.
    for stat in processes.filter_map(|process| process.ok()?.stat().ok()) {
        let Ok(pid) = u32::try_from(stat.pid) else {
            continue;
        };
        let zombie_of_mine = stat.state == 'Z' && u32::try_from(stat.ppid) == Ok(me);
        if zombie_of_mine && among(pid) && !started.contains(&pid) {
            let mut status = 0;
            // SAFETY: waits for one process, a zombie child of this one no session waits for.
            if unsafe { libc::waitpid(stat.pid, &mut status, libc::WNOHANG) } == stat.pid {
                tracing::debug!(pid, "reaped an orphan");
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The state of the process `pid` (`Z` for a zombie), or `None` once it is gone.
    fn state(pid: u32) -> Option<char> {
        let pid = i32::try_from(pid).ok()?;
        Some(procfs::process::Process::new(pid).ok()?.stat().ok()?.state)
    }

    /// A zombie child is waited for, unless it is a server started (left to its session)
    /// until that is forgotten.
    #[test]
    #[expect(clippy::zombie_processes, reason = "the reaper is to wait for them")]
    fn zombies_are_reaped_but_the_servers_started() {
        use std::process::Command;
        let orphan = Command::new("true").spawn().expect("starts");
        let starting = Started::starting();
        let server = Command::new("true").spawn().expect("starts");
        starting.note(Some(server.id()));
        let (orphan, server) = (orphan.id(), server.id());
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while [orphan, server].map(state) != [Some('Z'), Some('Z')] {
            assert!(std::time::Instant::now() < give_up, "both end");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let these = |pid| pid == orphan || pid == server;
        reap(these);
        assert_eq!(state(orphan), None, "the orphan is waited for");
        assert_eq!(state(server), Some('Z'), "the server is left");
        Started::forget(server);
        reap(these);
        assert_eq!(state(server), None);
    }
}
