//! The thin adapter for `toolplane.v1.ToolInvokeService`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};
use tracing::instrument;

use super::accept::accept;
use super::convert;
use super::deadline::caller_timeout;
use super::invoke_wire::{InvokeToolRequestWire, InvokeToolResponseWire, InvokeWire};
use super::raw_message::{RawJsonError, RawMessage, struct_bytes_to_json};
use super::record_wire::record_bytes;
use super::trace_headers::call_trace;
use crate::envelope::TenantId;
use crate::invoke::caller::WireForm;
use crate::invoke::heavy;
use crate::invoke::policy::RetryPolicy;
use crate::invoke::records::{InvocationRecord, InvocationStatus, RecordFilter};
use crate::invoke::{FILE_BYTES_PER_PAGE, Failed, Invocation, InvokeError, Invoker, answer_within};
use crate::json::{json_to_value, struct_to_json};
use crate::pb;
use crate::pb::tool_invoke_service_server::ToolInvokeService;
use crate::registry::{RegistryError, ServiceName, ToolName, ToolRef, ViolationKind, paging};
use crate::shown::shown;
use crate::trace_context::is_trace_id;

/// Serves `toolplane.v1.ToolInvokeService`.
#[derive(Debug, Clone)]
pub struct InvokeApi {
    invoker: Invoker,
}

impl InvokeApi {
    /// An adapter over `invoker`.
    pub fn new(invoker: Invoker) -> Self {
        Self { invoker }
    }

    /// Runs `work`, which takes time in proportion to the input: in place for a small input,
    /// off the serving threads for a large one (`invoke::heavy`), answering DEADLINE_EXCEEDED
    /// (VALIDATION_TIMEOUT) when the caller's deadline passes first, or `max_invoke_timeout`
    /// for a caller without one (which would otherwise hold a thread of the pool as long as
    /// the work took).
    async fn work_on_input<T: Send + 'static>(
        &self,
        tenant: TenantId,
        tool: &ToolName,
        input_bytes: usize,
        caller_timeout: Option<Duration>,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Status> {
        if !heavy::is_large(input_bytes) {
            return Ok(work());
        }
        let most = self.invoker.max_timeout();
        let budget = caller_timeout.map_or(most, |timeout| answer_within(timeout).min(most));
        self.invoker
            .heavy_work()
            .run(tenant, Some(Instant::now() + budget), work)
            .await
            .ok_or_else(|| {
                let error = InvokeError::CheckTimeout {
                    tool: tool.to_string(),
                    bytes: input_bytes,
                    after: budget,
                };
                super::status::invoke_status(error, None)
            })
    }
}

/// `ValidateToolInput`'s work: the input read into JSON and checked against the tool's schema.
fn validate_input(
    invoker: &Invoker,
    tenant: TenantId,
    tool: &ToolName,
    service: Option<&ServiceName>,
    input: Option<prost_types::Struct>,
) -> Result<ToolRef, Status> {
    let input = input_json(input.as_ref())?;
    invoker
        .validate(tenant, tool, service, &input)
        .map_err(|error| super::status::invoke_status(error, None))
}

fn input_json(input: Option<&prost_types::Struct>) -> Result<serde_json::Value, RegistryError> {
    match input {
        None => Ok(serde_json::json!({})),
        Some(input) => struct_to_json(input).map_err(|error| {
            RegistryError::invalid(
                format!("input{}", error.pointer),
                ViolationKind::Field,
                error.problem,
            )
        }),
    }
}

fn retry_policy(policy: Option<pb::RetryPolicy>) -> Result<Option<RetryPolicy>, RegistryError> {
    let Some(policy) = policy else {
        return Ok(None);
    };
    let duration = |value: Option<prost_types::Duration>, field: &str| {
        value.map(Duration::try_from).transpose().map_err(|_| {
            RegistryError::invalid(
                format!("retry_policy.{field}"),
                ViolationKind::Field,
                format!("{field} must be positive"),
            )
        })
    };
    let initial = duration(policy.initial_backoff, "initial_backoff")?;
    let max = duration(policy.max_backoff, "max_backoff")?;
    RetryPolicy::new(
        policy.max_attempts,
        initial,
        max,
        policy.multiplier,
        policy.jitter,
    )
    .map(Some)
    .map_err(|(field, problem)| {
        RegistryError::invalid(
            format!("retry_policy.{field}"),
            ViolationKind::Field,
            problem,
        )
    })
}

fn failed_status(failed: Failed) -> Status {
    let invocation_id = failed.record.map(|record| record.invocation_id.clone());
    super::status::invoke_status(failed.error, invocation_id)
}

impl InvokeWire for InvokeApi {
    /// `InvokeTool` as served, over its wire twins (see [`super::invoke_wire`]); the
    /// `ToolInvokeService` method below converts to and from them.
    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "InvokeTool", tenant, correlation_id, tool)
    )]
    async fn invoke_wire(
        &self,
        request: Request<InvokeToolRequestWire>,
    ) -> Result<InvokeToolResponseWire, Status> {
        let caller_timeout = caller_timeout(&request);
        let trace = call_trace(&request);
        let (meta, request) = accept(request)?;
        tracing::Span::current().record("tool", request.tool_name.as_str());
        let tool = convert::tool_name("tool_name", &request.tool_name)?;
        let service = convert::optional_service_name("service_name", &request.service_name)?;
        let input_bytes = request
            .input
            .as_ref()
            .map_or(0, |input| input.as_bytes().len());
        let raw_input = request.input.map(Arc::new);
        let raw = raw_input.clone();
        let input = self
            .work_on_input(meta.tenant, &tool, input_bytes, caller_timeout, move || {
                raw_input_json(raw.as_deref())
            })
            .await??;
        let invocation = Invocation {
            tenant: meta.tenant,
            correlation_id: meta.correlation_id.clone(),
            tool,
            service,
            input,
            input_wire: raw_input.map(|input| WireForm(input)),
            input_bytes,
            idempotency_key: Some(request.idempotency_key).filter(|key| !key.is_empty()),
            retry: retry_policy(request.retry_policy)?,
            caller_timeout,
            trace,
            progress: None,
        };
        let invoked = self
            .invoker
            .invoke(invocation)
            .await
            .map_err(failed_status)?;
        let output = invoked
            .output_wire
            .and_then(RawMessage::from_wire)
            .unwrap_or_else(|| RawMessage::encode(&json_to_value(&invoked.output)));
        Ok(InvokeToolResponseWire {
            meta: Some(meta.response()),
            output: Some(output),
            warnings: invoked.warnings,
            record: Some(record_bytes(&invoked.record)),
        })
    }
}

/// The input as JSON: an absent one is `{}`; bytes that are no `Struct`, or a value with no
/// JSON form, are the caller's error.
fn raw_input_json(input: Option<&RawMessage>) -> Result<serde_json::Value, RegistryError> {
    let Some(input) = input else {
        return Ok(serde_json::json!({}));
    };
    struct_bytes_to_json(input.as_bytes()).map_err(|error| match error {
        RawJsonError::NoJsonForm(error) => RegistryError::invalid(
            format!("input{}", error.pointer),
            ViolationKind::Field,
            error.problem,
        ),
        malformed @ RawJsonError::Malformed { .. } => {
            RegistryError::invalid("input", ViolationKind::Field, malformed.to_string())
        }
    })
}

#[tonic::async_trait]
impl ToolInvokeService for InvokeApi {
    /// Served by [`super::invoke_wire::InvokeServer`] through [`InvokeWire::invoke_wire`]; this
    /// form is for the generated server alone.
    async fn invoke_tool(
        &self,
        request: Request<pb::InvokeToolRequest>,
    ) -> Result<Response<pb::InvokeToolResponse>, Status> {
        let (metadata, extensions, request) = request.into_parts();
        let wire = InvokeToolRequestWire {
            meta: request.meta,
            tool_name: request.tool_name,
            service_name: request.service_name,
            input: request.input.as_ref().map(RawMessage::encode),
            idempotency_key: request.idempotency_key,
            retry_policy: request.retry_policy,
        };
        let answer = self
            .invoke_wire(Request::from_parts(metadata, extensions, wire))
            .await?;
        let output = answer
            .output
            .map(|raw| raw.decode::<prost_types::Value>())
            .transpose()
            .map_err(|error| Status::internal(format!("tool output: {error}")))?;
        let record = answer
            .record
            .map(|raw| raw.decode::<pb::InvocationRecord>())
            .transpose()
            .map_err(|error| Status::internal(format!("invocation record: {error}")))?;
        Ok(Response::new(pb::InvokeToolResponse {
            meta: answer.meta,
            output,
            warnings: answer.warnings,
            record,
        }))
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "ValidateToolInput", tenant, correlation_id)
    )]
    async fn validate_tool_input(
        &self,
        request: Request<pb::ValidateToolInputRequest>,
    ) -> Result<Response<pb::ValidateToolInputResponse>, Status> {
        let caller_timeout = caller_timeout(&request);
        let (meta, request) = accept(request)?;
        let tool = convert::tool_name("tool_name", &request.tool_name)?;
        let service = convert::optional_service_name("service_name", &request.service_name)?;
        let input_bytes = request
            .input
            .as_ref()
            .map_or(0, prost::Message::encoded_len);
        let tenant = meta.tenant;
        let (invoker, for_work) = (self.invoker.clone(), tool.clone());
        let found = self
            .work_on_input(tenant, &tool, input_bytes, caller_timeout, move || {
                validate_input(&invoker, tenant, &for_work, service.as_ref(), request.input)
            })
            .await??;
        Ok(Response::new(pb::ValidateToolInputResponse {
            meta: Some(meta.response()),
            service_name: found.service.name.to_string(),
            definition_sha256: found.tool.definition_sha256.clone(),
        }))
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "ListInvocationRecords", tenant, correlation_id)
    )]
    async fn list_invocation_records(
        &self,
        request: Request<pb::ListInvocationRecordsRequest>,
    ) -> Result<Response<pb::ListInvocationRecordsResponse>, Status> {
        let (meta, request) = accept(request)?;
        let status = match request.status {
            0 => None,
            value => Some(status_from_pb(value).ok_or_else(|| {
                RegistryError::invalid(
                    "status",
                    ViolationKind::Field,
                    format!("unknown invocation status {value}"),
                )
            })?),
        };
        let filter = RecordFilter {
            tool_name: Some(request.tool_name).filter(|s| !s.is_empty()),
            service_name: Some(request.service_name).filter(|s| !s.is_empty()),
            correlation_id: Some(request.correlation_id).filter(|s| !s.is_empty()),
            status,
            trace_id: trace_id_filter(request.trace_id)?,
        };
        let size = paging::page_size(request.page_size)?;
        let query = format!("records|{filter:?}");
        let before = paging::decode_sequence_token(&request.page_token, &query)?;
        let log = self.invoker.records();
        let held = log.list_held(meta.tenant, &filter, before, size + 1);
        let mut records = held.records;
        // Past what memory holds: read on in the files, off the serving threads.
        let mut resume_below = None;
        if records.len() <= size
            && let Some(below) = held.files_continue_below
        {
            let (log, tenant, wanted) = (Arc::clone(log), meta.tenant, size + 1 - records.len());
            let older = heavy::blocking(move || {
                log.list_in_files(tenant, &filter, (below, wanted), FILE_BYTES_PER_PAGE)
            })
            .await
            .map_err(|error| Status::internal(format!("record listing failed: {error}")))?
            .map_err(|error| Status::internal(error.to_string()))?;
            records.extend(older.records.into_iter().map(Arc::new));
            resume_below = older.resume_below;
        }
        let next_page_token = if records.len() > size {
            records.truncate(size);
            paging::encode_sequence_token(records[size - 1].sequence, &query)
        } else if let Some(below) = resume_below {
            // A short page that stopped reading the files: the next one goes on below it.
            paging::encode_sequence_token(below, &query)
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListInvocationRecordsResponse {
            meta: Some(meta.response()),
            records: records.iter().map(|record| record_to_pb(record)).collect(),
            next_page_token,
        }))
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "GetInvocationRecord", tenant, correlation_id)
    )]
    async fn get_invocation_record(
        &self,
        request: Request<pb::GetInvocationRecordRequest>,
    ) -> Result<Response<pb::GetInvocationRecordResponse>, Status> {
        let (meta, request) = accept(request)?;
        let invocation_id = invocation_id(&request.invocation_id)?;
        let records = self.invoker.records();
        let found = match records.get(meta.tenant, &invocation_id) {
            Some(record) => Some(record),
            // Older than memory holds: read the files, off the serving threads.
            None => {
                let (records, tenant) = (Arc::clone(records), meta.tenant);
                let id = invocation_id.clone();
                heavy::blocking(move || records.find(tenant, &id))
                    .await
                    .map_err(|error| Status::internal(format!("record lookup failed: {error}")))?
                    .map_err(|error| Status::internal(error.to_string()))?
            }
        };
        let record = found.ok_or_else(|| {
            super::status::not_found(
                "RESOURCE_NOT_FOUND",
                format!(
                    "tenant {} has no invocation record {invocation_id}",
                    meta.tenant
                ),
                vec![("invocation_id", invocation_id.clone())],
            )
        })?;
        Ok(Response::new(pb::GetInvocationRecordResponse {
            meta: Some(meta.response()),
            record: Some(record_to_pb(&record)),
        }))
    }
}

fn status_from_pb(value: i32) -> Option<InvocationStatus> {
    Some(match pb::InvocationStatus::try_from(value).ok()? {
        pb::InvocationStatus::Unspecified => return None,
        pb::InvocationStatus::Succeeded => InvocationStatus::Succeeded,
        pb::InvocationStatus::InvalidInput => InvocationStatus::InvalidInput,
        pb::InvocationStatus::Rejected => InvocationStatus::Rejected,
        pb::InvocationStatus::RateLimited => InvocationStatus::RateLimited,
        pb::InvocationStatus::TimedOut => InvocationStatus::TimedOut,
        pb::InvocationStatus::Unavailable => InvocationStatus::Unavailable,
        pb::InvocationStatus::Failed => InvocationStatus::Failed,
        pb::InvocationStatus::Cancelled => InvocationStatus::Cancelled,
    })
}

pub(crate) fn status_to_pb(status: InvocationStatus) -> pb::InvocationStatus {
    match status {
        InvocationStatus::Succeeded => pb::InvocationStatus::Succeeded,
        InvocationStatus::InvalidInput => pb::InvocationStatus::InvalidInput,
        InvocationStatus::Rejected => pb::InvocationStatus::Rejected,
        InvocationStatus::RateLimited => pb::InvocationStatus::RateLimited,
        InvocationStatus::TimedOut => pb::InvocationStatus::TimedOut,
        InvocationStatus::Unavailable => pb::InvocationStatus::Unavailable,
        InvocationStatus::Failed => pb::InvocationStatus::Failed,
        InvocationStatus::Cancelled => pb::InvocationStatus::Cancelled,
    }
}

/// A record's RFC 3339 time as a protobuf `Timestamp`.
pub(super) fn record_timestamp(text: &str) -> Option<prost_types::Timestamp> {
    humantime::parse_rfc3339(text).ok().map(Into::into)
}

/// A record's duration as a protobuf `Duration`.
pub(super) fn record_duration(micros: u64) -> Option<prost_types::Duration> {
    Duration::from_micros(micros).try_into().ok()
}

/// The id of the record asked for, in the form records carry (a lowercase hyphenated UUID), or
/// INVALID_ARGUMENT: an id that is no UUID names no record, and looking it up would read through
/// every file of the record log for nothing.
fn invocation_id(given: &str) -> Result<String, RegistryError> {
    let uuid = uuid::Uuid::try_parse(given).map_err(|_| {
        RegistryError::invalid(
            "invocation_id",
            ViolationKind::Field,
            format!(
                "{} is not an invocation id: a UUID, as InvokeTool's answer and \
                 ListInvocationRecords give it",
                shown(given)
            ),
        )
    })?;
    Ok(uuid.hyphenated().to_string())
}

/// A listing's `trace_id` filter: empty for none, else a trace id as records keep them.
fn trace_id_filter(trace_id: String) -> Result<Option<String>, RegistryError> {
    if trace_id.is_empty() {
        return Ok(None);
    }
    if !is_trace_id(&trace_id) {
        return Err(RegistryError::invalid(
            "trace_id",
            ViolationKind::Field,
            format!(
                "{} is not a W3C trace id: 32 lowercase hex digits, not all zero, as in a \
                 traceparent's second field",
                shown(&trace_id)
            ),
        ));
    }
    Ok(Some(trace_id))
}

/// The wire form of a record.
pub fn record_to_pb(record: &InvocationRecord) -> pb::InvocationRecord {
    pb::InvocationRecord {
        invocation_id: record.invocation_id.clone(),
        sequence: record.sequence,
        tenant_id: record.tenant_id,
        correlation_id: record.correlation_id.clone(),
        tool_name: record.tool_name.clone(),
        service_name: record.service_name.clone(),
        definition_sha256: record.definition_sha256.clone(),
        input_sha256: record.input_sha256.clone(),
        output_sha256: record.output_sha256.clone(),
        started_at: record_timestamp(&record.started_at),
        finished_at: record_timestamp(&record.finished_at),
        duration: record_duration(record.duration_us),
        attempts: record.attempts,
        status: status_to_pb(record.status) as i32,
        error_reason: record.error_reason.clone(),
        prev_record_sha256: record.prev_record_sha256.clone(),
        record_sha256: record.record_sha256.clone(),
        trace_id: record.trace_id.clone(),
    }
}
