//! Openings stopped: a server toolplane is starting (a real process, which never answers) is
//! stopped when its session is closed or every opening is stopped, a close stops no opening
//! begun after it, and a use right after a close opens the session anew; the sessions known to
//! be opening are those with openings under way.

use std::path::Path;
use std::time::{Duration, Instant};

use super::super::client::McpCaller;
use super::super::import_config::{McpImport, McpSource};
use super::*;
use crate::envelope::TenantId;
use crate::grpc::provider_tls::ProviderTls;
use crate::registry::ServiceName;

/// An import whose server is `script` run by `sh`.
fn import(script: &str) -> McpImport {
    McpImport {
        service: ServiceName::parse("starting").expect("a service name"),
        source: McpSource::Stdio(StdioServer {
            command: ["sh", "-c", script].map(str::to_owned).into(),
            env: Vec::new(),
        }),
        tenant: TenantId(0),
        refresh_interval: Duration::from_secs(60),
        auth: None,
        approved_tools: None,
    }
}

/// Whether the process `pid` runs (is neither gone nor ended and waiting to be reaped).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// Waits (up to 10 s) until `done`.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < give_up, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A caller whose import's server is `script`, the session's key, and its opening begun (on a
/// task).
fn opening(
    script: &str,
) -> (
    McpCaller,
    SessionKey,
    tokio::task::JoinHandle<Result<Arc<McpSession>, String>>,
) {
    let import = import(script);
    let caller = McpCaller::for_imports(std::slice::from_ref(&import), ProviderTls::default());
    let key = SessionKey::of_import(&import);
    let opening = tokio::spawn({
        let (caller, key) = (caller.clone(), key.clone());
        async move { caller.session(&key).await }
    });
    (caller, key, opening)
}

/// A caller starting a server that writes its pid to a file in `dir` and never answers,
/// the session's key, the opening (on a task) and the server's pid once it runs.
async fn start_silent_server(
    dir: &Path,
) -> (
    McpCaller,
    SessionKey,
    tokio::task::JoinHandle<Result<Arc<McpSession>, String>>,
    String,
) {
    let pid_file = dir.join("pid");
    let (caller, key, opening) =
        opening(&format!("echo $$ > {}; exec sleep 60", pid_file.display()));
    wait_until("the server started", || pid_file.exists()).await;
    let pid = std::fs::read_to_string(&pid_file)
        .expect("the pid")
        .trim()
        .to_owned();
    wait_until("the pid written", || running(&pid)).await;
    (caller, key, opening, pid)
}

/// Checks that `opening` ends at once, saying its session was closed, and that the server
/// `pid` is stopped.
async fn stopped(opening: tokio::task::JoinHandle<Result<Arc<McpSession>, String>>, pid: &str) {
    let ended = tokio::time::timeout(Duration::from_secs(5), opening)
        .await
        .expect("the opening ends at once")
        .expect("no panic");
    let error = ended.expect_err("nothing was opened");
    assert!(error.contains("was closed while it was opening"), "{error}");
    wait_until("the server stopped", || !running(pid)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn closing_a_session_stops_its_server_while_it_starts() {
    let dir = tempfile::tempdir().expect("a directory");
    let (caller, key, opening, pid) = start_silent_server(dir.path()).await;
    caller.close(&key).await;
    stopped(opening, &pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_every_opening_stops_a_server_starting() {
    let dir = tempfile::tempdir().expect("a directory");
    let (caller, _, opening, pid) = start_silent_server(dir.path()).await;
    caller.stop_openings();
    stopped(opening, &pid).await;
}

/// A close stops the openings under way, not those begun after it: the server's own failure
/// (here, its process ending) is what each of them reports.
#[tokio::test]
async fn a_close_stops_no_opening_begun_after_it() {
    let import = import("exit 3");
    let caller = McpCaller::for_imports(std::slice::from_ref(&import), ProviderTls::default());
    let key = SessionKey::of_import(&import);
    for _ in 0..2 {
        let error = caller
            .session(&key)
            .await
            .expect_err("the server ends at once");
        assert!(!error.contains("closed while it was opening"), "{error}");
        assert!(error.contains("exit 3"), "names the server: {error}");
        caller.close(&key).await;
    }
}

/// A session used right after a close opens anew: it joined the opening the close had
/// stopped when that opening's task had not yet seen the stop, and failed with it. The server
/// here never answers its first start and exits at its second.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_used_right_after_a_close_opens_anew() {
    let dir = tempfile::tempdir().expect("a directory");
    for round in 0..60 {
        let started = dir.path().join(format!("started-{round}"));
        let script = format!(
            "if [ -e {started} ]; then exit 3; fi; touch {started}; exec sleep 60",
            started = started.display()
        );
        let (caller, key, opening) = opening(&script);
        wait_until("the server started", || started.exists()).await;
        caller.close(&key).await;
        let error = caller.session(&key).await.expect_err("it exits");
        assert!(error.contains("exit 3"), "round {round}: {error}");
        let first = opening.await.expect("no panic").expect_err("stopped");
        assert!(first.contains("closed while it was opening"), "{first}");
    }
}

/// Closes `key` on a task, and waits (up to 5 s) until the close has stopped `opening`.
async fn closing(
    openings: &Openings,
    key: &SessionKey,
    opening: &OpeningStop,
) -> tokio::task::JoinHandle<()> {
    let stopping = tokio::spawn({
        let (openings, key) = (openings.clone(), key.clone());
        async move { openings.stop(&key).await }
    });
    tokio::time::timeout(Duration::from_secs(5), opening.signal().cancelled())
        .await
        .expect("the close stops the opening");
    stopping
}

/// Waits (up to 5 s) for `stopping` (a close on a task) to complete.
async fn completes(stopping: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("the close completes")
        .expect("no panic");
}

/// A session is known while an opening of it is under way, however many other sessions were
/// opened since (a cache of 10,000 pushed it out, and closing it then stopped nothing), and
/// forgotten once every use that began or joined the opening has let it go; the close waits
/// for those.
#[tokio::test]
async fn an_opening_is_known_until_its_uses_end_however_many_others_began() {
    let openings = Openings::default();
    let key = SessionKey::shared("mcp+http://127.0.0.1:1/first");
    let began = openings.stop_signal(&key);
    let joined = openings.stop_signal(&key);
    for n in 0..20_000 {
        drop(openings.stop_signal(&SessionKey::shared(&format!("mcp+http://other/{n}"))));
    }
    assert_eq!(openings.sessions(), 1, "only the session opening now");
    drop(joined);
    assert_eq!(openings.sessions(), 1, "a use of the opening remains");
    let stopping = closing(&openings, &key, &began).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!stopping.is_finished(), "the close waits for the use");
    drop(began);
    completes(stopping).await;
    assert_eq!(openings.sessions(), 0);
}

/// A use of an opening a close stopped, let go after the session's next opening began, leaves
/// that opening known and unstopped.
#[tokio::test]
async fn a_stopped_opening_let_go_late_leaves_the_next_one_known() {
    let openings = Openings::default();
    let key = SessionKey::shared("mcp+http://127.0.0.1:1/late");
    let stopped = openings.stop_signal(&key);
    let stopping = closing(&openings, &key, &stopped).await;
    let next = openings.stop_signal(&key);
    drop(stopped);
    completes(stopping).await;
    assert_eq!(openings.sessions(), 1, "the next opening is known");
    assert!(!next.signal().is_cancelled());
    drop(next);
    assert_eq!(openings.sessions(), 0);
}
