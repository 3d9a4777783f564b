//! The agent tests' helpers: an AgentService client on the test server, and requests and
//! reads of agents.

use tonic::transport::Channel;
use toolplane::pb;
use toolplane::pb::agent_service_client::AgentServiceClient;

use super::*;

pub async fn agents(server: &TestServer) -> AgentServiceClient<Channel> {
    AgentServiceClient::new(server.channel().await)
}

pub fn user(text: &str) -> pb::CanonicalMessage {
    pb::CanonicalMessage {
        role: pb::Role::User as i32,
        content: text.into(),
        ..Default::default()
    }
}

pub fn complete_request(agent: &str, text: &str, correlation: &str) -> pb::CompleteRequest {
    let mut envelope = meta(0).expect("meta");
    envelope.correlation_id = correlation.into();
    pb::CompleteRequest {
        meta: Some(envelope),
        agent_id: agent.into(),
        request: Some(pb::ChatCompletionRequest {
            messages: vec![user(text)],
            ..Default::default()
        }),
    }
}

/// Starts a StreamComplete turn of `agent` for one user message saying `text`; answers the
/// turn's events.
pub async fn stream_turn(
    client: &mut AgentServiceClient<Channel>,
    agent: &str,
    text: &str,
) -> tonic::Streaming<pb::StreamCompleteResponse> {
    client
        .stream_complete(pb::StreamCompleteRequest {
            meta: meta(0),
            agent_id: agent.into(),
            request: Some(pb::ChatCompletionRequest {
                messages: vec![user(text)],
                ..Default::default()
            }),
        })
        .await
        .expect("the turn starts")
        .into_inner()
}

pub async fn create(
    client: &mut AgentServiceClient<Channel>,
    name: &str,
    allowed: &[&str],
) -> pb::Agent {
    client
        .create_agent(pb::CreateAgentRequest {
            meta: meta(0),
            name: name.into(),
            allowed_tools: allowed.iter().map(|t| (*t).to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("agent created")
        .into_inner()
        .agent
        .expect("agent")
}

pub async fn get(client: &mut AgentServiceClient<Channel>, agent: &str) -> pb::Agent {
    client
        .get_agent(pb::GetAgentRequest {
            meta: meta(0),
            agent_id: agent.into(),
        })
        .await
        .expect("agent")
        .into_inner()
        .agent
        .expect("agent")
}

pub async fn messages(
    client: &mut AgentServiceClient<Channel>,
    agent: &str,
) -> Vec<pb::CanonicalMessage> {
    client
        .list_messages(pb::ListMessagesRequest {
            meta: meta(0),
            agent_id: agent.into(),
            ..Default::default()
        })
        .await
        .expect("messages")
        .into_inner()
        .messages
}

pub fn state_of(agent: &pb::Agent) -> i32 {
    agent.status.as_ref().expect("status").state
}
