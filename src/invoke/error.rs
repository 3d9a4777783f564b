//! The invocation engine's errors; `grpc::status` maps each to a status code and details.

use std::time::Duration;

use super::caller::ProviderFailure;
use super::records::RecordError;
use crate::registry::{FieldViolation, RegistryError};

/// Everything that can stop an invocation.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// The tool could not be resolved: not registered, or ambiguous.
    #[error(transparent)]
    Resolve(RegistryError),
    /// The input does not match the tool's schema.
    #[error("input does not match the schema of tool {tool}: {}", .violations.first().map(|v| format!("{}: {}", v.field, v.description)).unwrap_or_default())]
    InvalidInput {
        /// The tool.
        tool: String,
        /// One violation per schema error, with JSON pointers.
        violations: Vec<FieldViolation>,
    },
    /// A rate limit was reached.
    #[error("rate limit of {scope} reached; retry in {} ms", .retry_after.as_millis())]
    RateLimited {
        /// Which bucket.
        scope: String,
        /// When to come back.
        retry_after: Duration,
    },
    /// As many calls to the service as the server allows are in flight already; the provider
    /// was not called.
    #[error(
        "{limit} calls of this tenant to service {service} are in flight already, the most \
         allowed (max_in_flight_per_service); retry once some have finished, or raise the \
         setting if the provider can take more"
    )]
    TooManyInFlight {
        /// The service.
        service: String,
        /// The bound.
        limit: usize,
    },
    /// The service registered no endpoint to call.
    #[error("service {service} registered no endpoint, so its tools cannot be invoked")]
    NoEndpoint {
        /// The service.
        service: String,
    },
    /// No live instance of the service registered the tool as it is listed now: replicas of
    /// another version are coming or going.
    #[error(
        "no live instance of service {service} registered tool {tool} as it is listed now \
         (replicas of another version are coming or going); try again"
    )]
    NoInstanceOffers {
        /// The service.
        service: String,
        /// The tool.
        tool: String,
    },
    /// The provider is failing its health checks.
    #[error("provider of service {service} at {endpoint} is failing its health checks: {why}")]
    ProviderUnhealthy {
        /// The service.
        service: String,
        /// Its endpoint.
        endpoint: String,
        /// What the last check found.
        why: String,
    },
    /// The deadline passed.
    #[error("tool {tool} did not answer within {} ms ({attempts} attempt(s)); the call was cancelled", .after.as_millis())]
    Timeout {
        /// The tool.
        tool: String,
        /// The deadline that passed.
        after: Duration,
        /// Provider calls made.
        attempts: u32,
    },
    /// The provider answered with an error, or could not be reached.
    #[error("tool {tool} failed after {attempts} attempt(s): {}", .failure.message)]
    Provider {
        /// The tool.
        tool: String,
        /// What the provider said.
        failure: ProviderFailure,
        /// Provider calls made.
        attempts: u32,
    },
    /// The deadline passed before a large input was read, digested and checked against the
    /// tool's schema (see [`super::heavy`]); the tool was not called.
    #[error(
        "the input ({bytes} bytes) could not be checked against the schema of tool {tool} \
         within {} ms, so the tool was not called; send a smaller input or allow a longer \
         deadline",
        .after.as_millis()
    )]
    CheckTimeout {
        /// The tool.
        tool: String,
        /// The input's size as it arrived.
        bytes: usize,
        /// The deadline that passed.
        after: Duration,
    },
    /// The tool answered, but the deadline passed before its large output was read, digested
    /// and checked against the tool's output schema (see [`super::heavy`]); the output is not
    /// returned.
    #[error(
        "tool {tool} answered, but its output ({bytes} bytes) could not be checked against its \
         output schema within {} ms, so it is not returned; allow a longer deadline, or have \
         the tool answer with less",
        .after.as_millis()
    )]
    OutputCheckTimeout {
        /// The tool.
        tool: String,
        /// The output's size as it arrived.
        bytes: usize,
        /// The deadline that passed.
        after: Duration,
        /// Provider calls made.
        attempts: u32,
    },
    /// The tool's registered schema could not be compiled again for checking its input (it
    /// compiled at registration, so this is a bug); nothing was called.
    #[error("cannot check the input of tool {tool}: {problem}")]
    SchemaUnavailable {
        /// The tool.
        tool: String,
        /// What went wrong.
        problem: String,
    },
    /// The invocation record could not be written, so no answer is given.
    #[error("cannot write the invocation record: {0}")]
    Records(#[from] RecordError),
}
