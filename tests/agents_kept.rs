//! Agents kept in `agents_path` through the real server: they and their conversations outlive
//! a restart, a turn that cannot be saved fails and changes nothing, a failed turn is saved
//! undone, and a file the server cannot read stops its start (and `toolplane config check`),
//! naming the file.

use crate::common;

use common::agent_fixture::*;
use common::process::toolplane_cli;
use common::*;
use tonic::Code;
use toolplane::grpc::ServerOptions;
use toolplane::pb;

fn keeping_agents_in(directory: &std::path::Path) -> ServerOptions {
    ServerOptions {
        agents_path: Some(directory.to_owned()),
        ..test_options()
    }
}

async fn complete(
    client: &mut pb::agent_service_client::AgentServiceClient<tonic::transport::Channel>,
    agent: &str,
    text: &str,
) -> Result<pb::CompleteResponse, tonic::Status> {
    client
        .complete(complete_request(agent, text, "kept-1"))
        .await
        .map(tonic::Response::into_inner)
}

fn id_of(agent: &pb::Agent) -> String {
    agent.status.as_ref().expect("status").id.clone()
}

/// What a conversation holds, as (role, content) pairs.
fn said(messages: &[pb::CanonicalMessage]) -> Vec<(i32, String)> {
    (messages.iter())
        .map(|message| (message.role, message.content.clone()))
        .collect()
}

/// An agent, its conversation (ids included), state and counters come back after a restart as
/// they were; a deleted agent does not; the restarted agent's next turn continues the
/// conversation; `config check` counts the agents kept.
#[tokio::test(flavor = "multi_thread")]
async fn agents_and_their_conversations_outlive_a_restart() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let options = keeping_agents_in(directory.path());

    let first = TestServer::start_with(options.clone()).await;
    let mut client = agents(&first).await;
    let helper = create(&mut client, "helper", &[]).await;
    create(&mut client, "scratch", &[]).await;
    complete(&mut client, "helper", "hello there")
        .await
        .expect("first turn");
    complete(&mut client, "helper", "and again")
        .await
        .expect("second turn");
    client
        .delete_agent(pb::DeleteAgentRequest {
            meta: meta(0),
            agent_id: "scratch".into(),
        })
        .await
        .expect("deleted");
    let before = get(&mut client, "helper").await;
    let conversation = messages(&mut client, "helper").await;
    assert_eq!(conversation.len(), 4);
    first.stop().await;

    let second = TestServer::start_with(options).await;
    let mut client = agents(&second).await;
    let after = get(&mut client, "helper").await;
    assert_eq!(
        after, before,
        "the agent as it was: id, state, counters, history"
    );
    assert_eq!(id_of(&after), id_of(&helper));
    assert_eq!(messages(&mut client, "helper").await, conversation);
    let listed = client
        .list_agents(pb::ListAgentsRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner()
        .agents;
    assert_eq!(
        listed
            .iter()
            .map(|agent| agent.name.as_str())
            .collect::<Vec<_>>(),
        ["helper"],
        "the deleted agent stays deleted"
    );
    complete(&mut client, "helper", "still there?")
        .await
        .expect("a turn after the restart");
    let continued = messages(&mut client, "helper").await;
    assert_eq!(continued.len(), 6);
    assert_eq!(said(&continued[..4]), said(&conversation));
    second.stop().await;

    let config = directory.path().join("toolplane.toml");
    std::fs::write(
        &config,
        format!(
            "agents_path = {:?}\n",
            directory.path().display().to_string()
        ),
    )
    .expect("config written");
    let (code, stdout, stderr) =
        toolplane_cli(&["config", "check", "--config", &config.to_string_lossy()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "agents:      {} (1 kept there now)",
            directory.path().display()
        )),
        "{stdout}"
    );
}

/// A turn whose agent file cannot be written fails INTERNAL (reason AGENT_NOT_SAVED, naming the
/// agent) and is counted, and the agent is left as before the turn: same conversation, Idle,
/// not busy, so a turn once the file can be written again succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_cannot_be_saved_fails_and_changes_nothing() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let (server, metrics) =
        TestServer::start_with_metrics(keeping_agents_in(directory.path())).await;
    let failures = async || {
        let url = format!("http://{metrics}/metrics");
        scraped(&http_client(), &url, "toolplane_agent_save_failures_total").await
    };
    let mut client = agents(&server).await;
    let agent = create(&mut client, "helper", &[]).await;
    complete(&mut client, "helper", "hello")
        .await
        .expect("saved turn");
    let before = messages(&mut client, "helper").await;

    // The agent's file is a directory now: it cannot be replaced.
    let file = directory.path().join(format!("{}.json", id_of(&agent)));
    std::fs::remove_file(&file).expect("file removed");
    std::fs::create_dir(&file).expect("directory in its place");
    let refused = complete(&mut client, "helper", "lost?")
        .await
        .expect_err("the turn cannot be saved");
    assert_eq!(refused.code(), Code::Internal, "{refused:?}");
    assert_eq!(reason(&refused), "AGENT_NOT_SAVED");
    assert!(refused.message().contains("agents_path"), "{refused:?}");
    assert!(refused.message().contains(&id_of(&agent)), "{refused:?}");
    assert_eq!(failures().await, 1.0);
    assert_eq!(messages(&mut client, "helper").await, before);
    let now = get(&mut client, "helper").await;
    assert_eq!(state_of(&now), pb::AgentState::Idle as i32);
    assert!(!now.busy);

    std::fs::remove_dir(&file).expect("directory removed");
    complete(&mut client, "helper", "saved now")
        .await
        .expect("a turn that can be saved");
    assert_eq!(messages(&mut client, "helper").await.len(), 4);
    assert!(file.is_file());
    server.stop().await;
}

/// A turn that fails (here its model reports an error) is undone and saved so before its error
/// is answered: the agent is at once Idle and free, and after a restart its history still notes
/// the undone turn, its conversation as before the turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_turn_is_saved_undone() {
    use common::model_server::{Misbehaviour, Mock, config, start_mock};
    let directory = tempfile::tempdir().expect("temporary directory");
    let mock = Mock {
        misbehaving: Misbehaviour::ReportsAnError,
        ..Mock::default()
    };
    let options = ServerOptions {
        model: Some(config(start_mock(mock).await)),
        ..keeping_agents_in(directory.path())
    };
    let first = TestServer::start_with(options.clone()).await;
    let mut client = agents(&first).await;
    create(&mut client, "helper", &[]).await;
    complete(&mut client, "helper", "hello")
        .await
        .expect_err("the model reports an error");
    let undone = get(&mut client, "helper").await;
    assert_eq!(state_of(&undone), pb::AgentState::Idle as i32);
    assert!(!undone.busy, "free when the error is answered");
    let last = undone.recent_transitions.last().expect("noted");
    assert!(last.note.contains("did not finish"), "{last:?}");
    assert!(messages(&mut client, "helper").await.is_empty());
    first.stop().await;

    let second = TestServer::start_with(options).await;
    let mut client = agents(&second).await;
    assert_eq!(
        get(&mut client, "helper").await,
        undone,
        "the undone turn's history kept"
    );
    assert!(messages(&mut client, "helper").await.is_empty());
    second.stop().await;
}

/// A file in `agents_path` that does not read as an agent stops `serve` at its start, and fails
/// `config check`, each naming the file and what is wrong.
#[test]
fn a_file_that_is_not_an_agent_stops_the_start() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let agents = directory.path().join("agents");
    std::fs::create_dir(&agents).expect("directory");
    let bad = agents.join(format!("{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&bad, "{\"format\": 1}").expect("written");
    let config = directory.path().join("toolplane.toml");
    std::fs::write(
        &config,
        format!("agents_path = {:?}\n", agents.display().to_string()),
    )
    .expect("config written");
    let config = config.to_string_lossy().into_owned();
    for args in [
        vec!["serve", "--config", &config, "--listen", "127.0.0.1:0"],
        vec!["config", "check", "--config", &config],
    ] {
        let (code, _, stderr) = toolplane_cli(&args);
        assert_ne!(code, 0, "{args:?}: {stderr}");
        assert!(
            stderr.contains(&bad.display().to_string()),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("missing field"), "{args:?}: {stderr}");
    }
}
