//! The one mapping from domain errors to `tonic::Status`, with google.rpc details: ErrorInfo
//! on every error (reason in the seed 004 categories), BadRequest field violations where a
//! field is at fault, PreconditionFailure listing the candidates of an ambiguous name,
//! QuotaFailure naming the quota a refused registration or agent would break; PERMISSION_DENIED
//! (RESOURCE_ACCESS_DENIED) for a tenant the caller is not granted.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{
    ErrorDetails, FieldViolation as PbFieldViolation, PreconditionViolation, QuotaViolation,
    StatusExt,
};

use std::time::Duration;

use crate::access::AccessError;
use crate::agent::{AgentError, SentinelError};
use crate::envelope::EnvelopeError;
use crate::invoke::caller::FailureKind;
use crate::invoke::{self, InvokeError};
use crate::registry::quota::QuotaBreach;
use crate::registry::{FieldViolation, RegistryError, ViolationKind};
use crate::shown::clipped;

/// The ErrorInfo domain of every toolplane error.
pub const ERROR_DOMAIN: &str = "toolplane";

fn reason_of(kind: ViolationKind) -> &'static str {
    match kind {
        ViolationKind::Name => "VALIDATION_NAME",
        ViolationKind::Schema => "VALIDATION_SCHEMA",
        ViolationKind::Field => "VALIDATION_FIELD",
    }
}

fn status(
    code: Code,
    message: String,
    reason: &str,
    metadata: Vec<(&str, String)>,
) -> (Code, String, ErrorDetails) {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
    (
        code,
        message,
        ErrorDetails::with_error_info(reason, ERROR_DOMAIN, metadata),
    )
}

fn bad_request(message: String, violations: &[FieldViolation]) -> Status {
    bad_request_with_reason(message, violations, first_reason(violations), Vec::new())
}

/// The ErrorInfo reason of a request refused for `violations`: that of the first.
fn first_reason(violations: &[FieldViolation]) -> &'static str {
    violations
        .first()
        .map_or("VALIDATION_FIELD", |first| reason_of(first.kind))
}

fn bad_request_with_reason(
    message: String,
    violations: &[FieldViolation],
    reason: &str,
    extra: Vec<(&str, String)>,
) -> Status {
    let mut metadata: HashMap<String, String> =
        [("violations".to_owned(), violations.len().to_string())]
            .into_iter()
            .collect();
    metadata.extend(
        extra
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value)),
    );
    let shown = shown_violations(violations);
    if shown.len() < violations.len() {
        metadata.insert("violations_shown".to_owned(), shown.len().to_string());
    }
    let mut details = ErrorDetails::with_error_info(reason, ERROR_DOMAIN, metadata);
    details.set_bad_request(shown);
    answer(Code::InvalidArgument, message, details)
}

/// The most bytes of a status's message; past them it is cut, with its size.
const MAX_MESSAGE_BYTES: usize = 1024;
/// The most bytes of field violations (fields and descriptions) a BadRequest carries; the
/// violations past them are left out, and ErrorInfo's `violations_shown` says how many it has.
const MAX_VIOLATION_BYTES: usize = 3072;
/// The most bytes of one violation's field or description.
const MAX_VIOLATION_PART_BYTES: usize = 1024;

/// `violations` as a BadRequest carries them: each field and description cut at
/// [`MAX_VIOLATION_PART_BYTES`], and as many as fit in [`MAX_VIOLATION_BYTES`] (the first one
/// always).
fn shown_violations(violations: &[FieldViolation]) -> Vec<PbFieldViolation> {
    let mut bytes = 0;
    let mut shown = Vec::new();
    for violation in violations {
        let field = clipped(&violation.field, MAX_VIOLATION_PART_BYTES);
        let description = clipped(&violation.description, MAX_VIOLATION_PART_BYTES);
        bytes += field.len() + description.len();
        if bytes > MAX_VIOLATION_BYTES && !shown.is_empty() {
            break;
        }
        shown.push(PbFieldViolation::new(field, description));
    }
    shown
}

/// A status of `code` with `message` (cut at [`MAX_MESSAGE_BYTES`]) and `details`. Its message
/// and details travel in trailers, which gRPC clients bound (gRPC core to 8 KB of metadata by
/// default, refusing some answers past it and all past 16 KB), so a status repeating a large
/// input would reach such a caller as RESOURCE_EXHAUSTED "Stream removed", not as itself.
fn answer(code: Code, message: String, details: ErrorDetails) -> Status {
    let message = match clipped(&message, MAX_MESSAGE_BYTES) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(cut) => cut,
    };
    Status::with_error_details(code, message, details)
}

impl From<RegistryError> for Status {
    fn from(error: RegistryError) -> Self {
        registry_status(error, Vec::new())
    }
}

/// The status of `error`, its ErrorInfo's metadata with `extra` added (an invocation's id).
fn registry_status(error: RegistryError, extra: Vec<(&str, String)>) -> Status {
    let message = error.to_string();
    let (code, message, mut details) = match error {
        RegistryError::InvalidArgument(violations) => {
            let reason = first_reason(&violations);
            return bad_request_with_reason(message, &violations, reason, extra);
        }
        RegistryError::ServiceNotFound { service } => status(
            Code::NotFound,
            message,
            "RESOURCE_NOT_FOUND",
            vec![("service_name", service.to_string())],
        ),
        RegistryError::ToolNotFound { tool, service } => status(
            Code::NotFound,
            message,
            "RESOURCE_NOT_FOUND",
            [("tool_name", tool.to_string())]
                .into_iter()
                .chain(service.map(|service| ("service_name", service.to_string())))
                .collect(),
        ),
        RegistryError::LeaseNotFound { service, lease_id } => status(
            Code::NotFound,
            message,
            "RESOURCE_LEASE_NOT_FOUND",
            vec![
                ("service_name", service.to_string()),
                ("lease_id", lease_id),
            ],
        ),
        RegistryError::AmbiguousTool { tool, candidates } => {
            let names: Vec<String> = candidates.iter().map(ToString::to_string).collect();
            let (code, message, mut details) = status(
                Code::FailedPrecondition,
                message,
                "RESOURCE_AMBIGUOUS",
                vec![
                    ("tool_name", tool.to_string()),
                    ("candidates", names.join(",")),
                ],
            );
            details.set_precondition_failure(
                names
                    .iter()
                    .map(|name| {
                        PreconditionViolation::new(
                            "AMBIGUOUS_TOOL",
                            format!("services/{name}/tools/{tool}"),
                            format!("service {name} offers tool {tool}"),
                        )
                    })
                    .collect::<Vec<_>>(),
            );
            (code, message, details)
        }
        RegistryError::QuotaExceeded {
            tenant,
            service,
            breach,
        } => {
            let QuotaBreach {
                resource,
                limit,
                would_have,
            } = breach;
            quota_exceeded(
                message,
                vec![
                    ("service_name", service.to_string()),
                    (resource.setting(), limit.to_string()),
                    ("would_have", would_have.to_string()),
                ],
                QuotaViolation::new(
                    format!("tenants/{tenant}/{}", resource.subject(service.as_str())),
                    format!("at most {limit} {} registered at once", resource.unit()),
                ),
            )
        }
        RegistryError::WatchLagged { missed } => status(
            Code::Aborted,
            message,
            "RESOURCE_WATCH_LAGGED",
            vec![("missed_events", missed.to_string())],
        ),
        RegistryError::WatchLaggedBytes { max_bytes } => status(
            Code::Aborted,
            message,
            "RESOURCE_WATCH_LAGGED",
            vec![("max_buffered_bytes", max_bytes.to_string())],
        ),
    };
    if !extra.is_empty()
        && let Some(info) = details.error_info()
    {
        let mut metadata = info.metadata.clone();
        metadata.extend(
            extra
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value)),
        );
        let reason = info.reason.clone();
        details.set_error_info(reason, ERROR_DOMAIN, metadata);
    }
    answer(code, message, details)
}

/// RESOURCE_EXHAUSTED with reason RESOURCE_QUOTA_EXCEEDED and the QuotaFailure `violation`.
fn quota_exceeded(
    message: String,
    metadata: Vec<(&str, String)>,
    violation: QuotaViolation,
) -> (Code, String, ErrorDetails) {
    let (code, message, mut details) = status(
        Code::ResourceExhausted,
        message,
        "RESOURCE_QUOTA_EXCEEDED",
        metadata,
    );
    details.set_quota_failure(vec![violation]);
    (code, message, details)
}

/// A NOT_FOUND status with ErrorInfo carrying `metadata`.
pub fn not_found(reason: &str, message: String, metadata: Vec<(&str, String)>) -> Status {
    let (code, message, details) = status(Code::NotFound, message, reason, metadata);
    answer(code, message, details)
}

/// The status of a failed invocation; `invocation_id` names its record when one was written.
pub fn invoke_status(error: InvokeError, invocation_id: Option<String>) -> Status {
    let message = error.to_string();
    let reason = invoke::reason_of(&error);
    let mut metadata: Vec<(&str, String)> = invocation_id
        .map(|id| ("invocation_id", id))
        .into_iter()
        .collect();
    let (code, extra_details): (Code, Option<Duration>) = match error {
        InvokeError::Resolve(inner) => {
            return registry_status(inner, metadata);
        }
        InvokeError::InvalidInput { tool, violations } => {
            metadata.push(("tool_name", tool));
            return bad_request_with_reason(message, &violations, &reason, metadata);
        }
        InvokeError::RateLimited { scope, retry_after } => {
            metadata.push(("scope", scope));
            (Code::ResourceExhausted, Some(retry_after))
        }
        InvokeError::TooManyInFlight { service, limit } => {
            metadata.push(("service_name", service));
            metadata.push(("setting", "max_in_flight_per_service".to_owned()));
            metadata.push(("limit", limit.to_string()));
            (Code::ResourceExhausted, None)
        }
        InvokeError::NoEndpoint { service } => {
            metadata.push(("service_name", service));
            (Code::FailedPrecondition, None)
        }
        InvokeError::NoInstanceOffers { service, tool } => {
            metadata.push(("service_name", service));
            metadata.push(("tool_name", tool));
            (Code::Unavailable, None)
        }
        InvokeError::ProviderUnhealthy {
            service, endpoint, ..
        } => {
            metadata.push(("service_name", service));
            metadata.push(("endpoint", endpoint));
            (Code::Unavailable, None)
        }
        InvokeError::Timeout { tool, attempts, .. } => {
            metadata.push(("tool_name", tool));
            metadata.push(("attempts", attempts.to_string()));
            (Code::DeadlineExceeded, None)
        }
        InvokeError::Provider {
            tool,
            failure,
            attempts,
        } => {
            metadata.push(("tool_name", tool));
            metadata.push(("attempts", attempts.to_string()));
            let code = match failure.kind {
                FailureKind::Unavailable => Code::Unavailable,
                FailureKind::ResourceExhausted => Code::ResourceExhausted,
                FailureKind::DeadlineExceeded => Code::DeadlineExceeded,
                FailureKind::Other(number) => Code::from(number),
            };
            (code, None)
        }
        InvokeError::CheckTimeout { tool, bytes, .. } => {
            metadata.push(("tool_name", tool));
            metadata.push(("input_bytes", bytes.to_string()));
            (Code::DeadlineExceeded, None)
        }
        InvokeError::OutputCheckTimeout {
            tool,
            bytes,
            attempts,
            ..
        } => {
            metadata.push(("tool_name", tool));
            metadata.push(("output_bytes", bytes.to_string()));
            metadata.push(("attempts", attempts.to_string()));
            (Code::DeadlineExceeded, None)
        }
        InvokeError::Records(_) => (Code::Internal, None),
        InvokeError::SchemaUnavailable { tool, .. } => {
            metadata.push(("tool_name", tool));
            (Code::Internal, None)
        }
    };
    let (code, message, mut details) = status(code, message, &reason, metadata);
    if let Some(retry_after) = extra_details {
        details.set_retry_info(Some(retry_after));
    }
    answer(code, message, details)
}

impl From<AgentError> for Status {
    fn from(error: AgentError) -> Self {
        let message = error.to_string();
        let (code, reason, metadata) = match error {
            AgentError::Domain(SentinelError::InvalidStateTransition { from, to }) => (
                Code::FailedPrecondition,
                "AGENT_INVALID_TRANSITION",
                vec![("from", from.to_string()), ("to", to.to_string())],
            ),
            AgentError::Domain(SentinelError::InvalidMessage { reason }) => {
                return bad_request_with_reason(
                    message,
                    &[FieldViolation::new(
                        "request.messages",
                        ViolationKind::Field,
                        reason,
                    )],
                    "VALIDATION_MESSAGE",
                    Vec::new(),
                );
            }
            AgentError::Domain(SentinelError::DomainViolation { rule }) => {
                return bad_request_with_reason(
                    message,
                    &[FieldViolation::new("request", ViolationKind::Field, rule)],
                    "VALIDATION_FIELD",
                    Vec::new(),
                );
            }
            AgentError::InvalidField { field, problem } => {
                return bad_request(
                    message,
                    &[FieldViolation::new(field, ViolationKind::Field, problem)],
                );
            }
            AgentError::NotFound(agent) => {
                (Code::NotFound, "RESOURCE_NOT_FOUND", vec![("agent", agent)])
            }
            AgentError::NameTaken(name) => (
                Code::AlreadyExists,
                "RESOURCE_ALREADY_EXISTS",
                vec![("name", name)],
            ),
            // A client that sends its messages' ids learns that a Complete it retries had
            // taken them (the first attempt's turn ran).
            AgentError::MessageIdTaken { index, id } => (
                Code::AlreadyExists,
                "RESOURCE_ALREADY_EXISTS",
                vec![
                    ("field", format!("request.messages[{index}].id")),
                    ("message_id", id.to_string()),
                ],
            ),
            // Not idle is busy to a caller: no turn can start until the agent is idle again.
            AgentError::Busy { id, state } | AgentError::NotIdle { id, state } => (
                Code::FailedPrecondition,
                "AGENT_BUSY",
                vec![("agent_id", id.to_string()), ("state", state.to_string())],
            ),
            AgentError::QuotaExceeded { tenant, limit } => {
                let (code, message, details) = quota_exceeded(
                    message,
                    vec![("max_agents_per_tenant", limit.to_string())],
                    QuotaViolation::new(
                        format!("tenants/{tenant}/agents"),
                        format!("at most {limit} agents at once"),
                    ),
                );
                return answer(code, message, details);
            }
            AgentError::NotSaved { id, .. } => (
                Code::Internal,
                "AGENT_NOT_SAVED",
                id.map(|id| ("agent_id", id.to_string()))
                    .into_iter()
                    .collect(),
            ),
            AgentError::TurnTooLarge { max, .. } => (
                Code::ResourceExhausted,
                "AGENT_TURN_TOO_LARGE",
                vec![("max_conversation_bytes", max.to_string())],
            ),
            AgentError::MessageTooLarge { max, .. } => (
                Code::ResourceExhausted,
                "AGENT_TURN_TOO_LARGE",
                vec![("max_message_bytes", max.to_string())],
            ),
            AgentError::Model(_) => (Code::Unavailable, "MODEL_UNAVAILABLE", Vec::new()),
            AgentError::Invoke(inner) => return invoke_status(inner, None),
        };
        let (code, message, details) = status(code, message, reason, metadata);
        answer(code, message, details)
    }
}

impl From<EnvelopeError> for Status {
    fn from(error: EnvelopeError) -> Self {
        let field = match &error {
            EnvelopeError::InvalidEnvelopeId(_) => "meta.envelope_id",
            EnvelopeError::InvalidCorrelationId => "meta.correlation_id",
            EnvelopeError::InvalidTenantHeader => crate::envelope::TENANT_HEADER,
            EnvelopeError::TenantHeaderDisagrees { .. } => "meta.tenant_id",
        };
        bad_request(
            error.to_string(),
            &[FieldViolation::new(
                field,
                ViolationKind::Field,
                error.to_string(),
            )],
        )
    }
}

impl From<AccessError> for Status {
    fn from(error: AccessError) -> Self {
        let message = error.to_string();
        let (code, message, details) = match error {
            AccessError::UnknownToken | AccessError::ForwardedCertificateUnreadable { .. } => {
                status(
                    Code::Unauthenticated,
                    message,
                    "RESOURCE_ACCESS_DENIED",
                    Vec::new(),
                )
            }
            AccessError::TenantNotGranted { tenant, caller, .. } => status(
                Code::PermissionDenied,
                message,
                "RESOURCE_ACCESS_DENIED",
                vec![("tenant", tenant.to_string()), ("caller", caller)],
            ),
        };
        answer(code, message, details)
    }
}
