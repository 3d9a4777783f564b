//! The invocation floor: a bare tonic `ToolInvokeService` that forwards each `InvokeTool` to
//! the provider's `CallTool` through one pooled tonic channel, as toolplane does, and does
//! nothing else (no lookup, validation, limits, deadline or record; the input `Struct` is moved
//! across, never converted). Measured against the direct call it shows what terminating gRPC
//! on both sides costs on the machine at hand, which toolplane's own numbers sit on top of.

use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::pb;
use crate::pb::tool_invoke_service_server::ToolInvokeService;
use crate::pb::tool_provider_service_client::ToolProviderServiceClient;

/// Forwards `InvokeTool` to one provider; every other RPC is UNIMPLEMENTED.
#[derive(Debug, Clone)]
pub struct PassThroughInvoke {
    /// The provider, over one lazily connected channel.
    pub provider: ToolProviderServiceClient<Channel>,
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented(
        "the pass-through baseline answers InvokeTool only",
    ))
}

#[tonic::async_trait]
impl ToolInvokeService for PassThroughInvoke {
    async fn invoke_tool(
        &self,
        request: Request<pb::InvokeToolRequest>,
    ) -> Result<Response<pb::InvokeToolResponse>, Status> {
        let request = request.into_inner();
        let answer = self
            .provider
            .clone()
            .call_tool(pb::CallToolRequest {
                meta: request.meta.clone(),
                tool_name: request.tool_name,
                input: request.input,
                idempotency_key: request.idempotency_key,
                attempt: 1,
            })
            .await?
            .into_inner();
        Ok(Response::new(pb::InvokeToolResponse {
            meta: request.meta,
            output: answer.output,
            warnings: answer.warnings,
            record: None,
        }))
    }

    async fn validate_tool_input(
        &self,
        _: Request<pb::ValidateToolInputRequest>,
    ) -> Result<Response<pb::ValidateToolInputResponse>, Status> {
        unimplemented()
    }

    async fn list_invocation_records(
        &self,
        _: Request<pb::ListInvocationRecordsRequest>,
    ) -> Result<Response<pb::ListInvocationRecordsResponse>, Status> {
        unimplemented()
    }

    async fn get_invocation_record(
        &self,
        _: Request<pb::GetInvocationRecordRequest>,
    ) -> Result<Response<pb::GetInvocationRecordResponse>, Status> {
        unimplemented()
    }
}
