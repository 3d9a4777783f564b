//! A provider's ErrorInfo reason is passed on (to the caller's ErrorInfo and the call's
//! record) when it is one as google.rpc defines it: at most 63 characters of UPPER_SNAKE_CASE.
//! Any other is replaced by the reason for the status code, so a provider cannot write what it
//! likes, of any size, into every record of its failed calls.

use crate::common;

use common::invoke_fixture::*;
use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::provider::{ToolDescriptor, ToolError, ToolInvocation, handler};

/// A tool failing with the reason its input names.
async fn start_failing_provider(server: &TestServer) -> common::provider::TestProvider {
    let tool = ToolDescriptor::new(
        "failing",
        "Fails with the reason asked for",
        json!({"type": "object"}),
    );
    let fail = handler(|call: ToolInvocation| async move {
        let reason = call.input["reason"].as_str().unwrap_or_default().to_owned();
        Err(ToolError::new(&reason, "failed as asked"))
    });
    common::provider::start_one_tool_provider(server, "failing-service", tool, fail).await
}

/// A reason of 200 KB made each record of the call that large, and the caller's trailers too
/// large for it to read (RESOURCE_EXHAUSTED "h2 protocol error" instead of the failure). Now
/// it, and a lower-case one, are TOOL_FAILED (the reason of the provider's ABORTED), in the
/// answer and the record; a valid reason is passed on as it is.
#[tokio::test(flavor = "multi_thread")]
async fn only_a_valid_provider_reason_is_passed_on() {
    let server = TestServer::start().await;
    let _provider = start_failing_provider(&server).await;
    let mut client = invoker(&server).await;
    let cases = [
        ("X".repeat(200_000), "TOOL_FAILED"),
        ("quota_spent".to_owned(), "TOOL_FAILED"),
        ("QUOTA_SPENT".to_owned(), "QUOTA_SPENT"),
    ];
    for (sent, passed_on) in cases {
        let error = client
            .invoke_tool(request("failing", json!({"reason": sent})))
            .await
            .expect_err("fails");
        assert_eq!(error.code(), Code::Aborted, "{error:?}");
        assert_eq!(reason(&error), passed_on);
        let written = records(&mut client, "failing").await;
        assert_eq!(written[0].error_reason, passed_on);
    }
}
