//! toolplane as PID 1 of its PID namespace, as the `ENTRYPOINT` of a container without an init
//! (`deploy/Dockerfile`'s image): the kernel makes it the parent of every orphan there, and it
//! reaps the orphans of the MCP servers it starts, which stayed zombies. Run in a namespace of
//! its own made with `unshare` (as root, as the test script runs here); skipped, saying so,
//! where no PID namespace can be made.

use crate::common;

use std::process::{Command, Stdio};

use common::mcp_server::PythonMcpServer;
use common::process::{ChildGuard, stat_fields, wait_until};

/// Whether `unshare` makes a PID namespace here (it needs root).
fn namespaces_can_be_made() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The processes whose parent is `parent`, with their states.
fn children_of(parent: &str) -> Vec<(String, String)> {
    let processes = std::fs::read_dir("/proc").expect("/proc");
    let mut children = Vec::new();
    for entry in processes.map_while(Result::ok) {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if let Some(fields) = stat_fields(&pid)
            && fields.get(1).map(String::as_str) == Some(parent)
        {
            children.push((pid, fields[0].clone()));
        }
    }
    children
}

/// The orphans a started server leaves (one in its process group, one in a session of its own)
/// are reaped once they end, and the server is imported; killed, it is reaped and another
/// started in its place. (Whether the reaper or the server's session waits for the server is
/// not seen from outside: the reaper leaves it to the session, so that its status is not taken
/// from it.)
#[test]
fn as_pid_one_toolplane_reaps_the_orphans_of_the_servers_it_starts() {
    let Some(server) = PythonMcpServer::stdio_command() else {
        return;
    };
    if !namespaces_can_be_made() {
        eprintln!("skipped: unshare cannot make a PID namespace here (it needs root)");
        return;
    }
    let dir = tempfile::tempdir().expect("a directory");
    let (grouped, own) = (dir.path().join("grouped"), dir.path().join("own"));
    // Each helper is started by a shell that ends at once, so it is orphaned; it notes its end.
    let launcher = format!(
        "( (sleep 0.3; touch {}) & ); (setsid sh -c 'sleep 0.3; touch {}' &); exec \"$@\"",
        grouped.display(),
        own.display()
    );
    let mut command = vec!["sh".to_owned(), "-c".to_owned(), launcher, "sh".to_owned()];
    command.extend(server);
    let config = dir.path().join("toolplane.toml");
    let command = toml::Value::from(command).to_string();
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\n[[mcp_imports]]\nservice = \"alpha\"\ncommand = {command}\n"
        ),
    )
    .expect("written");
    let log = dir.path().join("log");
    let written = std::fs::File::create(&log).expect("a log");
    let unshare = Command::new("unshare")
        .args(["--pid", "--mount-proc", "--kill-child"])
        .arg(env!("CARGO_BIN_EXE_toolplane"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(written.try_clone().expect("the log"))
        .stderr(written)
        .spawn()
        .map(ChildGuard)
        .expect("unshare starts");
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the server's tools imported", || {
        logged().contains("MCP server's tools imported")
    });
    assert!(logged().contains("runs as PID 1"), "{}", logged());
    wait_until("both helpers ended", || grouped.exists() && own.exists());
    let unshare_pid = unshare.0.id().to_string();
    let toolplane = children_of(&unshare_pid);
    let [(toolplane, _)] = &toolplane[..] else {
        panic!("toolplane alone under unshare: {toolplane:?}");
    };
    wait_until("no zombie left", || {
        children_of(toolplane).iter().all(|(_, state)| state != "Z")
    });
    let children = children_of(toolplane);
    let [(server, _)] = &children[..] else {
        panic!("the server alone runs: {children:?}");
    };
    assert!(!logged().contains("cannot list"), "{}", logged());
    // The server ends: its session waits for it, and the import starts another.
    let killed = Command::new("kill").args(["-KILL", server]).status();
    assert!(killed.expect("kill runs").success());
    wait_until("another server started, the ended one reaped", || {
        let children = children_of(toolplane);
        children.len() == 1 && children[0].0 != *server && children[0].1 != "Z"
    });
}
