//! A test peer's script (Python, Node, the MCP conformance suite) run to its end in a process
//! group of its own, with what it printed captured.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a peer's outputs may stay open once it has ended: a process it started and left
/// running holds them, and is then ended with the peer's process group.
const OUTPUTS_CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// Runs a peer's script to the end, killed once it has run `limit`, and answers what it
/// printed (stdout and stderr captured). The peer runs in a process group of its own, which is
/// killed at the limit, and also when its outputs are still open [`OUTPUTS_CLOSE_WITHIN`]
/// after it ended: so nothing it started outlives it, or holds the test up. Blocking: call it
/// off the test's runtime threads.
pub fn run_to_end(mut command: Command, limit: Duration) -> Output {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().expect("start the peer");
    let group = child.id();
    // Read while it runs: a peer printing more than a pipe holds (64 KiB on Linux) would wait
    // for a reader, and be killed at `limit` as if it had hung.
    let stdout = PipeReading::start(child.stdout.take().expect("piped"));
    let stderr = PipeReading::start(child.stderr.take().expect("piped"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the peer") {
            break status;
        }
        if started.elapsed() > limit {
            kill_group(group);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ended = Instant::now();
    while !(stdout.closed() && stderr.closed()) {
        if ended.elapsed() > OUTPUTS_CLOSE_WITHIN {
            kill_group(group);
            // What the group printed until now; a process that left the group may hold the
            // pipes still, and its reader is left to end with them.
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Output {
        status,
        stdout: stdout.taken(),
        stderr: stderr.taken(),
    }
}

/// Sends SIGKILL to every process of the process group `group` (none left is no error).
fn kill_group(group: u32) {
    let group = libc::pid_t::try_from(group).expect("a process id");
    // SAFETY: killpg only sends a signal; it touches no memory of this process.
    unsafe { libc::killpg(group, libc::SIGKILL) };
}

/// A pipe read to its end on a thread of its own, what it gave so far kept where the test can
/// take it before the pipe closes.
struct PipeReading {
    read: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    thread: std::thread::JoinHandle<()>,
}

impl PipeReading {
    /// Starts reading `pipe`.
    fn start(mut pipe: impl Read + Send + 'static) -> Self {
        let read = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&read);
        let thread = std::thread::spawn(move || {
            let mut chunk = [0_u8; 16 * 1024];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => return,
                    Ok(count) => {
                        let mut kept = kept.lock().expect("output lock");
                        kept.extend_from_slice(&chunk[..count]);
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(error) => panic!("read the peer's output: {error}"),
                }
            }
        });
        Self { read, thread }
    }

    /// Whether the pipe has closed (or its reading failed) and all of it is read.
    fn closed(&self) -> bool {
        self.thread.is_finished()
    }

    /// What the pipe gave: all of it, if it has closed.
    fn taken(self) -> Vec<u8> {
        if self.thread.is_finished() {
            self.thread.join().expect("read the peer's output");
        }
        std::mem::take(&mut *self.read.lock().expect("output lock"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::process::{running, wait_until};

    /// A peer printing more than a pipe holds, on both outputs, runs to its end with all of it
    /// read (it was killed at the limit when its output was read only once it had ended).
    #[test]
    fn a_peer_printing_more_than_a_pipe_holds_runs_to_its_end() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2",
        ]);
        let output = run_to_end(command, Duration::from_secs(60));
        assert!(output.status.success(), "{}", output.status);
        assert_eq!(
            (output.stdout.len(), output.stderr.len()),
            (300_000, 200_000)
        );
    }

    /// A process a peer started and left running, holding the peer's outputs open, does not
    /// hold the test up: it is killed with the peer's process group, and what the peer printed
    /// is answered.
    #[test]
    fn a_process_the_peer_left_running_is_ended_with_its_group() {
        let mut command = Command::new("sh");
        command.args(["-c", "sleep 600 & echo $!; echo started >&2"]);
        let output = answered_within(Duration::from_secs(60), move || {
            run_to_end(command, Duration::from_secs(60))
        });
        assert!(output.status.success(), "{}", output.status);
        let left = String::from_utf8(output.stdout).expect("a process id");
        assert_eq!(output.stderr, b"started\n");
        wait_until("the process the peer left is ended", || {
            !running(left.trim())
        });
    }

    /// A peer that outlives the limit is killed with the processes it started.
    #[test]
    fn a_peer_past_its_limit_is_killed_with_what_it_started() {
        let mut command = Command::new("sh");
        command.args(["-c", "sleep 600 & echo $!; sleep 600"]);
        let output = answered_within(Duration::from_secs(60), move || {
            run_to_end(command, Duration::from_secs(1))
        });
        assert!(!output.status.success(), "{}", output.status);
        let left = String::from_utf8(output.stdout).expect("a process id");
        wait_until("the process the peer started is ended", || {
            !running(left.trim())
        });
    }

    /// What `run` answers, run on a thread of its own; the test fails if that takes longer
    /// than `limit` (the thread is left to end by itself).
    fn answered_within(limit: Duration, run: impl FnOnce() -> Output + Send + 'static) -> Output {
        let (answer, answered) = std::sync::mpsc::channel();
        std::thread::spawn(move || answer.send(run()));
        answered
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("run_to_end did not answer within {limit:?}"))
    }
}
