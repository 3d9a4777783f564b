//! A `tools/call` outcome in MCP's terms: what the tool answered, a tool error the client's
//! model sees and can act on (`isError`), or a JSON-RPC error for a call that names no tool.
//!
//! As the MCP specification asks, input that does not match the tool's schema, a provider's
//! failure, a timeout and a rate limit are tool errors, so a model can correct itself or try
//! again; an unknown or ambiguous tool name is a protocol error (`-32602`, invalid params).
//! Each answer's `_meta` carries the invocation record's id and, on failure, the reason gRPC
//! callers get in `ErrorInfo`. An imported MCP server's answers, success or tool error, keep
//! the server's own content blocks.

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject};
use serde_json::{Value, json};

use super::tool_call::ServerContent;
use super::tools::meta_keys;
use crate::invoke::{Failed, InvokeError, Invoked, reason_of};
use crate::registry::RegistryError;

/// The `toolplane/error_reason` of an output that does not match its tool's output schema.
pub const OUTPUT_MISMATCH_REASON: &str = "VALIDATION_OUTPUT";

/// The answer to a call that ran (whether or not the tool succeeded). An output that does not
/// match the tool's output schema (passed on to gRPC callers with warnings) is a tool error
/// here, giving the mismatches and the output as text: MCP has a server's structured results
/// match the output schema it lists, and clients check them. An MCP server's answer (an
/// imported tool's) keeps the server's own content blocks, beside the structured content.
pub fn succeeded(invoked: Invoked) -> CallToolResult {
    let mut meta = JsonObject::new();
    meta.insert(
        meta_keys::INVOCATION_ID.into(),
        json!(invoked.record.invocation_id),
    );
    if !invoked.output_conforms {
        let mut text = format!(
            "the output of tool {} does not match its output schema:",
            invoked.record.tool_name
        );
        for warning in &invoked.warnings {
            text.push_str(&format!("\n- {warning}"));
        }
        text.push_str(&format!("\nthe output was: {}", invoked.output));
        meta.insert(
            meta_keys::ERROR_REASON.into(),
            json!(OUTPUT_MISMATCH_REASON),
        );
        return CallToolResult::error(vec![ContentBlock::text(text)])
            .with_meta(Some(MetaObject(meta)));
    }
    if !invoked.warnings.is_empty() {
        meta.insert(meta_keys::WARNINGS.into(), json!(invoked.warnings));
    }
    let result = match invoked.output_wire.as_ref().and_then(ServerContent::of) {
        // An MCP server's answer: its own blocks, beside the structured content it became.
        Some(blocks) => {
            let mut result = CallToolResult::success(blocks.to_vec());
            result.structured_content = Some(invoked.output).filter(Value::is_object);
            result
        }
        None => content_of(invoked.output),
    };
    result.with_meta(Some(MetaObject(meta)))
}

/// An output as MCP content: an object as `structuredContent` (MCP's structured content is
/// an object) and as its JSON text; a string as its text; an array of MCP content blocks (a
/// provider's way to answer images, audio or resources) as those blocks; any other output as
/// its JSON text. (An MCP server's answer keeps its own blocks: [`succeeded`].)
fn content_of(output: Value) -> CallToolResult {
    match output {
        output @ Value::Object(_) => CallToolResult::structured(output),
        Value::String(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        output => {
            let blocks = content_blocks(&output)
                .unwrap_or_else(|| vec![ContentBlock::text(output.to_string())]);
            CallToolResult::success(blocks)
        }
    }
}

/// The content blocks `output` is, when it is a non-empty array of them written exactly as MCP
/// writes them (nothing left out or added on the way back); else `None`.
fn content_blocks(output: &Value) -> Option<Vec<ContentBlock>> {
    let Value::Array(items) = output else {
        return None;
    };
    if items.is_empty() {
        return None;
    }
    let blocks: Vec<ContentBlock> = serde_json::from_value(output.clone()).ok()?;
    (serde_json::to_value(&blocks).ok()? == *output).then_some(blocks)
}

/// The answer to a call that failed: a tool error, or a protocol error when the call named no
/// tool it could be (or the server itself failed).
pub fn failed(failed: Failed) -> Result<CallToolResult, ErrorData> {
    let reason = reason_of(&failed.error);
    let invocation_id = failed
        .record
        .as_ref()
        .map(|record| record.invocation_id.clone())
        .unwrap_or_default();
    let data = Some(json!({ "reason": reason, "invocation_id": invocation_id }));
    let text = match failed.error {
        InvokeError::Resolve(RegistryError::AmbiguousTool { tool, candidates }) => {
            let names: Vec<String> = candidates
                .iter()
                .map(|service| format!("{service}.{tool}"))
                .collect();
            let message = format!(
                "tool {tool} is offered by several services; call it as one of {}",
                names.join(", ")
            );
            return Err(ErrorData::invalid_params(message, data));
        }
        InvokeError::Resolve(inner) => {
            return Err(ErrorData::invalid_params(inner.to_string(), data));
        }
        InvokeError::SchemaUnavailable { .. } | InvokeError::Records(_) => {
            return Err(ErrorData::internal_error(failed.error.to_string(), data));
        }
        InvokeError::InvalidInput { tool, violations } => {
            let mut text = format!("the arguments do not match the input schema of tool {tool}:");
            for violation in &violations {
                text.push_str(&format!("\n- {}", violation.description));
            }
            text
        }
        // An MCP server's tool error: its own blocks, as a client of the server would get.
        InvokeError::Provider { ref failure, .. }
            if let Some(blocks) = failure.detail.as_ref().and_then(ServerContent::of) =>
        {
            return Ok(tool_error(blocks.to_vec(), &invocation_id, &reason));
        }
        error @ (InvokeError::RateLimited { .. }
        | InvokeError::TooManyInFlight { .. }
        | InvokeError::NoEndpoint { .. }
        | InvokeError::NoInstanceOffers { .. }
        | InvokeError::ProviderUnhealthy { .. }
        | InvokeError::Timeout { .. }
        | InvokeError::Provider { .. }
        | InvokeError::CheckTimeout { .. }
        | InvokeError::OutputCheckTimeout { .. }) => error.to_string(),
    };
    Ok(tool_error(
        vec![ContentBlock::text(text)],
        &invocation_id,
        &reason,
    ))
}

/// A tool error of `blocks`, its `_meta` naming the invocation record and the reason.
fn tool_error(blocks: Vec<ContentBlock>, invocation_id: &str, reason: &str) -> CallToolResult {
    let mut meta = JsonObject::new();
    meta.insert(meta_keys::INVOCATION_ID.into(), json!(invocation_id));
    meta.insert(meta_keys::ERROR_REASON.into(), json!(reason));
    CallToolResult::error(blocks).with_meta(Some(MetaObject(meta)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocks of an answer, as MCP writes them.
    fn blocks(result: &CallToolResult) -> Value {
        serde_json::to_value(&result.content).expect("blocks serialize")
    }

    #[test]
    fn an_object_is_structured_content_and_a_string_its_own_text() {
        let object = content_of(json!({"sum": 5}));
        assert_eq!(object.structured_content, Some(json!({"sum": 5})));
        assert_eq!(
            blocks(&object),
            json!([{"type": "text", "text": "{\"sum\":5}"}])
        );
        let text = content_of(json!("two lines:\n\"quoted\""));
        assert_eq!(text.structured_content, None);
        assert_eq!(
            blocks(&text),
            json!([{"type": "text", "text": "two lines:\n\"quoted\""}]),
            "the text itself, not its JSON"
        );
    }

    #[test]
    fn an_array_of_content_blocks_is_answered_as_those_blocks() {
        let given = json!([
            {"type": "text", "text": "Here's the image:"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"}
        ]);
        let answer = content_of(given.clone());
        assert_eq!(blocks(&answer), given);
        assert_eq!(answer.structured_content, None);
        assert_eq!(answer.is_error, Some(false));
    }

    #[test]
    fn other_outputs_are_their_json_text() {
        for output in [
            json!(42),
            json!(null),
            json!([]),
            json!([1, 2]),
            json!([{"type": "text", "text": "a"}, {"kind": "not a block"}]),
            // A block with a member MCP does not have would lose it: left as JSON.
            json!([{"type": "text", "text": "a", "score": 0.9}]),
        ] {
            assert_eq!(
                blocks(&content_of(output.clone())),
                json!([{"type": "text", "text": output.to_string()}]),
                "{output}"
            );
        }
    }
}
