//! The real `toolplane` binary as a child process on 127.0.0.1:0, and the test-only peers
//! installed by `scripts/test.sh` into `.tools/`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `toolplane serve` child process; killed when dropped if still running.
pub struct ServerProcess {
    pub child: Child,
    pub addr: String,
    /// Every line the server has written to stderr so far.
    log: KeptLog,
    /// With [`Self::start_with_unread_log`], dropped to read the server's stderr again.
    _read_log: Option<std::sync::mpsc::Sender<()>>,
}

impl ServerProcess {
    /// Starts `toolplane serve` on a free loopback port and waits until it listens.
    pub fn start(extra_env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolplane"));
        command.args(["serve", "--listen", "127.0.0.1:0"]);
        Self::spawn(command, extra_env)
    }

    /// Starts `toolplane serve` as [`Self::start`] does, allowed at most `descriptors` open
    /// file descriptors (the shell's `ulimit -n`, whose process `exec`s the server).
    pub fn start_with_descriptor_limit(descriptors: u32, extra_env: &[(&str, &str)]) -> Self {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            &format!("ulimit -n {descriptors} && exec \"$0\" serve --listen 127.0.0.1:0"),
            env!("CARGO_BIN_EXE_toolplane"),
        ]);
        Self::spawn(command, extra_env)
    }

    /// Starts `toolplane serve` as [`Self::start`] does, its stderr read no further than the
    /// line announcing its address (until the handle is dropped), as a log shipper that stalled
    /// would leave it: once the pipe's buffer is full, a write to it waits.
    pub fn start_with_unread_log(extra_env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolplane"));
        command.args(["serve", "--listen", "127.0.0.1:0"]);
        let (read_log, stalled) = std::sync::mpsc::channel::<()>();
        let mut server = Self::spawn_reading(command, extra_env, Some(stalled));
        server._read_log = Some(read_log);
        server
    }

    fn spawn(command: Command, extra_env: &[(&str, &str)]) -> Self {
        Self::spawn_reading(command, extra_env, None)
    }

    /// Spawns `command`; its stderr is read by a thread of its own, which, with `stalled`,
    /// stops after the address until `stalled`'s sender is dropped.
    fn spawn_reading(
        mut command: Command,
        extra_env: &[(&str, &str)],
        stalled: Option<std::sync::mpsc::Receiver<()>>,
    ) -> Self {
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        // The tests register endpoints that serve nothing: checked, they would fail the
        // provider health checks (every 5 s by default) and their services turn NOT_SERVING,
        // sooner or later in a test as the machine is busy. As in the in-process `TestServer`,
        // the checks wait a day, unless a test sets them in its environment (set after this;
        // the environment overrides a config file, so a config file cannot set them here).
        command.env("TOOLPLANE_PROVIDER_HEALTH_INTERVAL", "24h");
        // The tests' own switch is no setting: the server would warn of it.
        command.env_remove(REQUIRE_PEERS);
        for (key, value) in extra_env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start toolplane serve");
        let stderr = child.stderr.take().expect("stderr piped");
        let (found, address) = std::sync::mpsc::channel();
        let log = KeptLog::default();
        let kept = log.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                kept.push(line.clone());
                if !sent && let Some(addr) = serving_address(&line) {
                    let _ = found.send(addr);
                    sent = true;
                    if let Some(stalled) = &stalled {
                        let _ = stalled.recv();
                    }
                }
            }
        });
        let addr = address
            .recv_timeout(Duration::from_secs(20))
            .expect("server reports its address");
        Self {
            child,
            addr,
            log,
            _read_log: None,
        }
    }

    /// Starts `toolplane serve` with the config file `config` (`{dir}` in it is the
    /// directory holding it), `files` (name, content) beside it and `env` set; the directory
    /// lives as long as the answered handle.
    pub fn start_with_config(
        config: &str,
        files: &[(&str, &str)],
        env: &[(&str, &str)],
    ) -> (Self, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temporary directory");
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).expect("write a file");
        }
        let file = dir.path().join("toolplane.toml");
        let config = config.replace("{dir}", dir.path().to_str().expect("a UTF-8 path"));
        std::fs::write(&file, config).expect("write the config");
        let file = file.to_str().expect("a UTF-8 path").to_owned();
        let mut env = env.to_vec();
        env.push(("TOOLPLANE_CONFIG", &file));
        (Self::start(&env), dir)
    }

    /// The lines the server has logged so far that contain `needle`.
    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        self.log.lines_with(needle)
    }

    /// The address the first line logged with `message` names (`address=...`): where a side
    /// port (metrics, MCP) listens.
    pub fn logged_address(&self, message: &str) -> String {
        let lines = self.log_lines_with(message);
        lines
            .first()
            .and_then(|line| line.split("address=").nth(1))
            .map(|address| address.trim().to_owned())
            .unwrap_or_else(|| panic!("{message}: the address is logged: {lines:?}"))
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGHUP (the server reads the files it watches again).
    pub fn hang_up(&self) {
        Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("send SIGHUP");
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("send SIGTERM");
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().expect("poll child") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("toolplane did not exit within 10 s of SIGTERM");
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The lines a child process has logged so far (read on a thread of the test's), shared.
#[derive(Clone, Default)]
pub struct KeptLog(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl KeptLog {
    /// Keeps `line`.
    pub fn push(&self, line: String) {
        self.0.lock().expect("log lock").push(line);
    }

    /// The lines kept that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        let log = self.0.lock().expect("log lock");
        log.iter()
            .filter(|line| line.contains(needle))
            .cloned()
            .collect()
    }
}

/// The gRPC address a log line says the server serves at, in either log format.
fn serving_address(line: &str) -> Option<String> {
    if let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) {
        let fields = &entry["fields"];
        return (fields["message"] == "toolplane serving")
            .then(|| fields["address"].as_str().map(str::to_owned))
            .flatten();
    }
    let address = line
        .split("toolplane serving")
        .nth(1)?
        .split("address=")
        .nth(1)?;
    Some(address.trim().to_owned())
}

/// Replaces the file at `path` with `text` as a ConfigMap update does: written beside it,
/// then renamed over it, so a server watching it never reads half a file. (A file rewritten
/// in place is read once it settles: `config::reload`'s unit tests cover that, where no
/// busy machine can stall the writer between truncating and writing.)
pub fn replace_file(path: &std::path::Path, text: &str) {
    let mut next = path.as_os_str().to_owned();
    next.push(".next");
    std::fs::write(&next, text).expect("write the new file");
    std::fs::rename(&next, path).expect("replace the file");
}

/// The fields of `/proc/PID/stat` after the command's name: the state, the parent, ...
pub fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after) = stat.rsplit_once(')')?;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// Whether the process `pid` runs (is neither gone nor ended and waiting to be reaped).
pub fn running(pid: &str) -> bool {
    stat_fields(pid).is_some_and(|fields| fields.first().is_some_and(|state| state != "Z"))
}

/// Polls `done` every 50 ms until it holds; fails the test with `what` after 20 s.
pub fn wait_until(what: &str, done: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < give_up, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process killed (SIGTERM, then SIGKILL) when dropped.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Starts the example `structs-provider` registering with `control_plane`.
    pub fn structs_provider(control_plane: &str) -> Self {
        Self::structs_provider_with(control_plane, &[])
    }

    /// As [`Self::structs_provider`], with `extra_args` on its command line.
    pub fn structs_provider_with(control_plane: &str, extra_args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_structs-provider"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--control-plane",
                control_plane,
                "--ttl",
                "5s",
            ])
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start structs-provider");
        Self(child)
    }

    /// Sends SIGHUP (the example provider reads its TLS and token files again).
    pub fn hang_up(&self) {
        let sent = Command::new("kill")
            .args(["-HUP", &self.0.id().to_string()])
            .status();
        assert!(sent.expect("send SIGHUP").success());
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            for _ in 0..100 {
                if self.0.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Waits (up to 20 s) until the structs-provider's tools pass a pre-flight check.
pub fn wait_for_structs_provider(endpoint: &str) {
    wait_for_structs_provider_with(&["--endpoint", endpoint]);
}

/// As [`wait_for_structs_provider`], the client given `connection` (the endpoint and any
/// TLS flags).
pub fn wait_for_structs_provider_with(connection: &[&str]) {
    let mut preflight = vec![
        "preflight",
        "--require",
        "structs:structs_calculate_power,structs_calculate_proof_of_work",
    ];
    preflight.extend_from_slice(connection);
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while toolplane_cli(&preflight).0 != 0 {
        assert!(
            std::time::Instant::now() < give_up,
            "structs-provider never registered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `toolplane invoke structs_calculate_damage` (a laser of power 100 against armor 50)
/// with `connection` (the endpoint and any TLS flags) and checks the example provider's
/// answer: 75 damage.
pub fn invoke_structs_damage(connection: &[&str]) {
    let mut invoke = vec![
        "invoke",
        "structs_calculate_damage",
        "--input",
        r#"{"attacker": {"struct_type": 10, "weapon_type": "laser", "power": 100}, "defender": {"struct_type": 1, "armor": 50, "defense": 25}}"#,
    ];
    invoke.extend_from_slice(connection);
    let (code, stdout, stderr) = toolplane_cli(&invoke);
    assert_eq!(code, 0, "{stderr}");
    let output: serde_json::Value = serde_json::from_str(&stdout).expect("output is JSON");
    assert_eq!(output["damage"], 75);
}

/// Runs the `toolplane` CLI and returns (exit code, stdout, stderr).
pub fn toolplane_cli(args: &[&str]) -> (i32, String, String) {
    run_binary(env!("CARGO_BIN_EXE_toolplane"), args)
}

/// Runs one of the crate's binaries to the end and returns (exit code, stdout, stderr).
pub fn run_binary(binary: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(binary)
        .args(args)
        .env_remove(REQUIRE_PEERS)
        .output()
        .unwrap_or_else(|error| panic!("run {binary}: {error}"));
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The variable that makes a missing peer fail its test ([`peer`]); removed from the
/// environment of the binaries the tests run, as no setting reads it (the server warns of a
/// `TOOLPLANE_*` variable no setting reads).
pub const REQUIRE_PEERS: &str = "TOOLPLANE_REQUIRE_PEERS";

/// A test-only peer installed under `.tools/` by `scripts/test.sh`. When it is missing the test
/// is skipped with a note, unless TOOLPLANE_REQUIRE_PEERS=1 (set by the test script and CI),
/// where a missing peer fails the test.
pub fn peer(relative: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(".tools")
        .join(relative);
    if path.exists() {
        return Some(path);
    }
    if std::env::var(REQUIRE_PEERS).as_deref() == Ok("1") {
        panic!(
            "test peer {} is missing: run scripts/test.sh",
            path.display()
        );
    }
    eprintln!(
        "skipping: test peer {} is not installed (run scripts/test.sh)",
        path.display()
    );
    None
}

/// The contracts' directory, `proto/`, as the test peers load or compile it.
pub fn proto_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto")
}

/// A language runtime the test script installs gRPC packages for.
#[derive(Debug, Clone, Copy)]
pub enum Runtime {
    /// The venv's Python, with grpcio, grpcio-tools, grpcio-health-checking and grpcio-status.
    Python,
    /// Node, with @grpc/grpc-js and @grpc/proto-loader on its `NODE_PATH`.
    Node,
}

/// A command running the test peer script `tests/peers/SCRIPT` with `runtime` and the packages
/// the test script installed for it; `None` (the test is skipped) as [`peer`] says.
pub fn peer_script(runtime: Runtime, script: &str) -> Option<Command> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(script);
    let mut command = match runtime {
        Runtime::Python => Command::new(peer("venv/bin/python")?),
        Runtime::Node => {
            peer("node_modules/@grpc/grpc-js")?;
            let mut node = Command::new("node");
            node.env("NODE_PATH", peer("node_modules")?);
            node
        }
    };
    command.arg(script);
    Some(command)
}
