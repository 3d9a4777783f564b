//! What the benchmarks register, send and compare against: distinct tool schemas of a given
//! size, inputs of a given size, the bench provider's tools, and the baseline discovery server
//! (a bare tonic server answering with the very bytes toolplane answered with).

use std::collections::HashMap;
use std::pin::Pin;

use futures_util::Stream;
use prost::Message;
use serde_json::{Map, Value, json};
use tonic::{Request, Response, Status};

use crate::grpc::discovery_wire::{
    DiscoveryServer, DiscoveryWire, GetToolResponseWire, ListToolsResponseWire,
    RegisterServiceResponseWire, SearchToolsResponseWire, WireWatchStream,
};
use crate::pb;
use crate::pb::discovery_service_server::DiscoveryService;
use crate::provider::{
    RegisteredTools, ToolDescriptor, ToolInvocation, ToolOutput, ToolRegistry, handler,
};

/// A JSON Schema of about `target_bytes` of compact JSON whose property names are unique to
/// `seed`, so no two tools share a schema.
pub fn tool_schema(seed: usize, target_bytes: usize) -> Value {
    let mut properties = Map::new();
    let mut size = 40;
    let mut index = 0;
    while size < target_bytes {
        let property = match index % 4 {
            0 => {
                json!({"type": "string", "maxLength": 256, "description": format!("text field {index} of tool {seed}")})
            }
            1 => json!({"type": "integer", "minimum": 0, "maximum": 1000 + index}),
            2 => {
                json!({"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 50})
            }
            _ => {
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "boolean"}}})
            }
        };
        let name = format!("field_{seed}_{index}");
        size += name.len() + property.to_string().len() + 4;
        properties.insert(name, property);
        index += 1;
    }
    json!({"type": "object", "properties": properties})
}

/// The schema of `bench_simple`.
pub fn simple_schema() -> Value {
    json!({"type": "object"})
}

/// The schema of `bench_complex`: required fields, a pattern, bounded arrays, nested objects.
pub fn complex_schema() -> Value {
    json!({
        "type": "object", "required": ["id", "tags", "payload"], "additionalProperties": false,
        "properties": {
            "id": {"type": "string", "pattern": "^bench-[0-9]+$"},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 64}, "maxItems": 500},
            "payload": {"type": "string", "maxLength": 100000},
            "meta": {"type": "object", "properties": {
                "priority": {"type": "integer", "minimum": 0, "maximum": 10},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}
        }
    })
}

/// An input valid for both bench tools, about `bytes` long as compact JSON.
pub fn input_of_size(bytes: usize) -> Value {
    let tags: Vec<String> = (0..bytes / 64).map(|i| format!("tag-{i}")).collect();
    let mut input = json!({"id": "bench-1", "tags": tags, "meta": {"priority": 3, "labels": {"team": "bench"}}, "payload": ""});
    let missing = bytes.saturating_sub(input.to_string().len());
    input["payload"] = Value::String("x".repeat(missing));
    input
}

/// The bench provider's tools: `bench_simple` and `bench_complex`, both answering `{"ok": true}`.
pub fn bench_tools() -> RegisteredTools {
    let answer =
        || handler(|_call: ToolInvocation| async move { Ok(ToolOutput::new(json!({"ok": true}))) });
    ToolRegistry::new()
        .register(
            ToolDescriptor::new("bench_simple", "Accepts any object", simple_schema()),
            answer(),
        )
        .and_then(|registry| {
            registry.register(
                ToolDescriptor::new(
                    "bench_complex",
                    "Accepts a structured object",
                    complex_schema(),
                ),
                answer(),
            )
        })
        .expect("the bench tools are valid")
        .freeze()
}

/// A discovery server that answers GetTool, ListTools and SearchTools with stored responses and
/// nothing else.
///
/// Each answer is kept as toolplane sends it: the envelope decoded, every tool as its encoded
/// bytes ([`SharedMessage`](crate::grpc::discovery_wire::SharedMessage)), written out as they
/// are. The baseline thus pays what toolplane pays to send kept bytes, and nothing for
/// finding, authorizing or enveloping them: it is the floor toolplane's discovery reads are
/// compared against.
#[derive(Debug, Clone)]
pub struct BaselineDiscovery {
    /// toolplane's answer to GetTool, by tool name.
    get_tool: HashMap<String, GetToolResponseWire>,
    /// The answer to every ListTools.
    list_tools: ListToolsResponseWire,
    /// The answer to every SearchTools.
    search_tools: SearchToolsResponseWire,
}

/// A stored answer that does not decode.
fn undecodable(what: &str, error: prost::DecodeError) -> String {
    format!("the stored {what} answer does not decode: {error}")
}

impl BaselineDiscovery {
    /// The baseline answering with these encodings of toolplane's answers: `get_tool`, every
    /// GetTool answer length-delimited, one after the other; `list_tools`, a ListTools answer;
    /// `search_tools`, a SearchTools answer.
    pub fn from_encoded(
        get_tool: &[u8],
        list_tools: &[u8],
        search_tools: &[u8],
    ) -> Result<Self, String> {
        let mut answers = HashMap::new();
        let mut rest = get_tool;
        while !rest.is_empty() {
            // Read once for the tool's name and once more as the twin that keeps its bytes.
            let name = pb::GetToolResponse::decode_length_delimited(rest)
                .map_err(|e| undecodable("GetTool", e))?
                .tool
                .map(|tool| tool.tool_name)
                .unwrap_or_default();
            let answer = GetToolResponseWire::decode_length_delimited(&mut rest)
                .map_err(|e| undecodable("GetTool", e))?;
            answers.insert(name, answer);
        }
        Ok(Self {
            get_tool: answers,
            list_tools: ListToolsResponseWire::decode(list_tools)
                .map_err(|e| undecodable("ListTools", e))?,
            search_tools: SearchToolsResponseWire::decode(search_tools)
                .map_err(|e| undecodable("SearchTools", e))?,
        })
    }

    /// Serves the baseline: the three reads as stored, every other method `UNIMPLEMENTED`.
    pub fn server(self) -> DiscoveryServer<Self> {
        DiscoveryServer::new(self)
    }
}

fn unimplemented<T>() -> Result<T, Status> {
    Err(Status::unimplemented(
        "the baseline answers GetTool, ListTools and SearchTools only",
    ))
}

impl DiscoveryWire for BaselineDiscovery {
    async fn register_service_wire(
        &self,
        _: Request<pb::RegisterServiceRequest>,
    ) -> Result<RegisterServiceResponseWire, Status> {
        unimplemented()
    }
    async fn get_tool_wire(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<GetToolResponseWire, Status> {
        let name = request.into_inner().tool_name;
        self.get_tool
            .get(&name)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no stored answer for {name}")))
    }
    async fn list_tools_wire(
        &self,
        _: Request<pb::ListToolsRequest>,
    ) -> Result<ListToolsResponseWire, Status> {
        Ok(self.list_tools.clone())
    }
    async fn search_tools_wire(
        &self,
        _: Request<pb::SearchToolsRequest>,
    ) -> Result<SearchToolsResponseWire, Status> {
        Ok(self.search_tools.clone())
    }
    async fn watch_wire(
        &self,
        _: Request<pb::WatchServicesRequest>,
    ) -> Result<WireWatchStream, Status> {
        unimplemented()
    }
}

type NoStream = Pin<Box<dyn Stream<Item = Result<pb::WatchServicesResponse, Status>> + Send>>;

/// The generated trait: every method answers `UNIMPLEMENTED`. [`DiscoveryServer`] sends
/// RegisterService, GetTool, ListTools, SearchTools and WatchServices to [`DiscoveryWire`]
/// instead, and the baseline answers nothing else.
#[tonic::async_trait]
impl DiscoveryService for BaselineDiscovery {
    async fn register_service(
        &self,
        _: Request<pb::RegisterServiceRequest>,
    ) -> Result<Response<pb::RegisterServiceResponse>, Status> {
        unimplemented().map(Response::new)
    }
    async fn heartbeat(
        &self,
        _: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        unimplemented().map(Response::new)
    }
    async fn deregister_service(
        &self,
        _: Request<pb::DeregisterServiceRequest>,
    ) -> Result<Response<pb::DeregisterServiceResponse>, Status> {
        unimplemented().map(Response::new)
    }
    async fn list_tools(
        &self,
        _: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        unimplemented().map(Response::new)
    }
    async fn search_tools(
        &self,
        _: Request<pb::SearchToolsRequest>,
    ) -> Result<Response<pb::SearchToolsResponse>, Status> {
        unimplemented().map(Response::new)
    }
    async fn get_tool(
        &self,
        _: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::GetToolResponse>, Status> {
        unimplemented().map(Response::new)
    }
    async fn list_services(
        &self,
        _: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        unimplemented().map(Response::new)
    }
    async fn get_service(
        &self,
        _: Request<pb::GetServiceRequest>,
    ) -> Result<Response<pb::GetServiceResponse>, Status> {
        unimplemented().map(Response::new)
    }
    type WatchServicesStream = NoStream;
    async fn watch_services(
        &self,
        _: Request<pb::WatchServicesRequest>,
    ) -> Result<Response<Self::WatchServicesStream>, Status> {
        unimplemented().map(Response::new)
    }
    async fn preflight(
        &self,
        _: Request<pb::PreflightRequest>,
    ) -> Result<Response<pb::PreflightResponse>, Status> {
        unimplemented().map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validate::{RegistrationLimits, compile_schema};

    fn tool(name: &str) -> pb::ToolRegistration {
        let schema = crate::json::json_to_struct(&tool_schema(3, 1024));
        pb::ToolRegistration {
            tool_name: name.into(),
            description: format!("The {name} tool."),
            tool_schema: schema,
            ..Default::default()
        }
    }

    fn meta() -> Option<pb::Meta> {
        Some(pb::Meta {
            correlation_id: "c-1".into(),
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn the_baseline_answers_with_the_bytes_it_was_given() {
        let answers: Vec<pb::GetToolResponse> = ["a", "b"]
            .map(|name| pb::GetToolResponse {
                meta: meta(),
                tool: Some(tool(name)),
            })
            .into();
        let mut get_tool = Vec::new();
        for answer in &answers {
            answer
                .encode_length_delimited(&mut get_tool)
                .expect("encodes");
        }
        let list = pb::ListToolsResponse {
            meta: meta(),
            tools: vec![tool("a"), tool("b")],
            next_page_token: "next".into(),
        };
        let search = pb::SearchToolsResponse {
            meta: meta(),
            matches: vec![pb::ToolMatch {
                tool: Some(tool("b")),
                score: 0.5,
            }],
            total_matches: 1,
        };
        let baseline = BaselineDiscovery::from_encoded(
            &get_tool,
            &list.encode_to_vec(),
            &search.encode_to_vec(),
        )
        .expect("decodes");
        for answer in &answers {
            let name = answer.tool.as_ref().expect("a tool").tool_name.clone();
            let request = pb::GetToolRequest {
                tool_name: name,
                ..Default::default()
            };
            let sent = baseline.get_tool_wire(Request::new(request)).await;
            assert_eq!(
                sent.expect("stored").encode_to_vec(),
                answer.encode_to_vec()
            );
        }
        let missing = pb::GetToolRequest {
            tool_name: "c".into(),
            ..Default::default()
        };
        let status = baseline.get_tool_wire(Request::new(missing)).await;
        assert_eq!(
            status.expect_err("not stored").code(),
            tonic::Code::NotFound
        );
        let sent = baseline
            .list_tools_wire(Request::new(Default::default()))
            .await;
        assert_eq!(sent.expect("stored").encode_to_vec(), list.encode_to_vec());
        let sent = baseline
            .search_tools_wire(Request::new(Default::default()))
            .await;
        assert_eq!(
            sent.expect("stored").encode_to_vec(),
            search.encode_to_vec()
        );
        let broken = BaselineDiscovery::from_encoded(&get_tool[..get_tool.len() - 1], &[], &[]);
        assert!(broken.expect_err("cut short").contains("GetTool"));
    }

    #[test]
    fn schemas_and_inputs_have_the_sizes_asked_for() {
        for target in [1024, 4096] {
            let schema = tool_schema(7, target);
            let size = schema.to_string().len();
            assert!(size >= target && size < target + 300, "{size} for {target}");
            compile_schema(&schema, &RegistrationLimits::default()).expect("a valid schema");
        }
        assert_ne!(tool_schema(1, 1024), tool_schema(2, 1024));
        for bytes in [256, 4096] {
            let input = input_of_size(bytes);
            assert_eq!(input.to_string().len(), bytes);
            assert!(
                compile_schema(&complex_schema(), &RegistrationLimits::default())
                    .expect("valid")
                    .is_valid(&input)
            );
        }
    }
}
