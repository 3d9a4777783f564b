//! The processes a benchmark measures: each server runs as its own child process, so its CPU
//! time and resident memory can be read from `/proc/<pid>` apart from the load generator's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running child process; killed when dropped.
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    /// The address it listens on (`127.0.0.1:PORT`).
    pub addr: String,
    /// When it was spawned.
    pub spawned_at: Instant,
    /// Whether it serves TLS (its endpoint is `https://`).
    tls: bool,
}

/// A free port on 127.0.0.1 (bound and released; the child binds it right after).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl ChildProcess {
    /// Spawns `program args` with `env`, to listen on `addr`; readiness is for the caller to
    /// check (see `wait_serving`). Its output is discarded.
    pub fn spawn(
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        addr: &str,
    ) -> Result<Self, String> {
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env("RUST_LOG", "warn");
        for (key, value) in env {
            command.env(key, value);
        }
        let spawned_at = Instant::now();
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        Ok(Self {
            child,
            addr: addr.to_owned(),
            spawned_at,
            tls: false,
        })
    }

    /// The same process, known to serve TLS when `tls` is true.
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://` (`https://` when it serves TLS) + the address.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// CPU time (user + system) the process has used so far.
    pub fn cpu_time(&self) -> Duration {
        cpu_time(self.pid()).unwrap_or_default()
    }

    /// Resident memory in bytes.
    pub fn resident_bytes(&self) -> u64 {
        resident_bytes(self.pid()).unwrap_or_default()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`, usually 100).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// utime + stime of a process, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) / clock_ticks()))
}

/// The whole machine's CPU time so far, in clock ticks summed over every CPU, from the first
/// line of `/proc/stat`: `(busy, total)`, busy being user, nice, system, irq and softirq time,
/// and total adding idle, iowait and steal (time the hypervisor kept the CPUs from running).
pub fn machine_ticks() -> Option<(u64, u64)> {
    machine_ticks_of(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn machine_ticks_of(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    let busy = field(0) + field(1) + field(2) + field(5) + field(6);
    let total = busy + field(3) + field(4) + field(7);
    Some((busy, total))
}

/// VmRSS of a process in bytes, from `/proc/<pid>/status`.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The directory holding this benchmark binary, where the other binaries were built too.
pub fn sibling_binary(name: &str) -> PathBuf {
    let here = std::env::current_exe().unwrap_or_default();
    here.parent()
        .map(|dir| dir.join(name))
        .unwrap_or_else(|| PathBuf::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(resident_bytes(pid).is_some_and(|bytes| bytes > 0));
        assert!(cpu_time(pid).is_some());
        assert!(machine_ticks().is_some_and(|(busy, total)| busy <= total && total > 0));
    }

    #[test]
    fn machine_ticks_count_idle_iowait_and_steal_as_not_busy() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  100 2 30 500 7 1 4 9 0 0\ncpu0 50 1 15 250 3 0 2 4 0 0\n";
        assert_eq!(machine_ticks_of(stat), Some((137, 653)));
        assert_eq!(machine_ticks_of("intr 1 2 3\n"), None);
    }
}
