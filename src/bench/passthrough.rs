//! The invocation floor: a bare tonic `ToolInvokeService` that forwards each `InvokeTool` to
//! the provider's `CallTool` over the same transport as toolplane (connections accepted
//! through `grpc::coalesce`, the provider called through `grpc::unary_client`), and does
//! nothing else (no lookup, validation, limits, deadline or record). Like toolplane it is
//! served through `grpc::invoke_wire::InvokeServer`, so the input and output cross as the
//! bytes that arrived, but here they are never read. Measured against the direct call it shows
//! what terminating gRPC on both sides this way costs on the machine at hand, which
//! toolplane's own numbers sit on top of.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::grpc::invoke_wire::{
    CallToolRequestWire, CallToolResponseWire, InvokeToolRequestWire, InvokeToolResponseWire,
    InvokeWire,
};
use crate::grpc::provider_client::CALL_TOOL;
use crate::grpc::unary_client::UnaryChannel;
use crate::pb;
use crate::pb::tool_invoke_service_server::ToolInvokeService;

/// Forwards `InvokeTool` to one provider; every other RPC is UNIMPLEMENTED.
#[derive(Debug, Clone)]
pub struct PassThroughInvoke {
    /// The provider, over one lazily connected HTTP/2 connection.
    pub provider: Arc<UnaryChannel>,
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented(
        "the pass-through baseline answers InvokeTool only (through InvokeServer)",
    ))
}

impl InvokeWire for PassThroughInvoke {
    async fn invoke_wire(
        &self,
        request: Request<InvokeToolRequestWire>,
    ) -> Result<InvokeToolResponseWire, Status> {
        let request = request.into_inner();
        let call = CallToolRequestWire {
            meta: request.meta.clone(),
            tool_name: request.tool_name,
            input: request.input,
            idempotency_key: request.idempotency_key,
            attempt: 1,
        };
        let answer: CallToolResponseWire = self.provider.call(CALL_TOOL, &call, None).await?;
        Ok(InvokeToolResponseWire {
            meta: request.meta,
            output: answer.output,
            warnings: answer.warnings,
            record: None,
        })
    }
}

/// `InvokeTool` is answered by [`InvokeWire`] (through `InvokeServer`), never here.
#[tonic::async_trait]
impl ToolInvokeService for PassThroughInvoke {
    async fn invoke_tool(
        &self,
        _: Request<pb::InvokeToolRequest>,
    ) -> Result<Response<pb::InvokeToolResponse>, Status> {
        unimplemented()
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
