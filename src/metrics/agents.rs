//! The agents' metrics: agents by state, turns running, the size of their conversations, and
//! how their model calls have fared.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::{counter_by, gauge};
use crate::agent::model_calls::ModelCallCounts;
use crate::agent::store::AgentStore;
use crate::agent::types::AgentState;

/// Writes the agents' families: agents by state, turns running, conversations' sizes, and
/// the model calls.
pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    agents: &AgentStore,
    calls: &ModelCallCounts,
) -> Result<(), std::fmt::Error> {
    let totals = agents.totals();
    let mut by_state = encoder.encode_descriptor(
        "toolplane_agents",
        "Agents, across tenants, by their state.",
        None,
        MetricType::Gauge,
    )?;
    for (state, count) in AgentState::ALL.iter().zip(totals.by_state) {
        let labels = [("state", state.to_string())];
        by_state
            .encode_family(&labels)?
            .encode_gauge(&i64::try_from(count).unwrap_or(i64::MAX))?;
    }
    gauge(
        encoder,
        "toolplane_agent_turns_running",
        "Agents with a turn (Complete or StreamComplete) running.",
        totals.busy,
    )?;
    gauge(
        encoder,
        "toolplane_agent_conversation_messages",
        "Messages the agents' conversations hold, across tenants.",
        totals.messages,
    )?;
    gauge(
        encoder,
        "toolplane_agent_conversation_bytes",
        "Bytes of the messages the agents' conversations hold (content and metadata), across tenants.",
        totals.conversation_bytes,
    )?;
    encoder
        .encode_descriptor(
            "toolplane_agent_save_failures",
            "Changes to agents (a creation, a finished turn, a transition, a deletion) refused \
             because the agent's file in agents_path could not be written or removed.",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, u64>(&agents.save_failures(), None)?;
    encode_model_calls(encoder, calls)
}

fn encode_model_calls(
    encoder: &mut DescriptorEncoder,
    calls: &ModelCallCounts,
) -> Result<(), std::fmt::Error> {
    counter_by(
        encoder,
        "toolplane_agent_model_calls",
        "The agents' model calls, by outcome (answered: the turn used the answer; failed: the \
         model could not be reached, answered an error, or gave an answer toolplane does not \
         use). A call tried again counts once.",
        "outcome",
        [("answered", calls.answered), ("failed", calls.failed)],
    )?;
    encoder
        .encode_descriptor(
            "toolplane_agent_model_call_retries",
            "Attempts the agents' model calls made again, after no connection or an answer of \
             408, 409, 429 or 5xx (model_max_retries).",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, u64>(&calls.retries, None)?;
    counter_by(
        encoder,
        "toolplane_agent_model_tokens",
        "Tokens the models reported using in the answers of the agents' model calls, by kind \
         (prompt, completion).",
        "kind",
        [
            ("prompt", calls.prompt_tokens),
            ("completion", calls.completion_tokens),
        ],
    )
}
