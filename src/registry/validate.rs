//! Validation of a registration: names, versions, endpoint, TTL, limits, and compilation of
//! every JSON Schema. A registration either passes whole, giving a [`ValidatedService`] whose
//! schemas all compiled, or fails with every violation found.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

pub(super) use super::compile::recompile_registered_schema;
pub use super::compile::{compile_schema, validator_options};
use super::error::{FieldViolation, RegistryError, ViolationKind};
use super::instance::InstanceId;
use super::model::{
    RegisteredTool, ServiceName, ServiceSpec, ToolAnnotations, ToolName, ToolSpec, ValidatedService,
};
use super::quota::{DEFAULT_MAX_TOOL_BYTES_PER_TENANT, DEFAULT_MAX_TOOLS_PER_TENANT, TenantQuota};
use super::taxonomy;
pub use super::violations::{MAX_VIOLATION_BYTES, first_error, violation_message};
use crate::json::canonical_sha256;

/// The default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The default shortest TTL a registration may ask for.
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(1);
/// The default longest TTL a registration may ask for.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(3600);
/// The default most tools one registration may carry.
pub const DEFAULT_MAX_TOOLS: usize = 1000;
/// The default longest tool description, in bytes.
pub const DEFAULT_MAX_DESCRIPTION_BYTES: usize = 4096;
/// The default largest schema, in bytes of compact JSON.
pub const DEFAULT_MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The default deepest nesting of objects and arrays in a schema.
pub const DEFAULT_MAX_SCHEMA_DEPTH: usize = 24;
/// Default most services one tenant may have registered at once.
pub const DEFAULT_MAX_SERVICES_PER_TENANT: usize = 10_000;
/// Default most live instances of one service.
pub const DEFAULT_MAX_INSTANCES_PER_SERVICE: u64 = 256;
/// The scheme prefix of an endpoint that is an MCP server's URL (`mcp+http://...`): the
/// service's tools are called over MCP, not gRPC.
pub const MCP_ENDPOINT_PREFIX: &str = "mcp+";
/// The prefix of the endpoint of an MCP server toolplane starts itself, over stdio, for an
/// import (`mcp+stdio://TENANT/SERVICE`): never registered over the wire.
pub const MCP_STDIO_ENDPOINT_PREFIX: &str = "mcp+stdio://";
/// The longest endpoint URI accepted.
const MAX_ENDPOINT_LEN: usize = 2048;

/// The longest service version a registration takes, in bytes: npm's semver takes none longer
/// (256). A version is kept with each instance and sent in every discovery answer naming the
/// service, and no quota counts it.
pub const MAX_VERSION_LEN: usize = 256;

/// Whether `version` is a service version a registration takes: a semantic version (e.g.
/// 1.2.3) of at most [`MAX_VERSION_LEN`] bytes.
pub fn is_service_version(version: &str) -> bool {
    version.len() <= MAX_VERSION_LEN && semver::Version::parse(version).is_ok()
}

/// The most backtracking steps one `pattern` (or `patternProperties`) match may take. Patterns
/// with look-around or back-references run on a backtracking engine, where a careless pattern
/// takes exponential time; at the engine's default (1,000,000 steps) one such string cost
/// about 100 ms of a runtime thread, at this limit about 0.5 ms. Ordinary patterns run in
/// linear time and never count against it; a value whose match needs more is refused.
pub const PATTERN_BACKTRACK_LIMIT: usize = 10_000;

/// The limits a registration must keep to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationLimits {
    /// TTL granted when the registration asks for none.
    pub default_ttl: Duration,
    /// Shortest TTL accepted.
    pub min_ttl: Duration,
    /// Longest TTL accepted.
    pub max_ttl: Duration,
    /// Most tools in one registration.
    pub max_tools: usize,
    /// Longest tool description in bytes.
    pub max_description_bytes: usize,
    /// Largest schema in bytes of compact JSON.
    pub max_schema_bytes: usize,
    /// Deepest nesting of objects and arrays in a schema.
    pub max_schema_depth: usize,
    /// Most services one tenant may have registered at once (re-registering one of them
    /// always works); `0` sets no limit. Every tenant shares one process's memory, so this
    /// keeps one tenant's runaway registrations from taking everyone's.
    pub max_services_per_tenant: usize,
    /// Most tools one tenant may have registered at once, across its services; `0` sets no
    /// limit.
    pub max_tools_per_tenant: u64,
    /// Most bytes of tool definitions (names, descriptions, schema text) one tenant may have
    /// registered at once; `0` sets no limit.
    pub max_tool_bytes_per_tenant: u64,
    /// Most live instances of one service (replicas registered with instance ids); `0` sets
    /// no limit.
    pub max_instances_per_service: u64,
}

impl RegistrationLimits {
    /// The per-tenant quota these limits set.
    pub fn quota(&self) -> TenantQuota {
        TenantQuota {
            services: self.max_services_per_tenant as u64,
            tools: self.max_tools_per_tenant,
            tool_bytes: self.max_tool_bytes_per_tenant,
            instances_per_service: self.max_instances_per_service,
            answer: None,
        }
    }
}

impl Default for RegistrationLimits {
    fn default() -> Self {
        Self {
            default_ttl: DEFAULT_TTL,
            min_ttl: DEFAULT_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL,
            max_tools: DEFAULT_MAX_TOOLS,
            max_description_bytes: DEFAULT_MAX_DESCRIPTION_BYTES,
            max_schema_bytes: DEFAULT_MAX_SCHEMA_BYTES,
            max_schema_depth: DEFAULT_MAX_SCHEMA_DEPTH,
            max_services_per_tenant: DEFAULT_MAX_SERVICES_PER_TENANT,
            max_tools_per_tenant: DEFAULT_MAX_TOOLS_PER_TENANT,
            max_tool_bytes_per_tenant: DEFAULT_MAX_TOOL_BYTES_PER_TENANT,
            max_instances_per_service: DEFAULT_MAX_INSTANCES_PER_SERVICE,
        }
    }
}

/// Validates a registration whole and compiles its schemas.
pub fn validate_service(
    spec: &ServiceSpec,
    limits: &RegistrationLimits,
) -> Result<ValidatedService, RegistryError> {
    let mut violations = Vec::new();
    let name = ServiceName::parse(&spec.name)
        .map_err(|problem| {
            violations.push(FieldViolation::new(
                "registration.service_name",
                ViolationKind::Name,
                problem,
            ));
        })
        .ok();
    if spec.version.len() > MAX_VERSION_LEN {
        violations.push(FieldViolation::new(
            "registration.service_version",
            ViolationKind::Field,
            format!(
                "service version must be at most {MAX_VERSION_LEN} bytes, got {}",
                spec.version.len()
            ),
        ));
    } else if let Err(error) = semver::Version::parse(&spec.version) {
        violations.push(FieldViolation::new(
            "registration.service_version",
            ViolationKind::Field,
            format!(
                "service version {} is not a semantic version (e.g. 1.2.3): {error}",
                crate::shown::shown(&spec.version)
            ),
        ));
    }
    if let Err(problem) = check_endpoint(&spec.endpoint) {
        violations.push(FieldViolation::new(
            "registration.endpoint",
            ViolationKind::Field,
            problem,
        ));
    }
    let instance = InstanceId::parse(&spec.instance_id)
        .map_err(|problem| {
            violations.push(FieldViolation::new(
                "registration.instance_id",
                ViolationKind::Field,
                problem,
            ));
        })
        .ok();
    let ttl = spec.ttl.unwrap_or(limits.default_ttl);
    if ttl < limits.min_ttl || ttl > limits.max_ttl {
        violations.push(FieldViolation::new(
            "registration.ttl",
            ViolationKind::Field,
            format!(
                "ttl must be between {} and {}, got {}",
                humantime::format_duration(limits.min_ttl),
                humantime::format_duration(limits.max_ttl),
                humantime::format_duration(ttl)
            ),
        ));
    }
    if spec.tools.len() > limits.max_tools {
        violations.push(FieldViolation::new(
            "registration.tools",
            ViolationKind::Field,
            format!(
                "at most {} tools per registration, got {}",
                limits.max_tools,
                spec.tools.len()
            ),
        ));
    }

    let mut first_index_of: HashMap<&str, usize> = HashMap::new();
    let mut tools = Vec::with_capacity(spec.tools.len());
    for (index, tool) in spec.tools.iter().enumerate() {
        if let Some(first) = first_index_of.insert(tool.name.as_str(), index) {
            first_index_of.insert(tool.name.as_str(), first);
            violations.push(FieldViolation::new(
                format!("registration.tools[{index}].tool_name"),
                ViolationKind::Name,
                format!(
                    "duplicate tool name {:?} (first at registration.tools[{first}])",
                    tool.name
                ),
            ));
            continue;
        }
        match validate_tool(tool, &spec.name, index, limits) {
            Ok(registered) => tools.push(Arc::new(registered)),
            Err(mut tool_violations) => violations.append(&mut tool_violations),
        }
    }

    match (name, instance) {
        (Some(name), Some(instance)) if violations.is_empty() => {
            tools.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(ValidatedService {
                name,
                version: spec.version.clone(),
                endpoint: spec.endpoint.clone(),
                tools,
                ttl,
                instance,
            })
        }
        _ => Err(RegistryError::InvalidArgument(violations)),
    }
}

fn check_endpoint(endpoint: &str) -> Result<(), String> {
    if endpoint.is_empty() {
        return Ok(());
    }
    let problem = || {
        format!(
            "endpoint {endpoint:?} must be an http:// or https:// URI with a host, e.g. \
             http://10.0.0.7:7001, or an MCP server's URL after mcp+, e.g. \
             mcp+http://10.0.0.7:3001/mcp"
        )
    };
    if endpoint.len() > MAX_ENDPOINT_LEN {
        return Err(format!("endpoint must be at most {MAX_ENDPOINT_LEN} bytes"));
    }
    // An MCP server's URL is an http:// or https:// URI too, after the prefix; stdio://
    // names a server an import starts (calling it works only where one is configured).
    let (url, schemes): (&str, &[&str]) = match endpoint.strip_prefix(MCP_ENDPOINT_PREFIX) {
        Some(url) => (url, &["http", "https", "stdio"]),
        None => (endpoint, &["http", "https"]),
    };
    let uri: http::Uri = url.parse().map_err(|_| problem())?;
    let scheme_ok = uri
        .scheme_str()
        .is_some_and(|scheme| schemes.contains(&scheme));
    let host_ok = uri.host().is_some_and(|host| !host.is_empty());
    if scheme_ok && host_ok {
        Ok(())
    } else {
        Err(problem())
    }
}

fn validate_tool(
    tool: &ToolSpec,
    service: &str,
    index: usize,
    limits: &RegistrationLimits,
) -> Result<RegisteredTool, Vec<FieldViolation>> {
    let field = |suffix: &str| format!("registration.tools[{index}].{suffix}");
    let mut violations = Vec::new();
    let name = ToolName::parse(&tool.name)
        .map_err(|problem| {
            violations.push(FieldViolation::new(
                field("tool_name"),
                ViolationKind::Name,
                problem,
            ))
        })
        .ok();
    let label = format!("tool {:?}", tool.name);
    if tool.description.len() > limits.max_description_bytes {
        violations.push(FieldViolation::new(
            field("description"),
            ViolationKind::Field,
            format!(
                "{label}: description must be at most {} bytes",
                limits.max_description_bytes
            ),
        ));
    }
    if tool.timeout_ms == Some(0) {
        violations.push(FieldViolation::new(
            field("timeout_ms"),
            ViolationKind::Field,
            format!(
                "{label}: timeout_ms must be above 0 (a limit of 0 ms would time every call out \
                 at once); leave it unset for a tool without a limit of its own"
            ),
        ));
    }
    if let Err(problem) = super::annotations::check_title(&tool.annotations.title) {
        violations.push(FieldViolation::new(
            field("annotations.title"),
            ViolationKind::Field,
            format!("{label}: {problem}"),
        ));
    }
    let mut labels = |declared: &[String], name: &str, infer: fn(&str, &str) -> Vec<String>| {
        if declared.is_empty() {
            return infer(service, &tool.name);
        }
        taxonomy::check_labels(declared).unwrap_or_else(|problem| {
            violations.push(FieldViolation::new(
                field(name),
                ViolationKind::Field,
                format!("{label}: {name}: {problem}"),
            ));
            Vec::new()
        })
    };
    let domains = labels(&tool.domains, "domains", taxonomy::infer_domains);
    let categories = labels(&tool.categories, "categories", taxonomy::infer_categories);
    let input_validator = match &tool.input_schema {
        None => {
            violations.push(FieldViolation::new(
                field("tool_schema"),
                ViolationKind::Schema,
                format!("{label}: tool_schema is required (use {{\"type\": \"object\"}} for a tool without input)"),
            ));
            None
        }
        Some(schema) => compile_schema(schema, limits)
            .map_err(|problem| {
                violations.push(FieldViolation::new(
                    field("tool_schema"),
                    ViolationKind::Schema,
                    format!("{label}: {problem}"),
                ))
            })
            .ok(),
    };
    let output_validator = match &tool.output_schema {
        None => None,
        Some(schema) => compile_schema(schema, limits)
            .map_err(|problem| {
                violations.push(FieldViolation::new(
                    field("output_schema"),
                    ViolationKind::Schema,
                    format!("{label}: {problem}"),
                ))
            })
            .ok(),
    };
    // The compiled validators only prove the schemas compile; the registry's bounded cache
    // compiles them again when the tool is called (see `super::validators`).
    let (Some(name), Some(_), true) = (name, input_validator, violations.is_empty()) else {
        return Err(violations);
    };
    drop(output_validator);
    let input_schema = tool.input_schema.clone().unwrap_or(Value::Null);
    let mut capabilities = tool.capabilities.clone();
    capabilities.sort();
    capabilities.dedup();
    Ok(RegisteredTool {
        definition_sha256: definition_sha256(
            &name,
            &tool.description,
            &input_schema,
            tool.output_schema.as_ref(),
            &tool.annotations,
        ),
        name,
        description: tool.description.clone(),
        input_schema: Arc::from(input_schema.to_string()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| Arc::from(schema.to_string())),
        capabilities,
        timeout_ms: tool.timeout_ms,
        domains,
        categories,
        annotations: tool.annotations.clone(),
        wire: Default::default(),
    })
}

/// sha256 over the canonical JSON of a tool's name, description, input and output schema,
/// and of its annotations (as MCP names them) when it has any: a tool without annotations
/// hashes as it did before they were kept, and one whose hints change (a destructive tool
/// saying it is read-only) hashes differently, so an approval of it no longer holds.
pub fn definition_sha256(
    name: &ToolName,
    description: &str,
    input: &Value,
    output: Option<&Value>,
    annotations: &ToolAnnotations,
) -> String {
    let mut definition = json!({
        "name": name.as_str(),
        "description": description,
        "tool_schema": input,
        "output_schema": output,
    });
    if !annotations.is_empty()
        && let Value::Object(fields) = &mut definition
    {
        fields.insert(
            "annotations".into(),
            Value::Object(annotations.to_mcp_json()),
        );
    }
    canonical_sha256(&definition)
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
