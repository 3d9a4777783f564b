//! `uniqueItems` through the real server on loopback: an input whose array items all hash
//! alike under `jsonschema`'s own check (which took time quadratic in their number, and could
//! not be stopped at the caller's deadline) is checked as fast as any other.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use toolplane::registry::unique_items::hashing_alike_for_jsonschema;

/// 30,000 such items (about 2.7 MB) with a duplicate at the end are refused for it within
/// seconds: with `jsonschema`'s check (about 30 s for them in a debug build) the call ran into
/// its 20 s deadline, and the check went on after it, holding a thread of the heavy work's
/// pool.
#[tokio::test(flavor = "multi_thread")]
async fn items_that_hash_alike_are_checked_in_time() {
    let server = TestServer::start().await;
    let schema = json!({
        "type": "object",
        "properties": {"tags": {"type": "array", "uniqueItems": true}},
    });
    let mut discovery = server.discovery().await;
    let mut registration = registration("tagger", vec![tool("tag", schema)]);
    registration.endpoint = "http://127.0.0.1:9".into();
    register_ok(&mut discovery, 0, registration).await;

    let mut tags = hashing_alike_for_jsonschema(30_000);
    tags.push(tags[12_345].clone());
    let mut request = tonic::Request::new(pb::ValidateToolInputRequest {
        meta: meta(0),
        tool_name: "tag".into(),
        input: toolplane::json::json_to_struct(&json!({"tags": tags})),
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(20));
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let started = Instant::now();
    let error = client
        .validate_tool_input(request)
        .await
        .expect_err("a duplicate");
    assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
    assert_eq!(reason(&error), "VALIDATION_INPUT", "{error:?}");
    assert!(
        error.message().contains("has non-unique elements"),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}
