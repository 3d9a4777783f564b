//! The turn's tool calls: each one the model asks for, checked against the agent's tools and
//! invoked through the invocation engine, its result (or its error) made the model's tool
//! result.

use serde_json::{Value, json};

use super::{AgentRunner, Catalog, ToolCallSummary};
use crate::agent::error::AgentError;
use crate::agent::model::ToolCallRequest;
use crate::agent::store::Agent;
use crate::invoke::records::InvocationStatus;
use crate::invoke::{Invocation, InvokeError, reason_of};
use crate::registry::model::MAX_TOOL_NAME_LEN;
use crate::trace_context::TraceContext;

impl AgentRunner {
    /// Calls the tool `call` asks for, as `agent` in the turn `correlation_id`: answers the
    /// result given to the model and the call's summary. A tool the agent may not use, or
    /// arguments that are not an object, are refused without a call.
    pub(super) async fn call_tool(
        &self,
        agent: &Agent,
        correlation_id: &str,
        trace: Option<&TraceContext>,
        catalog: &Catalog,
        call: &ToolCallRequest,
    ) -> Result<(Value, ToolCallSummary), AgentError> {
        let refused = |reason: &str, message: String| {
            // The name is the model's: a tool it may not use may be named at any length.
            let summary = ToolCallSummary {
                tool_name: crate::shown::clipped(&call.name, MAX_TOOL_NAME_LEN).into_owned(),
                service_name: String::new(),
                invocation_id: String::new(),
                status: InvocationStatus::Rejected,
                error_reason: reason.to_owned(),
            };
            Ok((
                json!({"error": {"reason": reason, "message": message}}),
                summary,
            ))
        };
        let Some((service, tool)) = catalog.by_function.get(&call.name) else {
            return refused(
                "TOOL_NOT_ALLOWED",
                format!(
                    "tool {} is not available to this agent",
                    crate::shown::shown(&call.name)
                ),
            );
        };
        if !call.arguments.is_object() {
            return refused(
                "VALIDATION_INPUT",
                format!("the arguments of {} must be a JSON object", call.name),
            );
        }
        let invocation = Invocation {
            tenant: agent.tenant,
            correlation_id: correlation_id.to_owned(),
            tool: tool.clone(),
            service: Some(service.clone()),
            input: call.arguments.clone(),
            input_wire: None,
            input_bytes: crate::json::compact_len(&call.arguments),
            idempotency_key: None,
            retry: None,
            caller_timeout: None,
            trace: trace.cloned(),
            progress: None,
        };
        let summary = |invocation_id: String, status, error_reason: String| ToolCallSummary {
            tool_name: tool.to_string(),
            service_name: service.to_string(),
            invocation_id,
            status,
            error_reason,
        };
        match self.invoker.invoke(invocation).await {
            Ok(invoked) => Ok((
                invoked.output,
                summary(
                    invoked.record.invocation_id.clone(),
                    InvocationStatus::Succeeded,
                    String::new(),
                ),
            )),
            Err(failed) => {
                let Some(record) = failed.record else {
                    return Err(AgentError::Invoke(failed.error));
                };
                let reason = reason_of(&failed.error);
                let detail = match &failed.error {
                    InvokeError::InvalidInput { violations, .. } => json!(
                        violations
                            .iter()
                            .map(|v| format!("{}: {}", v.field, v.description))
                            .collect::<Vec<_>>()
                    ),
                    _ => Value::Null,
                };
                let result = json!({"error": {"reason": reason, "message": failed.error.to_string(), "details": detail}});
                Ok((
                    result,
                    summary(record.invocation_id.clone(), record.status, reason),
                ))
            }
        }
    }
}
