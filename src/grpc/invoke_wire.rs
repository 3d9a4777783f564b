//! `InvokeTool` with its input and output kept encoded on both hops.
//!
//! The four messages an invocation carries (`InvokeToolRequest`/`Response` between the caller
//! and toolplane, `CallToolRequest`/`Response` between toolplane and the provider) have wire
//! twins here: the same fields and numbers, except that the `Struct` input and the `Value`
//! output are a [`RawMessage`]. Protobuf encodes an embedded message as its bytes, so a twin
//! reads and writes exactly what the generated message does; a test checks every twin against
//! the proto descriptor. [`InvokeServer`] serves `ToolInvokeService` with `InvokeTool` decoded
//! into its twin (every other method goes to the generated server unchanged), so the input and
//! output are read into JSON once and sent on as they came, never rebuilt as prost trees.

use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tonic::body::Body;

use super::raw_message::RawMessage;
use super::wire_server::{Call, Compression, OwnMethods, WireServer, unary};
use crate::pb;
use crate::pb::tool_invoke_service_server::ToolInvokeServiceServer;

/// The path of `ToolInvokeService.InvokeTool`.
pub const INVOKE_TOOL: &str = "/toolplane.v1.ToolInvokeService/InvokeTool";

/// `toolplane.v1.InvokeToolRequest` with its `input` kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InvokeToolRequestWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `tool_name`.
    #[prost(string, tag = "2")]
    pub tool_name: String,
    /// `service_name`.
    #[prost(string, tag = "3")]
    pub service_name: String,
    /// `input`: an encoded `google.protobuf.Struct`.
    #[prost(message, optional, tag = "4")]
    pub input: Option<RawMessage>,
    /// `idempotency_key`.
    #[prost(string, tag = "5")]
    pub idempotency_key: String,
    /// `retry_policy`.
    #[prost(message, optional, tag = "6")]
    pub retry_policy: Option<pb::RetryPolicy>,
}

/// `toolplane.v1.InvokeToolResponse` with its `output` kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InvokeToolResponseWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `output`: an encoded `google.protobuf.Value`.
    #[prost(message, optional, tag = "2")]
    pub output: Option<RawMessage>,
    /// `warnings`.
    #[prost(string, repeated, tag = "3")]
    pub warnings: Vec<String>,
    /// `record`: an encoded `toolplane.v1.InvocationRecord` (see [`super::record_wire`]).
    #[prost(message, optional, tag = "4")]
    pub record: Option<RawMessage>,
}

/// `toolplane.v1.CallToolRequest` with its `input` kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CallToolRequestWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `tool_name`.
    #[prost(string, tag = "2")]
    pub tool_name: String,
    /// `input`: an encoded `google.protobuf.Struct`.
    #[prost(message, optional, tag = "3")]
    pub input: Option<RawMessage>,
    /// `idempotency_key`.
    #[prost(string, tag = "4")]
    pub idempotency_key: String,
    /// `attempt`.
    #[prost(uint32, tag = "5")]
    pub attempt: u32,
}

/// `toolplane.v1.CallToolResponse` with its `output` kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CallToolResponseWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `output`: an encoded `google.protobuf.Value`.
    #[prost(message, optional, tag = "2")]
    pub output: Option<RawMessage>,
    /// `warnings`.
    #[prost(string, repeated, tag = "3")]
    pub warnings: Vec<String>,
}

/// `InvokeTool` over the wire twins: what [`InvokeServer`] calls.
pub trait InvokeWire: Send + Sync + 'static {
    /// Answers one `InvokeTool`.
    fn invoke_wire(
        &self,
        request: tonic::Request<InvokeToolRequestWire>,
    ) -> impl Future<Output = Result<InvokeToolResponseWire, tonic::Status>> + Send;
}

/// Serves `toolplane.v1.ToolInvokeService`: `InvokeTool` through its wire twins, every other
/// method through the generated server, with the generated server's message size limits.
pub type InvokeServer<T> = WireServer<ToolInvokeServiceServer<T>, InvokeToolMethod<T>>;

/// `InvokeTool`, served through [`InvokeWire`].
#[derive(Debug)]
pub struct InvokeToolMethod<T>(PhantomData<fn() -> T>);

impl<T: InvokeWire> OwnMethods for InvokeToolMethod<T> {
    type Api = T;

    fn owns(path: &str) -> bool {
        path == INVOKE_TOOL
    }

    fn serve(
        api: Arc<T>,
        compression: Compression,
        request: http::Request<Body>,
    ) -> BoxFuture<'static, http::Response<Body>> {
        let call: Call<T, InvokeToolRequestWire, InvokeToolResponseWire> =
            |api, request| Box::pin(async move { api.invoke_wire(request).await });
        unary(api, call, compression, request)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use prost_types::FileDescriptorSet;

    use super::*;

    /// Each twin's fields (name, number, label) against the proto message it stands for.
    #[test]
    fn twins_match_the_proto() {
        let set = FileDescriptorSet::decode(pb::FILE_DESCRIPTOR_SET).expect("descriptor set");
        let fields_of = |name: &str| {
            let message = set
                .file
                .iter()
                .flat_map(|file| &file.message_type)
                .find(|message| message.name() == name)
                .unwrap_or_else(|| panic!("{name} is in the descriptor set"));
            let mut fields: Vec<(String, i32)> = message
                .field
                .iter()
                .map(|field| (field.name().to_owned(), field.number()))
                .collect();
            fields.sort();
            fields
        };
        let twins: [(&str, &[(&str, i32)]); 4] = [
            (
                "InvokeToolRequest",
                &[
                    ("idempotency_key", 5),
                    ("input", 4),
                    ("meta", 1),
                    ("retry_policy", 6),
                    ("service_name", 3),
                    ("tool_name", 2),
                ],
            ),
            (
                "InvokeToolResponse",
                &[("meta", 1), ("output", 2), ("record", 4), ("warnings", 3)],
            ),
            (
                "CallToolRequest",
                &[
                    ("attempt", 5),
                    ("idempotency_key", 4),
                    ("input", 3),
                    ("meta", 1),
                    ("tool_name", 2),
                ],
            ),
            (
                "CallToolResponse",
                &[("meta", 1), ("output", 2), ("warnings", 3)],
            ),
        ];
        for (name, expected) in twins {
            let expected: Vec<(String, i32)> = expected
                .iter()
                .map(|(field, number)| ((*field).to_owned(), *number))
                .collect();
            assert_eq!(fields_of(name), expected, "{name} and its twin differ");
        }
    }

    /// An `InvokeToolRequest` with every field set.
    fn full_request(input: serde_json::Value) -> pb::InvokeToolRequest {
        pb::InvokeToolRequest {
            meta: Some(pb::Meta {
                tenant_id: 7,
                correlation_id: "corr".into(),
                ..Default::default()
            }),
            tool_name: "tool".into(),
            service_name: "svc".into(),
            input: crate::json::json_to_struct(&input),
            idempotency_key: "key".into(),
            retry_policy: Some(pb::RetryPolicy {
                max_attempts: 3,
                ..Default::default()
            }),
        }
    }

    /// A full message survives the trip through its twin byte for byte.
    #[test]
    fn twins_carry_every_field() {
        let request = full_request(serde_json::json!({"q": "x", "n": [1, 2]}));
        let bytes = request.encode_to_vec();
        let twin = InvokeToolRequestWire::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(twin.encode_to_vec(), bytes);

        let answer = pb::CallToolResponse {
            meta: request.meta.clone(),
            output: Some(crate::json::json_to_value(&serde_json::json!({"ok": true}))),
            warnings: vec!["w".into()],
        };
        let bytes = answer.encode_to_vec();
        let twin = CallToolResponseWire::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(twin.encode_to_vec(), bytes);
    }

    /// Randomly damaged requests and answers, as a broken or hostile caller or provider sends
    /// them: decoded through a twin and read into JSON, they are accepted exactly when prost's
    /// decoder and `json::struct_to_json` accept them, with the same fields, or refused
    /// (bytes that are valid only to prost's lenient map decoder are refused on purpose; see
    /// `raw_message`).
    #[test]
    fn damaged_messages_read_through_twins_as_prost_reads_them() {
        use super::super::damage::{
            StrictAnswer, StrictRequest, mutated, strictly_valid, xorshift,
        };
        use super::super::raw_message::{RawJsonError, struct_bytes_to_json, value_bytes_to_json};
        use crate::json::{struct_to_json, value_to_json};

        let mut next = xorshift(0xD1B5_4A32_D192_ED03);
        let request =
            full_request(serde_json::json!({"q": "x", "n": [1, 2.5, null], "o": {"b": true}}))
                .encode_to_vec();
        let answer = pb::CallToolResponse {
            meta: None,
            output: Some(crate::json::json_to_value(
                &serde_json::json!({"ok": [true, "yes", {"n": 1}]}),
            )),
            warnings: vec!["w".into()],
        }
        .encode_to_vec();
        let (mut read, mut refused) = (0, 0);
        for round in 0..4000 {
            let is_request = round % 2 == 0;
            let mut bytes = if is_request {
                request.clone()
            } else {
                answer.clone()
            };
            for _ in 0..1 + next() % 3 {
                bytes = mutated(&bytes, &mut next);
            }
            // Each side's reading as (the fields besides the JSON, the JSON), or its error.
            let (theirs, mine, strict) = if is_request {
                let theirs = pb::InvokeToolRequest::decode(bytes.as_slice())
                    .map_err(drop)
                    .map(|r| {
                        let json = struct_to_json(&r.input.unwrap_or_default());
                        let rest = format!(
                            "{:?}",
                            (
                                r.meta,
                                r.tool_name,
                                r.service_name,
                                r.idempotency_key,
                                r.retry_policy
                            )
                        );
                        (rest, json.map_err(drop))
                    });
                let mine = InvokeToolRequestWire::decode(bytes.as_slice())
                    .map_err(drop)
                    .map(|w| {
                        let input = w.input.as_ref().map_or(&[][..], |i| i.as_bytes());
                        let rest = format!(
                            "{:?}",
                            (
                                w.meta,
                                w.tool_name,
                                w.service_name,
                                w.idempotency_key,
                                w.retry_policy
                            )
                        );
                        (rest, struct_bytes_to_json(input))
                    });
                (theirs, mine, strictly_valid::<StrictRequest>(&bytes))
            } else {
                let theirs = pb::CallToolResponse::decode(bytes.as_slice())
                    .map_err(drop)
                    .map(|r| {
                        let json = r
                            .output
                            .as_ref()
                            .map_or(Ok(serde_json::Value::Null), value_to_json);
                        (format!("{:?}", r.warnings), json.map_err(drop))
                    });
                let mine = CallToolResponseWire::decode(bytes.as_slice())
                    .map_err(drop)
                    .map(|w| {
                        let json = w.output.as_ref().map_or(Ok(serde_json::Value::Null), |o| {
                            value_bytes_to_json(o.as_bytes())
                        });
                        (format!("{:?}", w.warnings), json)
                    });
                (theirs, mine, strictly_valid::<StrictAnswer>(&bytes))
            };
            match (theirs, mine) {
                (Ok((theirs_rest, Ok(theirs))), Ok((mine_rest, Ok(mine)))) => {
                    assert_eq!((theirs_rest, theirs), (mine_rest, mine), "{bytes:?}");
                    read += 1;
                }
                (Err(()), Err(()) | Ok((_, Err(_))))
                | (Ok((_, Err(()))), Ok((_, Err(RawJsonError::NoJsonForm(_))))) => refused += 1,
                (Ok(_), Err(()) | Ok((_, Err(RawJsonError::Malformed { .. })))) if !strict => {
                    refused += 1
                }
                (theirs, mine) => panic!("{bytes:?}: prost {theirs:?}, twin {mine:?}"),
            }
        }
        assert!(
            read > 200 && refused > 200,
            "read {read}, refused {refused}"
        );
    }
}
