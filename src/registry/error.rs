//! The registry's errors. The gRPC layer maps each variant to a status code and google.rpc
//! details in one exhaustive match (`grpc::status`).

use super::model::{ServiceName, ToolName};
use super::quota::{self, QuotaBreach};
use crate::envelope::TenantId;

/// What kind of rule a field violation broke; it picks the ErrorInfo reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// A service or tool name is malformed or duplicated.
    Name,
    /// A JSON Schema does not compile or breaks a schema limit.
    Schema,
    /// Any other field is missing or malformed.
    Field,
}

/// One field of a request that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// The field's path in the request, e.g. `registration.tools[1].tool_schema`.
    pub field: String,
    /// What is wrong, in words a person can act on (naming the tool and JSON pointer where
    /// there is one).
    pub description: String,
    /// The kind of rule broken.
    pub kind: ViolationKind,
}

impl FieldViolation {
    /// A violation of `kind` at `field`.
    pub fn new(
        field: impl Into<String>,
        kind: ViolationKind,
        description: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
            kind,
        }
    }
}

/// Everything that can go wrong in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The request breaks one or more field rules; nothing was changed.
    #[error("invalid request: {}", summarize(.0))]
    InvalidArgument(Vec<FieldViolation>),
    /// No live service of that name in the caller's tenant.
    #[error("service {service} is not registered")]
    ServiceNotFound {
        /// The service asked for.
        service: ServiceName,
    },
    /// No live tool of that name (in that service, when one was named).
    #[error("tool {tool} is not registered{}", .service.as_ref().map(|s| format!(" by service {s}")).unwrap_or_default())]
    ToolNotFound {
        /// The tool asked for.
        tool: ToolName,
        /// The service named in the request, if any.
        service: Option<ServiceName>,
    },
    /// The lease is unknown or no longer the service's current one: register again.
    #[error(
        "lease {lease_id} of service {service} is unknown or has expired; register the service again"
    )]
    LeaseNotFound {
        /// The service named.
        service: ServiceName,
        /// The lease id sent.
        lease_id: String,
    },
    /// Several services offer the tool and none was named.
    #[error("tool {tool} is offered by several services ({}); name one with service_name", join(.candidates))]
    AmbiguousTool {
        /// The tool asked for.
        tool: ToolName,
        /// Every service offering it, sorted.
        candidates: Vec<ServiceName>,
    },
    /// A registration would take the tenant over one of its quotas; nothing was changed.
    #[error("{}", quota::breach_message(.tenant, .service.as_str(), .breach))]
    QuotaExceeded {
        /// The tenant.
        tenant: TenantId,
        /// The service that was not registered.
        service: ServiceName,
        /// The quota and what the tenant would have held.
        breach: QuotaBreach,
    },
    /// A watcher fell too far behind the stream of changes and was ended.
    #[error("watch fell behind by {missed} events; start a new watch")]
    WatchLagged {
        /// How many events it missed.
        missed: u64,
    },
    /// A watcher fell further behind than the bytes of changed services its tenant's channel
    /// holds (`watch_event_buffer_bytes`), and was ended.
    #[error(
        "watch fell behind by more than {max_bytes} bytes of changed services \
         (watch_event_buffer_bytes); start a new watch"
    )]
    WatchLaggedBytes {
        /// The bound it passed.
        max_bytes: u64,
    },
}

fn summarize(violations: &[FieldViolation]) -> String {
    match violations {
        [] => "no details".to_owned(),
        [only] => format!("{}: {}", only.field, only.description),
        [first, rest @ ..] => format!(
            "{}: {} (and {} more)",
            first.field,
            first.description,
            rest.len()
        ),
    }
}

fn join(names: &[ServiceName]) -> String {
    names
        .iter()
        .map(ServiceName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

impl RegistryError {
    /// An invalid argument with a single violation.
    pub fn invalid(
        field: impl Into<String>,
        kind: ViolationKind,
        description: impl Into<String>,
    ) -> Self {
        Self::InvalidArgument(vec![FieldViolation::new(field, kind, description)])
    }
}
