//! One `tools/call` to an MCP server, for [`super::client::McpCaller`]: sending it, with the
//! server's progress reports handed on to a caller that wants them and a `notifications/cancelled`
//! when it is given up on, and reading its result as the tool's output or failure.
//!
//! The output is the result's `structuredContent` when the server sent one, else the text of a
//! single text block as a JSON string, else the content blocks as a JSON array; the content
//! blocks themselves go with it as its [`ServerContent`], which toolplane's own MCP endpoint
//! answers with. A result marked `isError` is the tool's failure (gRPC code UNKNOWN, reason
//! `TOOL_FAILED`, the text as its message), its blocks going with it (as the failure's
//! `detail`) for toolplane's MCP endpoint to answer with in the same way.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ContentBlock, ProgressNotificationParam, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;

use super::client::{McpSession, code};
use crate::grpc::page_bytes::MAX_ANSWER_ITEM_BYTES;
use crate::invoke::caller::{
    FailureKind, Progress, ProgressSink, ProviderFailure, ProviderReply, WireForm,
};
use crate::json::value_encoded_len;

/// `tools/call` over `session`, as rmcp's `call_tool` makes it (cancelled at the server when
/// dropped unanswered), handing each of the server's `notifications/progress` for the call to
/// `progress` as it arrives.
pub(super) async fn call_reporting_progress(
    session: &McpSession,
    params: CallToolRequestParams,
    progress: Option<ProgressSink>,
) -> Result<CallToolResult, ServiceError> {
    let Some(progress) = progress else {
        return session.call_tool(params).await;
    };
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = session
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await?;
    // Reports that came before this subscription were kept for it.
    let mut reports = (session.service().progress).subscribe(handle.progress_token.clone());
    let mut unanswered = CancelUnanswered {
        peer: session.peer().clone(),
        id: Some(handle.id.clone()),
    };
    let answer = handle.await_response();
    let mut answer = std::pin::pin!(answer);
    let pass_on = |report: ProgressNotificationParam| {
        (progress.0)(Progress {
            progress: report.progress,
            total: report.total,
            message: report.message,
        });
    };
    let result = loop {
        tokio::select! {
            biased;
            Some(report) = reports.next() => pass_on(report),
            result = &mut answer => break result,
        }
    };
    unanswered.id = None;
    // Every report the server sent before its answer is here by now (`ProgressTap` routes
    // each as it is received): one that came just before it (a last "100 of 100") goes first.
    while let Some(report) = reports.try_next() {
        pass_on(report);
    }
    match result? {
        ServerResult::CallToolResult(result) => Ok(result),
        // An answer of `{}`, which rmcp's `call_tool` takes as a result with no content.
        ServerResult::EmptyResult(_) => Ok(CallToolResult::default()),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Tells the server that a request dropped before its answer came is cancelled, as rmcp does
/// for the calls it makes itself (`notifications/cancelled`), so the server stops its work.
struct CancelUnanswered {
    peer: rmcp::Peer<RoleClient>,
    /// The request, until it is answered.
    id: Option<RequestId>,
}

impl Drop for CancelUnanswered {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let reason = "the call was given up on".to_owned();
        tokio::spawn(async move {
            let cancelled = CancelledNotificationParam::new(Some(id), Some(reason));
            let _ = peer.notify_cancelled(cancelled).await;
        });
    }
}

/// A `tools/call` result as the tool's output or failure (see the module docs). An output
/// larger, as the protobuf `Value` InvokeTool answers with, than a gRPC provider's answer may
/// be ([`MAX_ANSWER_ITEM_BYTES`]) fails OUT_OF_RANGE: rmcp reads answers of up to 16 MiB, and
/// one passed on was recorded SUCCEEDED and refused by the gRPC caller's client (which reads
/// 4 MiB).
pub fn reply_of(result: CallToolResult) -> Result<ProviderReply, ProviderFailure> {
    if result.is_error == Some(true) {
        return Err(ProviderFailure {
            kind: FailureKind::Other(code::UNKNOWN),
            reason: "TOOL_FAILED".to_owned(),
            message: texts(&result.content).unwrap_or_else(|| "the tool failed".to_owned()),
            unsent: false,
            detail: ServerContent::wire(result.content),
        });
    }
    let output = match (result.structured_content, result.content.as_slice()) {
        (Some(structured), _) => structured,
        (None, [ContentBlock::Text(text)]) => Value::String(text.text.clone()),
        (None, blocks) => serde_json::to_value(blocks).unwrap_or(Value::Null),
    };
    let output_bytes = value_encoded_len(&output);
    if output_bytes > MAX_ANSWER_ITEM_BYTES {
        return Err(ProviderFailure {
            kind: FailureKind::Other(code::OUT_OF_RANGE),
            reason: "TOOL_FAILED".to_owned(),
            message: format!(
                "the MCP server's answer is {output_bytes} bytes as InvokeTool answers it, \
                 larger than {MAX_ANSWER_ITEM_BYTES} (4 MiB, what gRPC clients read, less room \
                 for toolplane's answer around it)"
            ),
            unsent: false,
            detail: None,
        });
    }
    Ok(ProviderReply {
        output,
        output_wire: ServerContent::wire(result.content),
        output_bytes,
        warnings: Vec::new(),
    })
}

/// The content blocks of an MCP server's answer, carried through the engine beside the output
/// it became (as its [`WireForm`]) so that toolplane's MCP endpoint answers an MCP client with
/// the server's own blocks: an image stays an image and a text its text, also beside
/// `structuredContent`, where the output alone would have kept only the structured content.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerContent(pub Vec<ContentBlock>);

impl ServerContent {
    /// `blocks` as the wire form they travel in; `None` when there are none.
    fn wire(blocks: Vec<ContentBlock>) -> Option<WireForm> {
        (!blocks.is_empty()).then(|| WireForm(Arc::new(Self(blocks))))
    }

    /// The blocks `wire` carries, when it is an MCP server's answer.
    pub fn of(wire: &WireForm) -> Option<&[ContentBlock]> {
        (wire.0.downcast_ref::<Self>()).map(|content| content.0.as_slice())
    }
}

/// The text blocks of `content`, joined by newlines; `None` when there is none.
fn texts(content: &[ContentBlock]) -> Option<String> {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An output past what a gRPC caller could read is the tool's failure, OUT_OF_RANGE,
    /// measured as the protobuf `Value` it would be: 600,000 zeros are 1.2 MB of JSON and
    /// 6.6 MB as a `Value`.
    #[test]
    fn an_output_too_large_to_answer_is_a_failure() {
        let zeros = CallToolResult::structured(json!({"zeros": vec![0; 600_000]}));
        let failure = reply_of(zeros).expect_err("too large");
        assert_eq!(failure.kind, FailureKind::Other(code::OUT_OF_RANGE));
        assert!(
            failure.message.contains("larger than"),
            "{}",
            failure.message
        );
        let fewer = CallToolResult::structured(json!({"zeros": vec![0; 300_000]}));
        assert_eq!(reply_of(fewer).expect("answered").output_bytes, 3_300_027);
    }

    #[test]
    fn a_result_becomes_structured_content_else_its_text_else_its_blocks() {
        let structured = CallToolResult::structured(json!({"sum": 3}));
        assert_eq!(
            reply_of(structured).expect("output").output,
            json!({"sum": 3})
        );
        let text = CallToolResult::success(vec![ContentBlock::text("{\"not\": \"parsed\"}")]);
        assert_eq!(
            reply_of(text).expect("output").output,
            json!("{\"not\": \"parsed\"}")
        );
        let blocks =
            CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(
            reply_of(blocks).expect("output").output,
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        );
    }

    /// The server's blocks go with the output for toolplane's MCP endpoint, also beside
    /// structured content, which alone becomes the output.
    #[test]
    fn a_results_content_blocks_go_with_its_output() {
        let image = ContentBlock::image("iVBORw0KGgo=", "image/png");
        let mut result = CallToolResult::success(vec![image.clone()]);
        result.structured_content = Some(json!({"content": [{"type": "image"}]}));
        let reply = reply_of(result).expect("output");
        assert_eq!(reply.output, json!({"content": [{"type": "image"}]}));
        let wire = reply.output_wire.expect("the blocks carried");
        assert_eq!(ServerContent::of(&wire), Some(&[image][..]));
        let empty = reply_of(CallToolResult::success(Vec::new())).expect("output");
        assert_eq!(empty.output, json!([]));
        assert!(empty.output_wire.is_none(), "no blocks, nothing carried");
    }

    #[test]
    fn a_result_marked_as_an_error_is_the_tools_failure_with_its_text() {
        let failed = CallToolResult::error(vec![ContentBlock::text("no such file")]);
        let failure = reply_of(failed).expect_err("a failure");
        assert_eq!(failure.kind, FailureKind::Other(code::UNKNOWN));
        assert_eq!(failure.reason, "TOOL_FAILED");
        assert_eq!(failure.message, "no such file");
        assert!(!failure.unsent);
    }
}
