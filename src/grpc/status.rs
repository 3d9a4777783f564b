//! The one mapping from domain errors to `tonic::Status`, with google.rpc details: ErrorInfo
//! on every error (reason in the seed 004 categories), BadRequest field violations where a
//! field is at fault, PreconditionFailure listing the candidates of an ambiguous name.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{
    ErrorDetails, FieldViolation as PbFieldViolation, PreconditionViolation, StatusExt,
};

use crate::envelope::EnvelopeError;
use crate::registry::{FieldViolation, RegistryError, ViolationKind};

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
    let reason = violations
        .first()
        .map_or("VALIDATION_FIELD", |first| reason_of(first.kind));
    let metadata: HashMap<String, String> =
        [("violations".to_owned(), violations.len().to_string())]
            .into_iter()
            .collect();
    let mut details = ErrorDetails::with_error_info(reason, ERROR_DOMAIN, metadata);
    details.set_bad_request(
        violations
            .iter()
            .map(|violation| PbFieldViolation::new(&violation.field, &violation.description))
            .collect::<Vec<_>>(),
    );
    Status::with_error_details(Code::InvalidArgument, message, details)
}

impl From<RegistryError> for Status {
    fn from(error: RegistryError) -> Self {
        let message = error.to_string();
        let (code, message, details) = match error {
            RegistryError::InvalidArgument(violations) => return bad_request(message, &violations),
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
                vec![
                    ("tool_name", tool.to_string()),
                    (
                        "service_name",
                        service.map(|s| s.to_string()).unwrap_or_default(),
                    ),
                ],
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
            RegistryError::WatchLagged { missed } => status(
                Code::Aborted,
                message,
                "RESOURCE_WATCH_LAGGED",
                vec![("missed_events", missed.to_string())],
            ),
        };
        Status::with_error_details(code, message, details)
    }
}

impl From<EnvelopeError> for Status {
    fn from(error: EnvelopeError) -> Self {
        let field = match &error {
            EnvelopeError::InvalidEnvelopeId(_) => "meta.envelope_id",
            EnvelopeError::InvalidCorrelationId => "meta.correlation_id",
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
