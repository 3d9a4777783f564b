//! The deterministic built-in model, for offline use, demos and tests. It is used when no model
//! endpoint is configured, and names itself [`BUILTIN_MODEL`] in every answer.
//!
//! The rule:
//! - After tool results, it reports them: `tool NAME returned: JSON` (one line per result).
//! - A last user message of the form `call TOOL {json}` (the JSON is optional) becomes a call of
//!   TOOL with those arguments, when TOOL is offered; otherwise it answers that the tool is not
//!   available, listing the tools that are.
//! - Anything else is echoed back.
//!
//! Token usage counts whitespace-separated words. Streaming sends the answer word by word.

use futures_util::stream::{self, BoxStream, StreamExt};
use serde_json::{Value, json};

use super::model::{
    LlmProvider, ModelError, ModelReply, ModelRequest, StreamEvent, TOOL_NAME_KEY, ToolCallRequest,
    is_tool_result,
};
use super::types::{Role, TokenUsage};

/// The model name the built-in provider answers with.
pub const BUILTIN_MODEL: &str = "toolplane-builtin-echo";

/// The deterministic built-in model.
#[derive(Debug, Default, Clone)]
pub struct BuiltinModel;

fn words(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}

impl BuiltinModel {
    fn answer(request: &ModelRequest) -> ModelReply {
        let prompt_tokens = request
            .messages
            .iter()
            .map(|m| words(&m.content))
            .fold(0u32, u32::saturating_add);
        let reply = |content: String, tool_calls: Vec<ToolCallRequest>| {
            let usage = TokenUsage::new(prompt_tokens, words(&content)).ok();
            ModelReply {
                content,
                tool_calls,
                model: BUILTIN_MODEL.to_owned(),
                usage,
                attempts: 1,
            }
        };
        let trailing_results: Vec<_> = request
            .messages
            .iter()
            .rev()
            .take_while(|m| is_tool_result(m))
            .collect();
        if !trailing_results.is_empty() {
            let lines: Vec<String> = trailing_results
                .iter()
                .rev()
                .map(|m| {
                    format!(
                        "tool {} returned: {}",
                        m.metadata.get(TOOL_NAME_KEY).map_or("?", String::as_str),
                        m.content
                    )
                })
                .collect();
            return reply(lines.join("\n"), Vec::new());
        }
        let last_user = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.trim())
            .unwrap_or_default();
        let Some(rest) = last_user.strip_prefix("call ") else {
            return reply(last_user.to_owned(), Vec::new());
        };
        let (tool, arguments) = rest
            .trim()
            .split_once(char::is_whitespace)
            .unwrap_or((rest.trim(), ""));
        let arguments = if arguments.trim().is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_str::<Value>(arguments.trim())
        };
        match arguments {
            Err(error) => reply(
                format!("cannot call {tool}: its arguments are not JSON ({error})"),
                Vec::new(),
            ),
            Ok(arguments) if request.tools.iter().any(|offered| offered.name == tool) => reply(
                String::new(),
                vec![ToolCallRequest {
                    id: format!("call_{}", uuid::Uuid::new_v4().simple()),
                    name: tool.to_owned(),
                    arguments,
                }],
            ),
            Ok(_) => {
                let available: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
                reply(
                    format!(
                        "tool {tool} is not available to this agent; available: {}",
                        if available.is_empty() {
                            "none".to_owned()
                        } else {
                            available.join(", ")
                        }
                    ),
                    Vec::new(),
                )
            }
        }
    }
}

#[async_trait::async_trait]
impl LlmProvider for BuiltinModel {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError> {
        Ok(Self::answer(&request))
    }

    async fn stream(
        &self,
        request: ModelRequest,
    ) -> Result<BoxStream<'static, Result<StreamEvent, ModelError>>, ModelError> {
        let reply = Self::answer(&request);
        let mut events: Vec<Result<StreamEvent, ModelError>> = reply
            .content
            .split_inclusive(' ')
            .map(|piece| Ok(StreamEvent::Delta(piece.to_owned())))
            .collect();
        events.push(Ok(StreamEvent::Done(reply)));
        Ok(stream::iter(events).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::model::{OfferedTool, tool_result_message};
    use crate::agent::types::CanonicalMessage;

    fn request(messages: Vec<CanonicalMessage>, tools: &[&str]) -> ModelRequest {
        let tools = tools
            .iter()
            .map(|name| OfferedTool {
                name: (*name).to_owned(),
                description: String::new(),
                parameters: json!({}),
            })
            .collect();
        ModelRequest {
            model: None,
            messages,
            tools,
            temperature: None,
            max_tokens: None,
            trace: None,
        }
    }

    #[test]
    fn echoes_calls_and_reports() {
        let echo = BuiltinModel::answer(&request(
            vec![CanonicalMessage::new(Role::User, "hello there".into())],
            &[],
        ));
        assert_eq!(
            (echo.content.as_str(), echo.model.as_str()),
            ("hello there", BUILTIN_MODEL)
        );
        assert_eq!(echo.usage.expect("usage").total_tokens, 4);

        let call = BuiltinModel::answer(&request(
            vec![CanonicalMessage::new(
                Role::User,
                r#"call power {"alpha_matter": 5}"#.into(),
            )],
            &["power"],
        ));
        assert_eq!(call.tool_calls[0].name, "power");
        assert_eq!(call.tool_calls[0].arguments, json!({"alpha_matter": 5}));

        let unavailable = BuiltinModel::answer(&request(
            vec![CanonicalMessage::new(Role::User, "call secret".into())],
            &["power"],
        ));
        assert!(unavailable.tool_calls.is_empty() && unavailable.content.contains("not available"));

        let result = tool_result_message(&call.tool_calls[0], &json!({"kw": 5}));
        let report = BuiltinModel::answer(&request(
            vec![CanonicalMessage::new(Role::User, "x".into()), result],
            &[],
        ));
        assert_eq!(report.content, r#"tool power returned: {"kw":5}"#);
    }
}
