//! `toolplane agent`: create, list, show and chat with agents.

use std::io::Write;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::client_args::{ClientArgs, connect};
use super::{invocation_status_name, label, new_table, timestamp};
use crate::client::{ClientError, ToolplaneClient, every_page};
use crate::outln;
use crate::pb;

/// What `toolplane agent` does.
#[derive(Debug, clap::Subcommand)]
pub enum AgentCommand {
    /// Create an agent.
    Create {
        /// Its name, unique in the tenant.
        name: String,
        /// The model to ask [default: the server's].
        #[arg(long)]
        model: Option<String>,
        /// Instructions sent first on every model call.
        #[arg(long)]
        system_prompt: Option<String>,
        /// A tool the agent may use (repeatable) [default: every tool of the tenant].
        #[arg(long = "allow", value_name = "TOOL")]
        allowed_tools: Vec<String>,
    },
    /// List the agents.
    List,
    /// Show an agent: status, configuration, recent transitions.
    Show {
        /// The agent's id or name.
        agent: String,
    },
    /// Send a message and stream the answer (state changes and tool calls go to stderr).
    Chat {
        /// The agent's id or name.
        agent: String,
        /// The message.
        message: String,
    },
    /// Show an agent's conversation, oldest first.
    Messages {
        /// The agent's id or name.
        agent: String,
    },
    /// Delete an agent and its conversation.
    Delete {
        /// The agent's id or name.
        agent: String,
    },
}

/// Runs `toolplane agent` with the connection `args` give; prints what it shows.
pub async fn run(command: AgentCommand, args: &ClientArgs) -> Result<ExitCode, ClientError> {
    let client = connect(args).await?;
    let shown = match command {
        AgentCommand::Create {
            name,
            model,
            system_prompt,
            allowed_tools,
        } => vec![create(&client, &name, model, system_prompt, allowed_tools).await?],
        AgentCommand::List => list(&client).await?,
        AgentCommand::Show { agent } => {
            let shown = show(&client, &agent).await?;
            if args.json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&json!([agent_json(&shown)])).unwrap_or_default()
                );
            } else {
                outln!("{}", agent_details(&shown));
            }
            return Ok(ExitCode::SUCCESS);
        }
        AgentCommand::Chat { agent, message } => {
            chat(
                &client,
                &agent,
                &message,
                &mut std::io::stdout(),
                &mut std::io::stderr(),
            )
            .await?;
            return Ok(ExitCode::SUCCESS);
        }
        AgentCommand::Messages { agent } => {
            let shown = messages(&client, &agent).await?;
            if args.json {
                let shown: Value = shown.iter().map(message_json).collect();
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&shown).unwrap_or_default()
                );
            } else {
                outln!("{}", messages_table(&shown));
            }
            return Ok(ExitCode::SUCCESS);
        }
        AgentCommand::Delete { agent } => {
            delete(&client, &agent).await?;
            outln!("deleted agent {agent}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    if args.json {
        let shown: Value = shown.iter().map(agent_json).collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&shown).unwrap_or_default()
        );
    } else {
        outln!("{}", agents_table(&shown));
    }
    Ok(ExitCode::SUCCESS)
}

/// The seed's name of an agent state: lowercase, no underscores (`toolcall`).
fn state_name(value: i32) -> String {
    pb::AgentState::try_from(value).map_or_else(
        |_| value.to_string(),
        |v| label(v.as_str_name(), "AGENT_STATE_").replace('_', ""),
    )
}

/// An agent as JSON (the seed's AgentStatus plus configuration).
pub fn agent_json(agent: &pb::Agent) -> Value {
    let status = agent.status.clone().unwrap_or_default();
    json!({
        "id": status.id,
        "name": agent.name,
        "state": state_name(status.state),
        "busy": agent.busy,
        "last_activity": timestamp(status.last_activity.as_ref()),
        "messages_processed": status.messages_processed,
        "model": agent.model,
        "system_prompt": agent.system_prompt,
        "allowed_tools": agent.allowed_tools,
        "recent_transitions": agent.recent_transitions.iter().map(|t| json!({
            "from": state_name(t.from), "to": state_name(t.to), "at": timestamp(t.at.as_ref()), "note": t.note,
        })).collect::<Vec<_>>(),
    })
}

/// A table of agents.
pub fn agents_table(agents: &[pb::Agent]) -> String {
    let mut table = new_table(&["NAME", "ID", "STATE", "MESSAGES", "MODEL", "TOOLS"]);
    for agent in agents {
        let status = agent.status.clone().unwrap_or_default();
        let tools = if agent.allowed_tools.is_empty() {
            "all".to_owned()
        } else {
            agent.allowed_tools.join(",")
        };
        table.add_row(vec![
            agent.name.clone(),
            status.id,
            state_name(status.state),
            status.messages_processed.to_string(),
            model_shown(&agent.model),
            tools,
        ]);
    }
    table.trim_fmt()
}

/// One agent in full: its status and configuration, one field a line, then its recent
/// transitions, oldest first.
pub fn agent_details(agent: &pb::Agent) -> String {
    let status = agent.status.clone().unwrap_or_default();
    let mut fields = new_table(&["FIELD", "VALUE"]);
    fields.add_row(vec!["name".to_owned(), agent.name.clone()]);
    fields.add_row(vec!["id".to_owned(), status.id]);
    fields.add_row(vec!["state".to_owned(), state_name(status.state)]);
    fields.add_row(vec![
        "busy".to_owned(),
        if agent.busy { "yes" } else { "no" }.to_owned(),
    ]);
    fields.add_row(vec![
        "messages processed".to_owned(),
        status.messages_processed.to_string(),
    ]);
    fields.add_row(vec![
        "last activity".to_owned(),
        timestamp(status.last_activity.as_ref()),
    ]);
    fields.add_row(vec!["model".to_owned(), model_shown(&agent.model)]);
    fields.add_row(vec![
        "system prompt".to_owned(),
        or_shown(&prompt_shown(&agent.system_prompt), "(none)"),
    ]);
    fields.add_row(vec![
        "tools".to_owned(),
        or_shown(&agent.allowed_tools.join(","), "all of the tenant's"),
    ]);
    let mut transitions = new_table(&["FROM", "TO", "AT", "NOTE"]);
    for step in &agent.recent_transitions {
        transitions.add_row(vec![
            state_name(step.from),
            state_name(step.to),
            timestamp(step.at.as_ref()),
            one_line(&step.note),
        ]);
    }
    if agent.recent_transitions.is_empty() {
        return format!("{}\n\nno transitions yet", fields.trim_fmt());
    }
    format!("{}\n\n{}", fields.trim_fmt(), transitions.trim_fmt())
}

/// An agent's model as the tables show it: `(the server's)` when it names none.
fn model_shown(model: &str) -> String {
    or_shown(model, "(the server's)")
}

/// `value`, or `otherwise` when it is empty.
fn or_shown(value: &str, otherwise: &str) -> String {
    if value.is_empty() { otherwise } else { value }.to_owned()
}

/// The most characters of a system prompt `agent show` prints; `--json` gives it whole.
const PROMPT_SHOWN: usize = 120;

/// A system prompt on one line, cut to [`PROMPT_SHOWN`] characters saying how long it is.
fn prompt_shown(prompt: &str) -> String {
    let line = one_line(prompt);
    match line.char_indices().nth(PROMPT_SHOWN) {
        Some((cut, _)) => format!(
            "{}... ({} bytes in all; --json shows it whole)",
            &line[..cut],
            prompt.len()
        ),
        None => line,
    }
}

/// `text` on one line: its line breaks and runs of spaces shown as one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A message as JSON: the seed's CanonicalMessage.
pub fn message_json(message: &pb::CanonicalMessage) -> Value {
    json!({
        "id": message.id,
        "role": role_name(message.role),
        "content": message.content,
        "timestamp": timestamp(message.timestamp.as_ref()),
        "metadata": message.metadata,
    })
}

/// A table of a conversation's messages, each on one line (line breaks shown as spaces).
pub fn messages_table(messages: &[pb::CanonicalMessage]) -> String {
    let mut table = new_table(&["TIME", "ROLE", "CONTENT"]);
    for message in messages {
        table.add_row(vec![
            timestamp(message.timestamp.as_ref()),
            role_name(message.role),
            one_line(&message.content),
        ]);
    }
    table.trim_fmt()
}

/// The seed's name of a role: lowercase (`user`).
fn role_name(value: i32) -> String {
    pb::Role::try_from(value).map_or_else(
        |_| value.to_string(),
        |role| label(role.as_str_name(), "ROLE_"),
    )
}

/// An agent's whole conversation, oldest first.
pub async fn messages(
    client: &ToolplaneClient,
    agent: &str,
) -> Result<Vec<pb::CanonicalMessage>, ClientError> {
    every_page(|page_token| async move {
        let page = client
            .agents()
            .list_messages(pb::ListMessagesRequest {
                meta: client.meta(),
                agent_id: agent.to_owned(),
                page_size: 0,
                page_token,
            })
            .await?
            .into_inner();
        Ok((page.messages, page.next_page_token))
    })
    .await
}

/// Deletes an agent, by id or name.
pub async fn delete(client: &ToolplaneClient, agent: &str) -> Result<(), ClientError> {
    client
        .agents()
        .delete_agent(pb::DeleteAgentRequest {
            meta: client.meta(),
            agent_id: agent.to_owned(),
        })
        .await?;
    Ok(())
}

/// Creates an agent.
pub async fn create(
    client: &ToolplaneClient,
    name: &str,
    model: Option<String>,
    system_prompt: Option<String>,
    allowed_tools: Vec<String>,
) -> Result<pb::Agent, ClientError> {
    let request = pb::CreateAgentRequest {
        meta: client.meta(),
        name: name.to_owned(),
        model: model.unwrap_or_default(),
        system_prompt: system_prompt.unwrap_or_default(),
        allowed_tools,
    };
    Ok(client
        .agents()
        .create_agent(request)
        .await?
        .into_inner()
        .agent
        .unwrap_or_default())
}

/// Every agent of the tenant.
pub async fn list(client: &ToolplaneClient) -> Result<Vec<pb::Agent>, ClientError> {
    every_page(|page_token| async move {
        let page = client
            .agents()
            .list_agents(pb::ListAgentsRequest {
                meta: client.meta(),
                page_size: 0,
                page_token,
            })
            .await?
            .into_inner();
        Ok((page.agents, page.next_page_token))
    })
    .await
}

/// One agent, by id or name.
pub async fn show(client: &ToolplaneClient, agent: &str) -> Result<pb::Agent, ClientError> {
    Ok(client
        .agents()
        .get_agent(pb::GetAgentRequest {
            meta: client.meta(),
            agent_id: agent.to_owned(),
        })
        .await?
        .into_inner()
        .agent
        .unwrap_or_default())
}

/// Sends `message` and streams the answer to `out` as it arrives; state changes and tool calls
/// go to `log` (stderr in the CLI). Returns the final answer.
pub async fn chat(
    client: &ToolplaneClient,
    agent: &str,
    message: &str,
    out: &mut impl Write,
    log: &mut impl Write,
) -> Result<pb::ChatCompletionResponse, ClientError> {
    let request = pb::StreamCompleteRequest {
        meta: client.meta(),
        agent_id: agent.to_owned(),
        request: Some(pb::ChatCompletionRequest {
            messages: vec![pb::CanonicalMessage {
                role: pb::Role::User as i32,
                content: message.to_owned(),
                ..Default::default()
            }],
            stream: true,
            ..Default::default()
        }),
    };
    let mut stream = client.agents().stream_complete(request).await?.into_inner();
    let mut completion = None;
    while let Some(event) = stream.message().await? {
        use pb::stream_complete_response::Event;
        match event.event {
            Some(Event::ContentDelta(text)) => {
                let _ = write!(out, "{text}");
                let _ = out.flush();
            }
            Some(Event::Transition(step)) => {
                let _ = writeln!(
                    log,
                    "[{} -> {}]",
                    state_name(step.from),
                    state_name(step.to)
                );
            }
            Some(Event::ToolCall(call)) => {
                let reason = if call.error_reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", call.error_reason)
                };
                let _ = writeln!(
                    log,
                    "[tool {} on {}: {}{reason}]",
                    call.tool_name,
                    call.service_name,
                    invocation_status_name(call.status)
                );
            }
            Some(Event::Completion(done)) => completion = Some(done),
            None => {}
        }
    }
    let _ = writeln!(out);
    let done = completion.unwrap_or_default();
    if let Some(usage) = &done.usage {
        let _ = writeln!(
            log,
            "[model {}; tokens: {} prompt + {} completion = {}]",
            done.model, usage.prompt_tokens, usage.completion_tokens, usage.total_tokens
        );
    }
    Ok(done)
}
