//! The invocation path, step by step (see the module docs of [`super`]).

use crate::spans::Spans;
use crate::trace_context::TraceContext;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::caller::{FailureKind, ProgressSink, ProviderCall, ProviderCaller, WireForm};
use super::checks::{InspectedOutput, check_input, inspect_input, inspect_output};
use super::error::InvokeError;
use super::health::ProviderHealthBook;
use super::heavy::{self, HeavyWork};
use super::limits::RateLimits;
use super::policy::RetryPolicy;
use super::record_guard::{RecordGuard, reason_of};
use super::records::{InvocationRecord, InvocationStatus, RecordDraft, RecordLog};
use super::route::Route;
use crate::envelope::TenantId;
use crate::registry::{Capability, Registry, ServiceName, ToolName, ToolRef};

/// The most the engine answers ahead of the caller's deadline.
const CALLER_DEADLINE_MARGIN: Duration = Duration::from_millis(50);
/// How early a provider's deadline answer may come and still be the call's timeout: the
/// `grpc-timeout` it was sent is rounded down to whole milliseconds.
const DEADLINE_SLACK: Duration = Duration::from_millis(10);
/// The default longest time any call may take.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the server takes at most to answer a caller with `caller_timeout` left: a little
/// less (5%, at most 50 ms), so that a DEADLINE_EXCEEDED answer arrives before the caller's
/// own timer ends the call.
pub fn answer_within(caller_timeout: Duration) -> Duration {
    caller_timeout.saturating_sub((caller_timeout / 20).min(CALLER_DEADLINE_MARGIN))
}

/// One request to invoke a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The caller's tenant.
    pub tenant: TenantId,
    /// The caller's correlation id.
    pub correlation_id: String,
    /// The tool.
    pub tool: ToolName,
    /// The service, when the caller named one.
    pub service: Option<ServiceName>,
    /// The input.
    pub input: Value,
    /// The input in the transport's own form, passed on to the provider caller (see
    /// [`WireForm`]); `None` makes the caller convert `input`.
    pub input_wire: Option<WireForm>,
    /// The input's size as it arrived, in bytes (0 when not known): a large input is digested
    /// and checked off the serving threads ([`super::heavy`]).
    pub input_bytes: usize,
    /// Passed to the provider on every attempt.
    pub idempotency_key: Option<String>,
    /// The caller's retry policy.
    pub retry: Option<RetryPolicy>,
    /// What is left of the caller's own deadline.
    pub caller_timeout: Option<Duration>,
    /// The call's W3C trace context: the caller's, or its server span's when spans are
    /// exported. The parent of each attempt's span, else passed to the provider as it is.
    pub trace: Option<TraceContext>,
    /// Where the provider's progress reports go (MCP callers of MCP servers' tools have them
    /// passed on); `None` when the caller wants none.
    pub progress: Option<ProgressSink>,
}

/// A successful invocation.
#[derive(Debug, Clone)]
pub struct Invoked {
    /// The tool's output.
    pub output: Value,
    /// The same output in the provider transport's form, when it supplied one (see
    /// [`WireForm`]).
    pub output_wire: Option<WireForm>,
    /// The provider's warnings and output-schema mismatches.
    pub warnings: Vec<String>,
    /// Whether the output matches the tool's output schema (true when it has none).
    pub output_conforms: bool,
    /// The record written.
    pub record: Arc<InvocationRecord>,
}

/// A failed invocation: the error, and the record written for it (when writing worked).
#[derive(Debug)]
pub struct Failed {
    /// What went wrong.
    pub error: InvokeError,
    /// The record of the failure.
    pub record: Option<Arc<InvocationRecord>>,
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct InvokerOptions {
    /// The longest time any call may take, whatever the caller or tool say.
    pub max_timeout: Duration,
    /// Where large inputs and outputs are read, digested and checked, off the serving threads
    /// ([`super::heavy`]); share it with the provider caller.
    pub heavy_work: HeavyWork,
    /// Where each attempt's client span goes (none when spans are off).
    pub spans: Spans,
}

/// The invocation engine.
#[derive(Debug, Clone)]
pub struct Invoker {
    registry: Registry,
    caller: Arc<dyn ProviderCaller>,
    limits: Arc<RateLimits>,
    health: Arc<ProviderHealthBook>,
    records: Arc<RecordLog>,
    options: InvokerOptions,
}

impl Invoker {
    /// An engine over these parts.
    pub fn new(
        registry: Registry,
        caller: Arc<dyn ProviderCaller>,
        limits: Arc<RateLimits>,
        health: Arc<ProviderHealthBook>,
        records: Arc<RecordLog>,
        options: InvokerOptions,
    ) -> Self {
        Self {
            registry,
            caller,
            limits,
            health,
            records,
            options,
        }
    }

    /// The longest a call may take (`max_invoke_timeout`), whatever its caller allows.
    pub fn max_timeout(&self) -> Duration {
        self.options.max_timeout
    }

    /// The pool that works on large inputs off the serving threads.
    pub fn heavy_work(&self) -> &HeavyWork {
        &self.options.heavy_work
    }

    /// The record log.
    pub fn records(&self) -> &Arc<RecordLog> {
        &self.records
    }

    /// Resolves a tool and validates an input against it, calling nothing.
    pub fn validate(
        &self,
        tenant: TenantId,
        tool: &ToolName,
        service: Option<&ServiceName>,
        input: &Value,
    ) -> Result<ToolRef, InvokeError> {
        let found = self
            .registry
            .get_tool(tenant, tool, service)
            .map_err(InvokeError::Resolve)?;
        check_input(self.registry.validators(), &found, input)?;
        Ok(found)
    }

    /// The time a call may take: the least of what the caller has left (less a margin, so it
    /// gets DEADLINE_EXCEEDED with a TIMED_OUT record rather than its own local timeout), the
    /// tool's own limit and the server's.
    fn budget(&self, caller_timeout: Option<Duration>, found: Option<&ToolRef>) -> Duration {
        let caller_budget = caller_timeout.map(answer_within);
        let tool_limit = found
            .and_then(|found| found.tool.timeout_ms)
            .map(|ms| Duration::from_millis(ms.into()));
        [caller_budget, tool_limit, Some(self.options.max_timeout)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.options.max_timeout)
    }

    /// Runs one invocation end to end and records it.
    pub async fn invoke(&self, mut invocation: Invocation) -> Result<Invoked, Failed> {
        let started = Instant::now();
        // Shared by every attempt rather than copied into each.
        let input = Arc::new(std::mem::take(&mut invocation.input));
        let mut guard = RecordGuard {
            records: Arc::clone(&self.records),
            draft: Some(RecordDraft {
                invocation_id: uuid::Uuid::new_v4().to_string(),
                tenant: invocation.tenant,
                correlation_id: invocation.correlation_id.clone(),
                tool_name: invocation.tool.to_string(),
                service_name: String::new(),
                definition_sha256: String::new(),
                input_sha256: String::new(),
                output_sha256: String::new(),
                started_at: SystemTime::now(),
                finished_at: SystemTime::now(),
                attempts: 0,
                status: InvocationStatus::Cancelled,
                error_reason: String::new(),
                trace_id: invocation
                    .trace
                    .as_ref()
                    .map(|trace| trace.trace_id().to_owned())
                    .unwrap_or_default(),
            }),
        };
        let fail = |guard: &mut RecordGuard, status, error: InvokeError| {
            let reason = reason_of(&error);
            guard.fail(status, &reason, error)
        };

        let resolved = self.registry.get_tool(
            invocation.tenant,
            &invocation.tool,
            invocation.service.as_ref(),
        );
        let budget = self.budget(invocation.caller_timeout, resolved.as_ref().ok());
        let deadline = started + budget;
        let inspected = if heavy::is_large(invocation.input_bytes) {
            let validators = self.registry.validators().clone();
            let found = resolved.as_ref().ok().cloned();
            let input = Arc::clone(&input);
            let work = move || inspect_input(&validators, found.as_ref(), &input);
            let heavy_work = &self.options.heavy_work;
            match heavy_work
                .run(invocation.tenant, Some(deadline), work)
                .await
            {
                Some(inspected) => inspected,
                None => {
                    let error = InvokeError::CheckTimeout {
                        tool: invocation.tool.to_string(),
                        bytes: invocation.input_bytes,
                        after: budget,
                    };
                    return Err(fail(&mut guard, InvocationStatus::TimedOut, error));
                }
            }
        } else {
            inspect_input(self.registry.validators(), resolved.as_ref().ok(), &input)
        };
        if let Some(draft) = guard.draft.as_mut() {
            draft.input_sha256 = inspected.input_sha256;
        }
        let found = match resolved {
            Ok(found) => found,
            Err(error) => {
                return Err(fail(
                    &mut guard,
                    InvocationStatus::Rejected,
                    InvokeError::Resolve(error),
                ));
            }
        };
        if let Some(draft) = guard.draft.as_mut() {
            draft.service_name = found.service.name.to_string();
            draft.definition_sha256 = found.tool.definition_sha256.clone();
        }
        if let Err(error) = inspected.checked {
            return Err(fail(&mut guard, InvocationStatus::InvalidInput, error));
        }
        // Taken before a rate-limit token, so that a call refused here spends none.
        let in_flight = match self
            .limits
            .begin_call(invocation.tenant, found.service.name.as_str())
        {
            Ok(in_flight) => in_flight,
            Err(limit) => {
                let error = InvokeError::TooManyInFlight {
                    service: found.service.name.to_string(),
                    limit,
                };
                return Err(fail(&mut guard, InvocationStatus::RateLimited, error));
            }
        };
        if let Err(over) = self.limits.check(
            invocation.tenant,
            found.service.name.as_str(),
            found.tool.name.as_str(),
        ) {
            return Err(fail(
                &mut guard,
                InvocationStatus::RateLimited,
                InvokeError::RateLimited {
                    scope: over.scope,
                    retry_after: over.retry_after,
                },
            ));
        }
        let mut route = match Route::of(&found.service, &found.tool, &self.health) {
            Ok(route) => route,
            Err(error) => return Err(fail(&mut guard, InvocationStatus::Unavailable, error)),
        };

        let may_retry = found.tool.capabilities.contains(&Capability::Retry);
        let policy = invocation.retry.clone().filter(|_| may_retry);
        let max_attempts = policy.as_ref().map_or(1, |p| p.max_attempts);
        let mut attempt = 0;
        let mut input_wire = invocation.input_wire.take();
        let outcome = loop {
            attempt += 1;
            let endpoint = route.endpoint().to_owned();
            if let Some(draft) = guard.draft.as_mut() {
                draft.attempts = attempt;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let attempt_span = self.options.spans.provider_attempt(
                invocation.trace.as_ref(),
                found.service.name.as_str(),
                found.tool.name.as_str(),
                &endpoint,
                attempt,
            );
            let call = ProviderCall {
                endpoint,
                service: found.service.name.clone(),
                tool: found.tool.name.to_string(),
                input: Arc::clone(&input),
                input_wire: if attempt >= max_attempts {
                    input_wire.take()
                } else {
                    input_wire.clone()
                },
                tenant: invocation.tenant,
                correlation_id: invocation.correlation_id.clone(),
                idempotency_key: invocation.idempotency_key.clone(),
                attempt,
                timeout: remaining,
                trace: match &attempt_span {
                    Some(span) => Some(span.trace_context()),
                    None => invocation.trace.clone(),
                },
                progress: invocation.progress.clone(),
            };
            let result = match tokio::time::timeout(remaining, self.caller.call(call)).await {
                Ok(result) => result,
                Err(_) => {
                    if let Some(span) = attempt_span {
                        span.end(FailureKind::DEADLINE_EXCEEDED);
                    }
                    break Err((
                        InvocationStatus::TimedOut,
                        InvokeError::Timeout {
                            tool: found.tool.name.to_string(),
                            after: budget,
                            attempts: attempt,
                        },
                    ));
                }
            };
            if let Some(span) = attempt_span {
                span.end(
                    result
                        .as_ref()
                        .map_or_else(|failure| failure.kind.code(), |_| 0),
                );
            }
            match result {
                Ok(reply) => break Ok(reply),
                Err(failure)
                    if failure.kind.may_be_the_deadline()
                        && deadline.saturating_duration_since(Instant::now()) <= DEADLINE_SLACK =>
                {
                    break Err((
                        InvocationStatus::TimedOut,
                        InvokeError::Timeout {
                            tool: found.tool.name.to_string(),
                            after: budget,
                            attempts: attempt,
                        },
                    ));
                }
                // Never received: another instance takes it as the same attempt.
                Err(failure) if failure.unsent && route.can_move_on() => {
                    let unreachable = route.endpoint().to_owned();
                    route.move_on_unsent();
                    tracing::info!(
                        tenant = invocation.tenant.0,
                        correlation_id = %invocation.correlation_id,
                        tool = %invocation.tool,
                        reason = %failure.message,
                        next = route.endpoint(),
                        "provider instance unreachable; sending the call to another"
                    );
                    let why = format!("a call could not reach it: {}", failure.message);
                    self.health.mark_unhealthy(&unreachable, why);
                    attempt -= 1;
                }
                Err(failure) => {
                    let wait = policy
                        .as_ref()
                        .filter(|_| failure.kind.is_retryable() && attempt < max_attempts)
                        .map(|p| p.backoff(attempt));
                    // A wait past what the clock can count (a policy may name one of billions
                    // of years) is past the deadline too.
                    let in_time = |wait| {
                        Instant::now()
                            .checked_add(wait)
                            .is_some_and(|at| at < deadline)
                    };
                    match wait {
                        Some(wait) if in_time(wait) => {
                            // The RPC's span is at DEBUG (see `grpc::invoke`), so the event
                            // names the call itself.
                            tracing::info!(
                                tenant = invocation.tenant.0,
                                correlation_id = %invocation.correlation_id,
                                tool = %invocation.tool,
                                attempt,
                                wait_ms = wait.as_millis() as u64,
                                reason = %failure.reason,
                                "retrying tool call"
                            );
                            tokio::time::sleep(wait).await;
                            route.advance();
                        }
                        _ => {
                            let status = if failure.kind == FailureKind::Unavailable {
                                InvocationStatus::Unavailable
                            } else {
                                InvocationStatus::Failed
                            };
                            break Err((
                                status,
                                InvokeError::Provider {
                                    tool: found.tool.name.to_string(),
                                    failure,
                                    attempts: attempt,
                                },
                            ));
                        }
                    }
                }
            }
        };
        // The provider is done with the call; checking its output is toolplane's work.
        drop(in_flight);
        match outcome {
            Ok(reply) => {
                let validators = self.registry.validators();
                let inspected = if heavy::is_large(reply.output_bytes) {
                    let (validators, tool) = (validators.clone(), found.clone());
                    let work = move || inspect_output(&validators, &tool, reply.output);
                    // Bounded by the call's deadline too: past it, the caller is answered at
                    // the deadline (and the check is given up: `registry::stop_check`).
                    let heavy_work = &self.options.heavy_work;
                    match heavy_work
                        .run(invocation.tenant, Some(deadline), work)
                        .await
                    {
                        Some(inspected) => inspected,
                        None => {
                            let error = InvokeError::OutputCheckTimeout {
                                tool: found.tool.name.to_string(),
                                bytes: reply.output_bytes,
                                after: budget,
                                attempts: attempt,
                            };
                            return Err(fail(&mut guard, InvocationStatus::TimedOut, error));
                        }
                    }
                } else {
                    inspect_output(validators, &found, reply.output)
                };
                let InspectedOutput {
                    output,
                    output_sha256,
                    warnings: mismatches,
                    conforms,
                } = inspected;
                let mut warnings = reply.warnings;
                warnings.extend(mismatches);
                match guard.finish(InvocationStatus::Succeeded, "", output_sha256) {
                    Ok(record) => Ok(Invoked {
                        output,
                        output_wire: reply.output_wire,
                        warnings,
                        output_conforms: conforms,
                        record,
                    }),
                    Err(error) => Err(Failed {
                        error,
                        record: None,
                    }),
                }
            }
            Err((status, error)) => Err(fail(&mut guard, status, error)),
        }
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
