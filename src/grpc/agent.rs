//! The thin adapter for `toolplane.v1.AgentService`; its wire conversions are in
//! `grpc::agent_convert`.

use std::pin::Pin;

use futures_util::Stream;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::accept::accept;
pub use super::agent_convert::{
    MAX_AGENT_NAME_LEN, MAX_ALLOWED_TOOLS, MAX_SYSTEM_PROMPT_BYTES, agent_to_pb,
};
use super::agent_convert::{
    agent_id, config_from_pb, event_to_pb, invalid, message_to_pb, outcome_to_pb, request_from_pb,
    response_to_pb, state_from_pb,
};
use super::page_bytes::fitting;
use super::trace_headers::call_trace;
use crate::agent::runner::AgentRunner;
use crate::agent::turn_events::turn_events;
use crate::pb;
use crate::pb::agent_service_server::AgentService;
use crate::registry::paging;

/// Serves `toolplane.v1.AgentService`.
#[derive(Debug, Clone)]
pub struct AgentApi {
    runner: AgentRunner,
}

impl AgentApi {
    /// An adapter over `runner`.
    pub fn new(runner: AgentRunner) -> Self {
        Self { runner }
    }
}

type TurnStream = Pin<Box<dyn Stream<Item = Result<pb::StreamCompleteResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for AgentApi {
    #[instrument(skip_all, fields(rpc = "CreateAgent", tenant, correlation_id))]
    async fn create_agent(
        &self,
        request: Request<pb::CreateAgentRequest>,
    ) -> Result<Response<pb::CreateAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent = self
            .runner
            .store()
            .create(meta.tenant, config_from_pb(request)?)
            .await?;
        Ok(Response::new(pb::CreateAgentResponse {
            meta: Some(meta.response()),
            agent: Some(agent_to_pb(&agent)),
        }))
    }

    #[instrument(skip_all, fields(rpc = "GetAgent", tenant, correlation_id))]
    async fn get_agent(
        &self,
        request: Request<pb::GetAgentRequest>,
    ) -> Result<Response<pb::GetAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent = self
            .runner
            .store()
            .get(meta.tenant, agent_id(&request.agent_id)?)?;
        Ok(Response::new(pb::GetAgentResponse {
            meta: Some(meta.response()),
            agent: Some(agent_to_pb(&agent)),
        }))
    }

    #[instrument(skip_all, fields(rpc = "ListAgents", tenant, correlation_id))]
    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let (meta, request) = accept(request)?;
        let size = paging::page_size(request.page_size)?;
        let after = paging::decode_sequence_token(&request.page_token, "agents")?;
        let listed = self.runner.store().list(meta.tenant, after, size + 1);
        // At most `size`, and no more than fit in an answer clients read by default (an
        // agent's system prompt and allowed tools may take over a megabyte).
        let pairs = (listed.iter().take(size)).map(|agent| (agent.order, agent_to_pb(agent)));
        let kept = fitting(pairs, |(_, agent)| agent.encoded_len());
        let next_page_token = match kept.last() {
            Some((order, _)) if kept.len() < listed.len() => {
                paging::encode_sequence_token(*order, "agents")
            }
            _ => String::new(),
        };
        Ok(Response::new(pb::ListAgentsResponse {
            meta: Some(meta.response()),
            agents: kept.into_iter().map(|(_, agent)| agent).collect(),
            next_page_token,
        }))
    }

    #[instrument(skip_all, fields(rpc = "DeleteAgent", tenant, correlation_id))]
    async fn delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        self.runner
            .store()
            .delete(meta.tenant, agent_id(&request.agent_id)?)
            .await?;
        Ok(Response::new(pb::DeleteAgentResponse {
            meta: Some(meta.response()),
        }))
    }

    #[instrument(skip_all, fields(rpc = "TransitionAgent", tenant, correlation_id))]
    async fn transition_agent(
        &self,
        request: Request<pb::TransitionAgentRequest>,
    ) -> Result<Response<pb::TransitionAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent = self
            .runner
            .transition(
                meta.tenant,
                agent_id(&request.agent_id)?,
                state_from_pb(request.to)?,
            )
            .await?;
        Ok(Response::new(pb::TransitionAgentResponse {
            meta: Some(meta.response()),
            agent: Some(agent_to_pb(&agent)),
        }))
    }

    #[instrument(skip_all, fields(rpc = "Complete", tenant, correlation_id))]
    async fn complete(
        &self,
        request: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let trace = call_trace(&request);
        let (meta, request) = accept(request)?;
        let chat = request_from_pb(request.request)?;
        if chat.stream {
            return Err(invalid(
                "request.stream",
                "Complete answers in one piece; use StreamComplete to stream",
            )
            .into());
        }
        let outcome = self
            .runner
            .complete(
                meta.tenant,
                &meta.correlation_id,
                trace.as_ref(),
                agent_id(&request.agent_id)?,
                chat,
                None,
            )
            .await?;
        Ok(Response::new(outcome_to_pb(meta.response(), &outcome)))
    }

    type StreamCompleteStream = TurnStream;

    #[instrument(skip_all, fields(rpc = "StreamComplete", tenant, correlation_id))]
    async fn stream_complete(
        &self,
        request: Request<pb::StreamCompleteRequest>,
    ) -> Result<Response<Self::StreamCompleteStream>, Status> {
        let trace = call_trace(&request);
        let (meta, request) = accept(request)?;
        let chat = request_from_pb(request.request)?;
        agent_id(&request.agent_id)?;
        let (sender, receiver) = mpsc::channel::<Result<pb::StreamCompleteResponse, Status>>(64);
        let (events, mut turn_events) = turn_events();
        let runner = self.runner.clone();
        tokio::spawn(async move {
            let envelope = |event| {
                Ok(pb::StreamCompleteResponse {
                    meta: Some(meta.response()),
                    event: Some(event),
                })
            };
            let turn = runner.complete(
                meta.tenant,
                &meta.correlation_id,
                trace.as_ref(),
                &request.agent_id,
                chat,
                Some(events),
            );
            tokio::pin!(turn);
            // The turn runs until it ends or the client goes away (dropping it undoes the turn),
            // never waiting for the client to read: its events wait in `turn_events` meanwhile.
            let forward = async {
                loop {
                    let Ok(room) = sender.reserve().await else {
                        return;
                    };
                    room.send(envelope(event_to_pb(turn_events.recv().await)));
                }
            };
            let outcome = tokio::select! {
                outcome = &mut turn => outcome,
                () = forward => return,
                () = sender.closed() => return,
            };
            while let Some(event) = turn_events.try_recv() {
                if sender.send(envelope(event_to_pb(event))).await.is_err() {
                    return;
                }
            }
            let last = match outcome {
                Ok(outcome) => envelope(pb::stream_complete_response::Event::Completion(
                    response_to_pb(&outcome.response),
                )),
                Err(error) => Err(Status::from(error)),
            };
            let _ = sender.send(last).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    #[instrument(skip_all, fields(rpc = "ListMessages", tenant, correlation_id))]
    async fn list_messages(
        &self,
        request: Request<pb::ListMessagesRequest>,
    ) -> Result<Response<pb::ListMessagesResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent = self
            .runner
            .store()
            .get(meta.tenant, agent_id(&request.agent_id)?)?;
        let size = paging::page_size(request.page_size)?;
        let query = format!("messages|{}", agent.id);
        let after = paging::decode_sequence_token(&request.page_token, &query)?;
        let data = agent.data();
        let later: Vec<_> = data
            .conversation
            .iter()
            .filter(|stored| after.is_none_or(|after| stored.sequence > after))
            .take(size + 1)
            .collect();
        // A page holds fewer than asked when more would not fit in one answer.
        let page = fitting(
            later
                .iter()
                .take(size)
                .map(|stored| (stored.sequence, message_to_pb(&stored.message))),
            |(_, message)| message.encoded_len(),
        );
        let next_page_token = match page.last() {
            Some((sequence, _)) if page.len() < later.len() => {
                paging::encode_sequence_token(*sequence, &query)
            }
            _ => String::new(),
        };
        let messages = page.into_iter().map(|(_, message)| message).collect();
        Ok(Response::new(pb::ListMessagesResponse {
            meta: Some(meta.response()),
            messages,
            next_page_token,
        }))
    }
}
