//! The seed 001 tool registry, Rust side: descriptors, handlers and the builder that checks
//! them at registration.

use crate::trace_context::TraceContext;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::envelope::TenantId;
use crate::registry::model::ToolAnnotations;
use crate::registry::validate::{RegistrationLimits, compile_schema};
use crate::registry::{Capability, ToolName};

/// What a provider tells the control plane about one tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescriptor {
    /// Stable identifier, 1-128 characters of `[A-Za-z0-9_.-]`.
    pub name: String,
    /// Human-readable summary surfaced to people and models.
    pub description: String,
    /// JSON Schema (Draft 7 unless `$schema` says otherwise) of the input.
    pub input_schema: Value,
    /// JSON Schema of the output, when the tool declares one.
    pub returns: Option<Value>,
    /// Per-call time limit in milliseconds (above 0), when the tool declares one.
    pub timeout_ms: Option<u32>,
    /// Advanced features the tool supports (RETRY lets callers' retry policies apply).
    pub capabilities: Vec<Capability>,
    /// The domains the tool declares; empty to have the control plane infer them from the
    /// service's and the tool's names (`crate::registry::taxonomy`).
    pub domains: Vec<String>,
    /// The categories the tool declares; empty to have them inferred from its name's verb.
    pub categories: Vec<String>,
    /// Hints about the tool's behaviour (MCP's tool annotations: a title, read-only,
    /// destructive, idempotent, open world); empty says none.
    pub annotations: ToolAnnotations,
}

impl ToolDescriptor {
    /// A descriptor with a name, a description and an input schema.
    pub fn new(name: &str, description: &str, input_schema: Value) -> Self {
        Self {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema,
            returns: None,
            timeout_ms: None,
            capabilities: Vec::new(),
            domains: Vec::new(),
            categories: Vec::new(),
            annotations: ToolAnnotations::default(),
        }
    }

    /// Declares the output schema.
    pub fn returns(mut self, schema: Value) -> Self {
        self.returns = Some(schema);
        self
    }

    /// Declares the per-call time limit (above 0: [`ToolRegistry::register`] refuses 0).
    pub fn timeout_ms(mut self, timeout_ms: u32) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// Declares capabilities.
    pub fn capabilities(mut self, capabilities: &[Capability]) -> Self {
        self.capabilities = capabilities.to_vec();
        self
    }

    /// Declares domains (`["billing", "billing.invoices"]`) instead of having them inferred.
    pub fn domains(mut self, domains: &[&str]) -> Self {
        self.domains = domains.iter().map(|domain| (*domain).to_owned()).collect();
        self
    }

    /// Declares categories (`["crud.read"]`) instead of having them inferred.
    pub fn categories(mut self, categories: &[&str]) -> Self {
        self.categories = categories.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    /// Declares hints about the tool's behaviour, which MCP clients see as its annotations.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }
}

/// The context of one call, passed explicitly (tools capture no hidden state).
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The caller's tenant.
    pub tenant: TenantId,
    /// The caller's correlation id.
    pub correlation_id: String,
    /// The caller's idempotency key, the same on every attempt.
    pub idempotency_key: Option<String>,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// When the caller stops waiting, if it said.
    pub deadline: Option<Instant>,
    /// The W3C trace context the call came with (toolplane passes on its caller's), for the
    /// tool's own spans to join the caller's trace.
    pub trace: Option<TraceContext>,
    cancellation: CancellationToken,
}

impl ToolContext {
    /// A context for calling a handler directly (tests, local use).
    pub fn new(tenant: TenantId, correlation_id: &str, cancellation: CancellationToken) -> Self {
        Self {
            tenant,
            correlation_id: correlation_id.to_owned(),
            idempotency_key: None,
            attempt: 1,
            deadline: None,
            trace: None,
            cancellation,
        }
    }

    /// Whether the call was cancelled (the caller went away or its deadline passed).
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }

    /// Completes when the call is cancelled.
    pub async fn cancelled(&self) {
        self.cancellation.cancelled().await;
    }

    /// The token itself, to hand to blocking work.
    pub fn cancellation(&self) -> CancellationToken {
        self.cancellation.clone()
    }

    pub(crate) fn with_details(
        mut self,
        idempotency_key: Option<String>,
        attempt: u32,
        deadline: Option<Instant>,
        trace: Option<TraceContext>,
    ) -> Self {
        self.idempotency_key = idempotency_key;
        self.attempt = attempt;
        self.deadline = deadline;
        self.trace = trace;
        self
    }
}

/// One call of a tool.
#[derive(Debug, Clone)]
pub struct ToolInvocation {
    /// The tool called.
    pub tool_name: String,
    /// The input, already valid against the tool's input schema.
    pub input: Value,
    /// The call's context.
    pub context: ToolContext,
}

/// A tool's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The output.
    pub output: Value,
    /// Warnings for the caller.
    pub warnings: Vec<String>,
}

impl ToolOutput {
    /// An output without warnings.
    pub fn new(output: Value) -> Self {
        Self {
            output,
            warnings: Vec::new(),
        }
    }
}

/// A tool's error: a code in the seed 004 categories and a message. The code becomes the
/// ErrorInfo reason; its prefix picks the gRPC code (see [`ToolError::grpc_code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// e.g. `VALIDATION_INPUT`, `RESOURCE_NOT_FOUND`, `TOOL_UNAVAILABLE`, `TOOL_FAILED`.
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
}

impl ToolError {
    /// An error with any code. toolplane passes the code on (as the ErrorInfo reason its
    /// caller gets and its record keeps) only when it is 3 to 63 characters of
    /// UPPER_SNAKE_CASE, as ErrorInfo defines a reason; another is replaced by the reason for
    /// its gRPC code (`TOOL_FAILED` for most).
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// The input is semantically wrong (VALIDATION_INPUT, INVALID_ARGUMENT).
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new("VALIDATION_INPUT", message)
    }

    /// Temporarily unable to serve (TOOL_UNAVAILABLE, UNAVAILABLE: retryable).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new("TOOL_UNAVAILABLE", message)
    }

    /// The tool failed (TOOL_FAILED, ABORTED).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new("TOOL_FAILED", message)
    }

    /// The gRPC code of this error, by the code's category: `VALIDATION_*` INVALID_ARGUMENT,
    /// `RESOURCE_NOT_FOUND` NOT_FOUND, other `RESOURCE_*` FAILED_PRECONDITION, `RATE_LIMIT_*`
    /// RESOURCE_EXHAUSTED, `TOOL_TIMEOUT` DEADLINE_EXCEEDED, `TOOL_UNAVAILABLE` UNAVAILABLE,
    /// `TOOL_CANCELLED` CANCELLED, anything else ABORTED.
    pub fn grpc_code(&self) -> tonic::Code {
        let code = self.code.as_str();
        match code {
            "RESOURCE_NOT_FOUND" => tonic::Code::NotFound,
            "TOOL_TIMEOUT" => tonic::Code::DeadlineExceeded,
            "TOOL_UNAVAILABLE" => tonic::Code::Unavailable,
            "TOOL_CANCELLED" => tonic::Code::Cancelled,
            _ if code.starts_with("VALIDATION_") => tonic::Code::InvalidArgument,
            _ if code.starts_with("RESOURCE_") => tonic::Code::FailedPrecondition,
            _ if code.starts_with("RATE_LIMIT_") => tonic::Code::ResourceExhausted,
            _ => tonic::Code::Aborted,
        }
    }
}

/// A handler's future.
pub type ToolFuture = BoxFuture<'static, Result<ToolOutput, ToolError>>;
/// A tool's implementation.
pub type ToolHandler = Arc<dyn Fn(ToolInvocation) -> ToolFuture + Send + Sync>;

/// Wraps an `async fn(ToolInvocation) -> Result<ToolOutput, ToolError>` as a [`ToolHandler`].
pub fn handler<F, Fut>(function: F) -> ToolHandler
where
    F: Fn(ToolInvocation) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    Arc::new(move |invocation| Box::pin(function(invocation)))
}

/// A tool that cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// A tool of that name is already registered.
    #[error("tool {0:?} is registered twice")]
    Duplicate(String),
    /// The name is malformed.
    #[error("tool name {name:?}: {problem}")]
    InvalidName {
        /// The name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// A schema does not compile.
    #[error("tool {tool:?}: {which} schema: {problem}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// `input` or `output`.
        which: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The tool declares a time limit of 0 ms, which the control plane refuses (every call
    /// would time out at once).
    #[error("tool {0:?}: timeout_ms must be above 0 (leave it unset for no limit of its own)")]
    ZeroTimeout(String),
}

/// One registered tool: descriptor, handler and compiled input validator.
#[derive(Clone)]
pub struct RegisteredTool {
    /// The descriptor.
    pub descriptor: ToolDescriptor,
    pub(crate) handler: ToolHandler,
    pub(crate) validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("descriptor", &self.descriptor)
            .finish_non_exhaustive()
    }
}

/// Builds the set of tools a provider offers.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool. Duplicate names, malformed names and schemas that do not compile (under
    /// the control plane's rules) are refused here, not at the first call.
    pub fn register(
        mut self,
        descriptor: ToolDescriptor,
        handler: ToolHandler,
    ) -> Result<Self, RegistrationError> {
        if let Err(problem) = ToolName::parse(&descriptor.name) {
            return Err(RegistrationError::InvalidName {
                name: descriptor.name,
                problem,
            });
        }
        if self.tools.contains_key(&descriptor.name) {
            return Err(RegistrationError::Duplicate(descriptor.name));
        }
        if descriptor.timeout_ms == Some(0) {
            return Err(RegistrationError::ZeroTimeout(descriptor.name));
        }
        let limits = RegistrationLimits::default();
        let schema_error = |which, problem| RegistrationError::InvalidSchema {
            tool: descriptor.name.clone(),
            which,
            problem,
        };
        let validator = compile_schema(&descriptor.input_schema, &limits)
            .map_err(|problem| schema_error("input", problem))?;
        if let Some(returns) = &descriptor.returns {
            compile_schema(returns, &limits).map_err(|problem| schema_error("output", problem))?;
        }
        self.tools.insert(
            descriptor.name.clone(),
            RegisteredTool {
                descriptor,
                handler,
                validator: Arc::new(validator),
            },
        );
        Ok(self)
    }

    /// Freezes the registry for serving.
    pub fn freeze(self) -> RegisteredTools {
        RegisteredTools {
            tools: Arc::new(self.tools),
        }
    }
}

/// The frozen set of tools a provider serves.
#[derive(Debug, Clone)]
pub struct RegisteredTools {
    tools: Arc<BTreeMap<String, RegisteredTool>>,
}

impl RegisteredTools {
    /// One tool by name.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Every tool, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn echo() -> ToolHandler {
        handler(|invocation: ToolInvocation| async move { Ok(ToolOutput::new(invocation.input)) })
    }

    #[test]
    fn duplicates_bad_names_and_bad_schemas_are_refused_at_registration() {
        let registry = ToolRegistry::new()
            .register(
                ToolDescriptor::new("echo", "echoes", json!({"type": "object"})),
                echo(),
            )
            .expect("first");
        let duplicate = registry.register(
            ToolDescriptor::new("echo", "again", json!({"type": "object"})),
            echo(),
        );
        assert_eq!(
            duplicate.expect_err("duplicate"),
            RegistrationError::Duplicate("echo".into())
        );
        let bad_name =
            ToolRegistry::new().register(ToolDescriptor::new("has space", "x", json!({})), echo());
        assert!(matches!(
            bad_name,
            Err(RegistrationError::InvalidName { .. })
        ));
        let bad_schema = ToolRegistry::new().register(
            ToolDescriptor::new("t", "x", json!({"type": "nope"})),
            echo(),
        );
        assert!(matches!(
            bad_schema,
            Err(RegistrationError::InvalidSchema { which: "input", .. })
        ));
        let bad_output = ToolRegistry::new().register(
            ToolDescriptor::new("t", "x", json!({})).returns(json!({"minimum": "x"})),
            echo(),
        );
        assert!(matches!(
            bad_output,
            Err(RegistrationError::InvalidSchema {
                which: "output",
                ..
            })
        ));
        let no_time = ToolRegistry::new().register(
            ToolDescriptor::new("t", "x", json!({})).timeout_ms(0),
            echo(),
        );
        assert_eq!(
            no_time.expect_err("0 ms"),
            RegistrationError::ZeroTimeout("t".into())
        );
    }

    #[test]
    fn error_codes_pick_grpc_codes() {
        assert_eq!(
            ToolError::invalid_input("x").grpc_code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            ToolError::unavailable("x").grpc_code(),
            tonic::Code::Unavailable
        );
        assert_eq!(
            ToolError::new("RESOURCE_NOT_FOUND", "x").grpc_code(),
            tonic::Code::NotFound
        );
        assert_eq!(
            ToolError::new("RATE_LIMIT_EXCEEDED", "x").grpc_code(),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(ToolError::failed("x").grpc_code(), tonic::Code::Aborted);
    }
}
