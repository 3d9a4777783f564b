//! Unit tests of agents kept on disk.

use super::*;
use crate::agent::types::{AgentState, CanonicalMessage, Role};

fn config(name: &str) -> AgentConfig {
    AgentConfig {
        name: name.to_owned(),
        model: Some("m".to_owned()),
        system_prompt: Some("be brief".to_owned()),
        allowed_tools: Some(vec!["a_tool".to_owned()]),
    }
}

fn kept(directory: &Path, max_messages: usize) -> Arc<AgentStore> {
    Arc::new(
        AgentStore::new(max_messages, 0, 0)
            .kept_in(directory)
            .expect("agents read"),
    )
}

/// Appends a whole turn to `agent` (a question, a tool call, its result, an answer) and saves
/// it, as a finished turn does.
fn turn(store: &AgentStore, agent: &Agent, number: usize) {
    {
        let mut data = agent.data();
        data.push(CanonicalMessage::new(
            Role::User,
            format!("question {number}"),
        ));
        data.push(CanonicalMessage::new(Role::Assistant, "calling".to_owned()));
        data.push(CanonicalMessage::new(Role::System, "result".to_owned()));
        data.push(CanonicalMessage::new(
            Role::Assistant,
            format!("answer {number}"),
        ));
        data.status.messages_processed += 1;
    }
    store.save(agent).expect("saved");
}

fn contents(agent: &Agent) -> Vec<(u64, String)> {
    (agent.data().conversation.iter())
        .map(|stored| (stored.sequence, stored.message.content.clone()))
        .collect()
}

/// An agent, its conversation, state, history and place in the listing are read back as they
/// were saved; a deleted agent is not; agents created after a restart list after the others;
/// one server at a time holds the directory.
#[tokio::test]
async fn agents_are_read_back_as_saved_and_deleted_ones_stay_gone() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = kept(directory.path(), 100);
    let first = (store.create(TenantId(3), config("first")).await).expect("created");
    let second = (store.create(TenantId(3), config("second")).await).expect("created");
    let gone = (store.create(TenantId(4), config("gone")).await).expect("created");
    turn(&store, &first, 1);
    turn(&store, &first, 2);
    let moved = (store
        .transition(TenantId(3), "second", AgentState::Thinking)
        .await)
        .expect("idle -> thinking");
    store.delete(TenantId(4), "gone").await.expect("deleted");
    assert!(!directory.path().join(format!("{}.json", gone.id)).exists());
    let file = directory.path().join(format!("{}.json", first.id));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&file).expect("kept").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "readable by the server's user only");
    let in_use = AgentStore::new(100, 0, 0).kept_in(directory.path());
    assert!(
        matches!(in_use, Err(AgentFilesError::InUse { .. })),
        "a second server is refused the directory while the first holds it"
    );
    drop(store);

    let again = kept(directory.path(), 100);
    assert_eq!(again.count(), 2);
    let read = again.get(TenantId(3), "first").expect("kept");
    assert_eq!(read.id, first.id);
    assert_eq!(read.config, first.config);
    assert_eq!(read.created_at, first.created_at);
    assert_eq!(contents(&read), contents(&first));
    assert_eq!(read.data().status, first.data().status);
    assert!(!read.data().busy);
    let read_second = again
        .get(TenantId(3), &second.id.to_string())
        .expect("kept");
    assert_eq!(read_second.data().status.state, AgentState::Thinking);
    assert_eq!(read_second.data().transitions, moved.data().transitions);
    assert!(matches!(
        again.get(TenantId(4), "gone"),
        Err(AgentError::NotFound(_))
    ));

    // The next message continues the numbering; the next agent lists last.
    read.data()
        .push(CanonicalMessage::new(Role::User, "more".to_owned()));
    assert_eq!(read.data().conversation.back().expect("pushed").sequence, 9);
    let third = (again.create(TenantId(3), config("third")).await).expect("created");
    let listed: Vec<_> = (again.list(TenantId(3), None, 10).iter())
        .map(|agent| agent.config.name.clone())
        .collect();
    assert_eq!(listed, ["first", "second", "third"]);
    assert!(third.order > read_second.order);
    assert!(matches!(
        again.create(TenantId(3), config("first")).await,
        Err(AgentError::NameTaken(_))
    ));
}

/// A conversation is saved within the bounds (the turns a finished turn drops are not
/// written), and one read by a server with a smaller bound is cut to it, whole turns first.
#[tokio::test]
async fn conversations_are_saved_and_read_within_the_bounds() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = kept(directory.path(), 8);
    let agent = (store.create(TenantId(0), config("a")).await).expect("created");
    for number in 0..3 {
        turn(&store, &agent, number);
    }
    assert_eq!(
        agent.data().len(),
        12,
        "the live bound is applied by the turn itself"
    );
    let file = std::fs::read(directory.path().join(format!("{}.json", agent.id))).expect("read");
    let saved: serde_json::Value = serde_json::from_slice(&file).expect("JSON");
    assert_eq!(saved["conversation"].as_array().map(Vec::len), Some(8));
    drop(store);
    let read = kept(directory.path(), 8);
    let kept_turns = contents(&read.get(TenantId(0), "a").expect("kept"));
    assert_eq!(kept_turns.len(), 8);
    assert_eq!(kept_turns[0], (5, "question 1".to_owned()));

    drop(read);
    let smaller = kept(directory.path(), 4);
    let cut = contents(&smaller.get(TenantId(0), "a").expect("kept"));
    assert_eq!(cut.first(), Some(&(9, "question 2".to_owned())));
    assert_eq!(cut.len(), 4);
}

/// A change that cannot be written is not made: a creation leaves no agent (its name stays
/// free), a transition leaves the state and history as they were, a deletion leaves the agent.
#[tokio::test]
async fn a_change_that_cannot_be_written_is_not_made() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = kept(directory.path(), 100);
    let agent = (store.create(TenantId(0), config("a")).await).expect("created");
    let file = directory.path().join(format!("{}.json", agent.id));

    // The agent's file is a directory now: it can be neither replaced nor removed.
    std::fs::remove_file(&file).expect("file removed");
    std::fs::create_dir(&file).expect("directory in its place");
    let refused = store
        .transition(TenantId(0), "a", AgentState::Thinking)
        .await;
    assert!(matches!(refused, Err(AgentError::NotSaved { id: Some(id), .. }) if id == agent.id));
    assert_eq!(agent.data().status.state, AgentState::Idle);
    assert!(agent.data().transitions.is_empty());
    assert!(!agent.data().busy);
    let refused = store.delete(TenantId(0), "a").await;
    assert!(matches!(refused, Err(AgentError::NotSaved { .. })));
    assert_eq!(
        store.get(TenantId(0), "a").expect("still there").id,
        agent.id
    );
    assert!(!agent.data().busy, "the agent can be used again");

    // With the directory gone, nothing can be created.
    std::fs::remove_dir_all(directory.path()).expect("directory removed");
    let refused = store.create(TenantId(0), config("b")).await;
    let Err(AgentError::NotSaved { problem, .. }) = refused else {
        panic!("creation should fail: {refused:?}");
    };
    assert!(!problem.is_empty());
    assert!(matches!(
        store.get(TenantId(0), "b"),
        Err(AgentError::NotFound(_))
    ));
    assert_eq!(store.count(), 1);
}

/// Opening the directory removes a write a crash cut short and passes over files that are not
/// agents'; a file that does not read as an agent stops the start, naming the file.
#[test]
fn opening_cleans_up_and_refuses_a_file_it_cannot_read() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let torn = directory.path().join(format!("{TEMPORARY_PREFIX}x1y2"));
    std::fs::write(&torn, "{\"format\": 1, \"ten").expect("written");
    std::fs::write(directory.path().join("README"), "not an agent").expect("written");
    let (_, agents) = AgentFiles::open(directory.path()).expect("opened");
    assert!(agents.is_empty());
    assert!(!torn.exists(), "the cut-short write is removed");

    let id = AgentId::new();
    let bad = directory.path().join(format!("{id}.json"));
    std::fs::write(&bad, "{\"format\": 1, \"tenant\": \"zero\"}").expect("written");
    let error = AgentFiles::open(directory.path())
        .expect_err("refused")
        .to_string();
    assert!(error.contains(&bad.display().to_string()), "{error}");
    assert!(error.contains("tenant"), "{error}");
    assert!(
        AgentFiles::read(directory.path()).is_err(),
        "config check reads it the same"
    );
}

/// A file naming another agent than its own name says is refused, as is a later format.
#[test]
fn a_file_must_hold_the_agent_it_is_named_for() {
    let (id, other) = (AgentId::new(), AgentId::new());
    let mut saved = serde_json::json!({
        "format": 1, "tenant": 0,
        "config": {"name": "a", "model": null, "system_prompt": null, "allowed_tools": null},
        "created_at": "2026-01-01T00:00:00Z", "order": 1,
        "status": {"id": id.to_string(), "state": "idle",
                   "last_activity": "2026-01-01T00:00:00Z", "messages_processed": 0},
        "next_sequence": 1, "transitions": [], "conversation": []
    });
    let bytes = |saved: &serde_json::Value| serde_json::to_vec(saved).expect("json");
    assert!(read_agent(id, &bytes(&saved)).is_ok());
    let misnamed = read_agent(other, &bytes(&saved)).expect_err("refused");
    assert!(
        misnamed.contains("not the agent it is named for"),
        "{misnamed}"
    );
    saved["format"] = 2.into();
    let later = read_agent(id, &bytes(&saved)).expect_err("refused");
    assert!(later.contains("format 2"), "{later}");
}

/// Two files that cannot both be agents of one tenant (the same name, or the same place in
/// the listing) stop the start, and fail the reading `config check` does, naming both.
#[tokio::test]
async fn agents_that_clash_stop_the_start() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = kept(directory.path(), 100);
    let agent = (store.create(TenantId(0), config("a")).await).expect("created");
    drop(store);
    let original = directory.path().join(format!("{}.json", agent.id));
    let text = std::fs::read_to_string(&original).expect("read");
    for (from, to) in [("", ""), ("\"name\":\"a\"", "\"name\":\"b\"")] {
        let copy = AgentId::new();
        let copied = text
            .replace(&agent.id.to_string(), &copy.to_string())
            .replace(from, to);
        let path = directory.path().join(format!("{copy}.json"));
        std::fs::write(&path, copied).expect("written");
        let refused = AgentStore::new(100, 0, 0).kept_in(directory.path());
        let Err(AgentFilesError::Clash {
            path: one, other, ..
        }) = refused
        else {
            panic!("the clash should stop the start: {refused:?}");
        };
        let mut named = [one, other];
        named.sort();
        let mut both = [original.clone(), path.clone()];
        both.sort();
        assert_eq!(named, both);
        let checked = AgentFiles::read(directory.path());
        assert!(
            matches!(checked, Err(AgentFilesError::Clash { .. })),
            "{checked:?}"
        );
        std::fs::remove_file(&path).expect("removed");
    }
}

/// A creation whose caller goes away while its file is written still finishes: the agent is
/// kept, saved and free, not left half-made.
#[tokio::test]
async fn a_change_runs_to_its_end_when_its_caller_goes_away() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = kept(directory.path(), 100);
    let creation = store.create(TenantId(0), config("a"));
    tokio::select! {
        biased;
        created = creation => panic!("the file is written on another thread: {created:?}"),
        () = std::future::ready(()) => {}
    }
    let mut waited = 0;
    let agent = loop {
        if let Ok(agent) = store.get(TenantId(0), "a")
            && !agent.data().busy
        {
            break agent;
        }
        assert!(waited < 500, "the creation never finished");
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(
        directory
            .path()
            .join(format!("{}.json", agent.id))
            .is_file()
    );
}

/// Two deletions of one agent at once: the first deletes it, the second finds it gone, as it
/// would a moment later (not busy).
#[tokio::test]
async fn a_second_deletion_at_once_finds_the_agent_gone() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = kept(directory.path(), 100);
    (store.create(TenantId(0), config("a")).await).expect("created");
    let (first, second) = tokio::join!(
        store.delete(TenantId(0), "a"),
        store.delete(TenantId(0), "a")
    );
    first.expect("deleted");
    assert!(matches!(second, Err(AgentError::NotFound(_))), "{second:?}");
    assert_eq!(store.count(), 0);
}
