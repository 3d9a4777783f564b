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
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://` + the address.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
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
    }
}
