//! What the benchmarks register, send and compare against: distinct tool schemas of a given
//! size, inputs of a given size, the bench provider's tools, and the baseline discovery server
//! (a bare tonic server answering with the very bytes toolplane answered with).

use std::pin::Pin;

use futures_util::Stream;
use serde_json::{Map, Value, json};
use tonic::{Request, Response, Status};

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
#[derive(Debug, Clone)]
pub struct BaselineDiscovery {
    /// toolplane's answer to GetTool, by tool name.
    pub get_tool: std::collections::HashMap<String, pb::GetToolResponse>,
    /// The answer to every ListTools.
    pub list_tools: pb::ListToolsResponse,
    /// The answer to every SearchTools.
    pub search_tools: pb::SearchToolsResponse,
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented(
        "the baseline answers GetTool, ListTools and SearchTools only",
    ))
}

type NoStream = Pin<Box<dyn Stream<Item = Result<pb::WatchServicesResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DiscoveryService for BaselineDiscovery {
    async fn register_service(
        &self,
        _: Request<pb::RegisterServiceRequest>,
    ) -> Result<Response<pb::RegisterServiceResponse>, Status> {
        unimplemented()
    }
    async fn heartbeat(
        &self,
        _: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        unimplemented()
    }
    async fn deregister_service(
        &self,
        _: Request<pb::DeregisterServiceRequest>,
    ) -> Result<Response<pb::DeregisterServiceResponse>, Status> {
        unimplemented()
    }
    async fn list_tools(
        &self,
        _: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        Ok(Response::new(self.list_tools.clone()))
    }
    async fn search_tools(
        &self,
        _: Request<pb::SearchToolsRequest>,
    ) -> Result<Response<pb::SearchToolsResponse>, Status> {
        Ok(Response::new(self.search_tools.clone()))
    }
    async fn get_tool(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::GetToolResponse>, Status> {
        let name = request.into_inner().tool_name;
        self.get_tool
            .get(&name)
            .cloned()
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no stored answer for {name}")))
    }
    async fn list_services(
        &self,
        _: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        unimplemented()
    }
    async fn get_service(
        &self,
        _: Request<pb::GetServiceRequest>,
    ) -> Result<Response<pb::GetServiceResponse>, Status> {
        unimplemented()
    }
    type WatchServicesStream = NoStream;
    async fn watch_services(
        &self,
        _: Request<pb::WatchServicesRequest>,
    ) -> Result<Response<Self::WatchServicesStream>, Status> {
        unimplemented()
    }
    async fn preflight(
        &self,
        _: Request<pb::PreflightRequest>,
    ) -> Result<Response<pb::PreflightResponse>, Status> {
        unimplemented()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validate::{RegistrationLimits, compile_schema};

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
