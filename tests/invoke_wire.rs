//! InvokeTool reads the input's bytes once and sends them on as they came: what is validated
//! and hashed is what the provider decodes, and bytes that are no input are the caller's error.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::provider::TestProvider;
use common::*;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::json;
use tonic::Code;
use toolplane::grpc::invoke_wire::{INVOKE_TOOL, InvokeToolRequestWire};
use toolplane::grpc::unary_client::UnaryChannel;
use toolplane::json::{canonical_sha256, json_to_struct, value_to_json};
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use toolplane::provider::{ToolDescriptor, ToolInvocation, ToolOutput, ToolRegistry, handler};

/// A server with one provider whose `echo` tool answers its input and counts its calls.
async fn setup() -> (TestServer, TestProvider, Arc<AtomicU32>) {
    let server = TestServer::start_with(test_options()).await;
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let tools = ToolRegistry::new()
        .register(
            ToolDescriptor::new("echo", "Returns its input", json!({"type": "object"})),
            handler(move |call: ToolInvocation| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move { Ok(ToolOutput::new(call.input)) }
            }),
        )
        .expect("valid tool")
        .freeze();
    let provider =
        TestProvider::start(tools, &server.endpoint(), "wire", Duration::from_secs(5)).await;
    wait_registered(&server, "wire").await;
    (server, provider, calls)
}

fn delimited_field(tag: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(tag, WireType::LengthDelimited, &mut out);
    encode_varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

/// A Struct entry `key: "value"` or, with `Err`, `key: number`.
fn entry(key: &str, value: Result<f64, &str>) -> Vec<u8> {
    let value = match value {
        Err(text) => delimited_field(3, text.as_bytes()),
        Ok(number) => {
            let mut out = Vec::new();
            encode_key(2, WireType::SixtyFourBit, &mut out);
            out.extend_from_slice(&number.to_le_bytes());
            out
        }
    };
    delimited_field(
        1,
        &[
            delimited_field(1, key.as_bytes()),
            delimited_field(2, &value),
        ]
        .concat(),
    )
}

/// An InvokeToolRequest for `echo` whose input is `input_bytes`, sent as raw bytes.
async fn invoke_raw(
    server: &TestServer,
    input_bytes: Vec<u8>,
) -> Result<pb::InvokeToolResponse, tonic::Status> {
    let request = [
        pb::InvokeToolRequest {
            meta: meta(0),
            tool_name: "echo".into(),
            ..Default::default()
        }
        .encode_to_vec(),
        delimited_field(4, &input_bytes),
    ]
    .concat();
    let wire = InvokeToolRequestWire::decode(request.as_slice()).expect("a request");
    let channel = UnaryChannel::new(&server.endpoint(), Duration::from_secs(5)).expect("endpoint");
    channel
        .call(INVOKE_TOOL, &wire, Some(Duration::from_secs(5)))
        .await
}

/// A key sent twice: protobuf keeps the last, and so do the validation, the record's hash, the
/// provider and the answer.
#[tokio::test(flavor = "multi_thread")]
async fn what_is_validated_and_recorded_is_what_the_provider_gets() {
    let (server, _provider, calls) = setup().await;
    let answer = invoke_raw(
        &server,
        [entry("a", Err("first")), entry("a", Ok(2.0))].concat(),
    )
    .await
    .expect("call succeeds");
    let output = value_to_json(answer.output.as_ref().expect("output")).expect("json");
    assert_eq!(output, json!({"a": 2}));
    let record = answer.record.expect("record");
    assert_eq!(record.input_sha256, canonical_sha256(&json!({"a": 2})));
    assert_eq!(record.output_sha256, record.input_sha256);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A number with no JSON form, and bytes that are no Struct, are INVALID_ARGUMENT naming the
/// field; the provider is never called.
#[tokio::test(flavor = "multi_thread")]
async fn inputs_that_are_no_json_object_are_refused() {
    let (server, _provider, calls) = setup().await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let mut input = json_to_struct(&json!({"x": 1})).expect("an object");
    input.fields.insert(
        "x".into(),
        prost_types::Value {
            kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)),
        },
    );
    let error = client
        .invoke_tool(pb::InvokeToolRequest {
            meta: meta(0),
            tool_name: "echo".into(),
            input: Some(input),
            ..Default::default()
        })
        .await
        .expect_err("NaN has no JSON form");
    assert_eq!(error.code(), Code::InvalidArgument);
    let found = violations(&error);
    assert_eq!(found[0].0, "input/x");
    assert!(found[0].1.contains("not a finite number"), "{found:?}");

    // Field 1 of a Struct is a map entry, never a number.
    let error = invoke_raw(&server, vec![0x08, 0x05])
        .await
        .expect_err("not a Struct");
    assert_eq!(error.code(), Code::InvalidArgument);
    let found = violations(&error);
    assert_eq!(found[0].0, "input");
    assert!(
        found[0]
            .1
            .starts_with("not a valid encoded google.protobuf.Struct: "),
        "{found:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
