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
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in processes.map_while(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if among(pid) && is_zombie_of(&stat, me) && !started.contains(&pid) {
            let Ok(pid) = libc::pid_t::try_from(pid) else {
                continue;
            };
            let mut status = 0;
            // SAFETY: waits for one process, a zombie child of this one no session waits for.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                tracing::debug!(pid, "reaped an orphan");
            }
        }
    }
}

/// Whether `/proc/PID/stat`'s `stat` is of a zombie whose parent is `parent`. The command's
/// name, in parentheses, may hold anything: the fields after its last `)` are the state, then
/// the parent's id.
#[cfg(any(target_os = "linux", test))]
fn is_zombie_of(stat: &str, parent: u32) -> bool {
    let Some((_, after)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = after.split_ascii_whitespace();
    fields.next() == Some("Z") && fields.next().and_then(|ppid| ppid.parse().ok()) == Some(parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state and parent are read after the name's last `)`, whatever the name holds.
    #[test]
    fn a_zombie_is_told_by_its_state_and_parent() {
        assert!(is_zombie_of("17 (sleep) Z 1 17 17 0 -1", 1));
        assert!(!is_zombie_of("17 (sleep) S 1 17 17 0 -1", 1), "running");
        assert!(!is_zombie_of("17 (sleep) Z 9 17 17 0 -1", 1), "another's");
        assert!(
            is_zombie_of("17 (a) Z 9 (b) Z 1 17 17", 1),
            "a name with ) Z 9 in it"
        );
        assert!(!is_zombie_of("17 (sleep", 1), "cut short");
    }

    /// A server noted is left to its session until forgotten.
    #[test]
    fn servers_started_are_noted_until_forgotten() {
        Started::starting().note(Some(4_000_001));
        assert!(started().contains(&4_000_001));
        Started::forget(4_000_001);
        assert!(!started().contains(&4_000_001));
        Started::starting().note(None);
    }

    /// The state of the process `pid` (`Z` for a zombie), or `None` once it is gone.
    #[cfg(target_os = "linux")]
    fn state(pid: u32) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, after) = stat.rsplit_once(')')?;
        after.split_whitespace().next().map(str::to_owned)
    }

    /// A zombie child is waited for, unless it is a server started (left to its session)
    /// until that is forgotten.
    #[cfg(target_os = "linux")]
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
        while [orphan, server].map(state) != [Some("Z".into()), Some("Z".into())] {
            assert!(std::time::Instant::now() < give_up, "both end");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let these = |pid| pid == orphan || pid == server;
        reap(these);
        assert_eq!(state(orphan), None, "the orphan is waited for");
        assert_eq!(state(server).as_deref(), Some("Z"), "the server is left");
        Started::forget(server);
        reap(these);
        assert_eq!(state(server), None);
    }
}
