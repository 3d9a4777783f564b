//! Conversions between wire types (`pb`) and domain types. Requests are validated here, once,
//! on the way in; responses are built here on the way out.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;

use crate::invoke::health::ProviderHealthBook;
use crate::json::{json_to_struct, struct_to_json};
use crate::pb;
use crate::registry::lease::monotonic_now;
use crate::registry::model::{HealthState, ServiceEntry, ToolAnnotations};
use crate::registry::preflight::{
    MAX_REQUIRED_TOOLS, MAX_REQUIREMENTS, MissingReason, MissingTool, Requirement,
};
use crate::registry::store::{ChangeKind, RegistryEvent, ToolChange};
use crate::registry::validate::MCP_STDIO_ENDPOINT_PREFIX;
use crate::registry::{
    Capability, FieldViolation, LeaseId, RegisteredTool, RegistryError, ServiceName, ServiceSpec,
    ToolName, ToolSpec, ViolationKind,
};
use crate::shown::shown;

/// Parses a required service name field.
pub fn service_name(field: &str, value: &str) -> Result<ServiceName, RegistryError> {
    ServiceName::parse(value)
        .map_err(|problem| RegistryError::invalid(field, ViolationKind::Name, problem))
}

/// Parses an optional service name field ("" means none).
pub fn optional_service_name(
    field: &str,
    value: &str,
) -> Result<Option<ServiceName>, RegistryError> {
    if value.is_empty() {
        Ok(None)
    } else {
        service_name(field, value).map(Some)
    }
}

/// Parses a required tool name field.
pub fn tool_name(field: &str, value: &str) -> Result<ToolName, RegistryError> {
    ToolName::parse(value)
        .map_err(|problem| RegistryError::invalid(field, ViolationKind::Name, problem))
}

/// Parses a lease id field.
pub fn lease_id(field: &str, value: &str) -> Result<LeaseId, RegistryError> {
    LeaseId::parse_str(value).map_err(|_| {
        RegistryError::invalid(
            field,
            ViolationKind::Field,
            format!(
                "lease_id must be the UUID RegisterService returned, got {}",
                shown(value)
            ),
        )
    })
}

/// Parses a capability; `UNSPECIFIED` and unknown values are errors.
pub fn capability(value: i32) -> Result<Capability, String> {
    match pb::ServiceCapability::try_from(value) {
        Ok(pb::ServiceCapability::Batching) => Ok(Capability::Batching),
        Ok(pb::ServiceCapability::Streaming) => Ok(Capability::Streaming),
        Ok(pb::ServiceCapability::Caching) => Ok(Capability::Caching),
        Ok(pb::ServiceCapability::Retry) => Ok(Capability::Retry),
        Ok(pb::ServiceCapability::Unspecified) => {
            Err("capability must not be SERVICE_CAPABILITY_UNSPECIFIED".to_owned())
        }
        Err(_) => Err(format!("unknown capability {value}")),
    }
}

/// The wire form of a capability.
pub fn capability_to_pb(capability: Capability) -> pb::ServiceCapability {
    match capability {
        Capability::Batching => pb::ServiceCapability::Batching,
        Capability::Streaming => pb::ServiceCapability::Streaming,
        Capability::Caching => pb::ServiceCapability::Caching,
        Capability::Retry => pb::ServiceCapability::Retry,
    }
}

/// The wire form of a health state.
pub fn health_to_pb(state: HealthState) -> pb::HealthState {
    match state {
        HealthState::Healthy => pb::HealthState::Healthy,
        HealthState::Ready => pb::HealthState::Ready,
        HealthState::Alive => pb::HealthState::Alive,
        HealthState::Unhealthy => pb::HealthState::Unhealthy,
    }
}

/// Converts a registration into a [`ServiceSpec`], collecting every wire-level violation.
/// The domain validation (names, schemas, limits) happens in the registry.
pub fn service_spec(
    registration: Option<pb::ServiceRegistration>,
) -> Result<ServiceSpec, RegistryError> {
    let Some(registration) = registration else {
        return Err(RegistryError::invalid(
            "registration",
            ViolationKind::Field,
            "registration is required",
        ));
    };
    let mut violations = Vec::new();
    let ttl = registration.ttl.and_then(|ttl| {
        Duration::try_from(ttl)
            .map_err(|_| {
                violations.push(FieldViolation::new(
                    "registration.ttl",
                    ViolationKind::Field,
                    "ttl must be positive",
                ))
            })
            .ok()
    });
    let mut tools = Vec::with_capacity(registration.tools.len());
    for (index, tool) in registration.tools.into_iter().enumerate() {
        let field = |suffix: &str| format!("registration.tools[{index}].{suffix}");
        let label = format!("tool {:?}", tool.tool_name);
        let mut schema = |value: Option<prost_types::Struct>, name: &str| {
            value.and_then(|value| {
                struct_to_json(&value)
                    .map_err(|error| {
                        violations.push(FieldViolation::new(
                            field(name),
                            ViolationKind::Schema,
                            format!("{label}: {error}"),
                        ))
                    })
                    .ok()
            })
        };
        let input_schema = schema(tool.tool_schema, "tool_schema");
        let output_schema = schema(tool.output_schema, "output_schema");
        for (name, given, expected) in [
            (
                "service_name",
                &tool.service_name,
                &registration.service_name,
            ),
            (
                "service_version",
                &tool.service_version,
                &registration.service_version,
            ),
        ] {
            if !given.is_empty() && given != expected {
                violations.push(FieldViolation::new(
                    field(name),
                    ViolationKind::Field,
                    format!(
                        "{label}: {name} {} differs from the registration's {expected:?}; leave it empty",
                        shown(given)
                    ),
                ));
            }
        }
        let mut capabilities = Vec::with_capacity(tool.capabilities.len());
        for value in &tool.capabilities {
            match capability(*value) {
                Ok(capability) => capabilities.push(capability),
                Err(problem) => violations.push(FieldViolation::new(
                    field("capabilities"),
                    ViolationKind::Field,
                    format!("{label}: {problem}"),
                )),
            }
        }
        tools.push(ToolSpec {
            name: tool.tool_name,
            description: tool.description,
            input_schema,
            output_schema,
            capabilities,
            timeout_ms: tool.timeout_ms,
            domains: tool.domains,
            categories: tool.categories,
            annotations: tool.annotations.map(annotations_of).unwrap_or_default(),
        });
    }
    if registration.endpoint.starts_with(MCP_STDIO_ENDPOINT_PREFIX) {
        violations.push(FieldViolation::new(
            "registration.endpoint",
            ViolationKind::Field,
            format!(
                "endpoint {:?}: {MCP_STDIO_ENDPOINT_PREFIX} endpoints name MCP servers toolplane \
                 starts for its [[mcp_imports]]; register an mcp+http:// or mcp+https:// URL",
                registration.endpoint
            ),
        ));
    }
    if !violations.is_empty() {
        return Err(RegistryError::InvalidArgument(violations));
    }
    Ok(ServiceSpec {
        name: registration.service_name,
        version: registration.service_version,
        endpoint: registration.endpoint,
        tools,
        ttl,
        instance_id: registration.instance_id,
    })
}

/// A tool's annotations as sent.
fn annotations_of(annotations: pb::ToolAnnotations) -> ToolAnnotations {
    ToolAnnotations {
        title: annotations.title,
        read_only: annotations.read_only_hint,
        destructive: annotations.destructive_hint,
        idempotent: annotations.idempotent_hint,
        open_world: annotations.open_world_hint,
    }
}

/// A tool's annotations on the wire; `None` when they say nothing.
pub fn annotations_to_pb(annotations: &ToolAnnotations) -> Option<pb::ToolAnnotations> {
    (!annotations.is_empty()).then(|| pb::ToolAnnotations {
        title: annotations.title.clone(),
        read_only_hint: annotations.read_only,
        destructive_hint: annotations.destructive,
        idempotent_hint: annotations.idempotent,
        open_world_hint: annotations.open_world,
    })
}

/// The wire form of a registered tool of `service`, decoded afresh from
/// [`encoded_tool`]'s bytes: a decoded `google.protobuf.Struct` of a 1 KB schema takes about
/// 20 KB of memory, so it is not kept; decoding costs about what cloning a kept one would.
pub fn tool_to_pb(tool: &RegisteredTool, service: &ServiceEntry) -> pb::ToolRegistration {
    pb::ToolRegistration::decode(encoded_tool(tool, service))
        .unwrap_or_else(|_| tool_registration(tool, service.name.as_str(), service.version()))
}

/// A registered tool of `service` as its encoded `ToolRegistration`. Built once per registered
/// tool (a tool belongs to one registration of one service) and kept with the tool: the bytes
/// are about the size of the schema text. Cloning them shares them.
pub fn encoded_tool(tool: &RegisteredTool, service: &ServiceEntry) -> Bytes {
    encoded_tool_of(tool, service.name.as_str(), service.version())
}

/// As [`encoded_tool`], for a tool of service `service_name` at `service_version` not stored
/// yet: a registration being validated measures its tools' answers with the bytes it keeps.
pub fn encoded_tool_of(tool: &RegisteredTool, service_name: &str, service_version: &str) -> Bytes {
    let encode = || tool_registration(tool, service_name, service_version).encode_to_vec();
    let cached = (tool.wire).get_or_init(|| Arc::new(EncodedTool(Bytes::from(encode()))));
    match cached.downcast_ref::<EncodedTool>() {
        Some(encoded) => encoded.0.clone(),
        None => Bytes::from(encode()),
    }
}

/// The wire form of `tool`, registered by service `service_name` at `service_version`.
pub fn tool_registration(
    tool: &RegisteredTool,
    service_name: &str,
    service_version: &str,
) -> pb::ToolRegistration {
    pb::ToolRegistration {
        tool_name: tool.name.to_string(),
        description: tool.description.clone(),
        tool_schema: json_to_struct(&tool.input_schema_json()),
        output_schema: tool.output_schema_json().as_ref().and_then(json_to_struct),
        service_name: service_name.to_owned(),
        service_version: service_version.to_owned(),
        capabilities: tool
            .capabilities
            .iter()
            .map(|c| capability_to_pb(*c) as i32)
            .collect(),
        timeout_ms: tool.timeout_ms,
        definition_sha256: tool.definition_sha256.clone(),
        domains: tool.domains.clone(),
        categories: tool.categories.clone(),
        annotations: annotations_to_pb(&tool.annotations),
    }
}

/// The encoded `ToolRegistration` kept in a tool's wire slot.
struct EncodedTool(Bytes);

/// The health of a live service: UNHEALTHY while every instance with an endpoint fails
/// health checks.
pub fn service_health(service: &ServiceEntry, health: &ProviderHealthBook) -> HealthState {
    if health.is_service_failing(service) {
        HealthState::Unhealthy
    } else {
        HealthState::Healthy
    }
}

/// The wire form of a service's live instances, sorted by id.
fn instances_to_pb(
    service: &ServiceEntry,
    health: &ProviderHealthBook,
) -> Vec<pb::ServiceInstance> {
    let mut instances: Vec<pb::ServiceInstance> = service
        .live_instances_at(monotonic_now())
        .map(|instance| pb::ServiceInstance {
            instance_id: instance.id.as_str().to_owned(),
            endpoint: instance.endpoint.clone(),
            registered_at: Some(instance.registered_at.into()),
            expires_at: Some(instance.lease.expires_at().into()),
            health: health_to_pb(match health.failure(&instance.endpoint) {
                Some(_) => HealthState::Unhealthy,
                None => HealthState::Healthy,
            }) as i32,
        })
        .collect();
    instances.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    instances
}

/// The wire form of a live service.
pub fn discovery_info(service: &ServiceEntry, health: &ProviderHealthBook) -> pb::DiscoveryInfo {
    let (head, tail) = discovery_info_parts(service, health);
    pb::DiscoveryInfo {
        service_name: head.service_name,
        service_version: head.service_version,
        endpoint: head.endpoint,
        available_tools: service
            .tools()
            .iter()
            .map(|tool| tool_to_pb(tool, service))
            .collect(),
        ..tail
    }
}

/// The wire form of a live service without its tools, in two parts: the fields numbered
/// before `available_tools` (4) and those after it. Encoded one after the other with the tools
/// between, they are the bytes of the whole message, field for field in order (protobuf writes
/// no field left at its default).
pub fn discovery_info_parts(
    service: &ServiceEntry,
    health: &ProviderHealthBook,
) -> (pb::DiscoveryInfo, pb::DiscoveryInfo) {
    let head = pb::DiscoveryInfo {
        service_name: service.name.to_string(),
        service_version: service.version().to_owned(),
        endpoint: service.endpoint().to_owned(),
        ..Default::default()
    };
    let tail = pb::DiscoveryInfo {
        service_health: health_to_pb(service_health(service, health)) as i32,
        uptime_seconds: service.uptime_seconds(),
        registered_at: Some(service.registered_at().into()),
        expires_at: Some(service.expires_at().into()),
        instances: instances_to_pb(service, health),
        ..Default::default()
    };
    (head, tail)
}

/// The wire form of a changed tool of a watch event.
pub fn tool_change_to_pb(change: &ToolChange) -> pb::ToolChange {
    pb::ToolChange {
        tool_name: change.tool.to_string(),
        old_definition_sha256: change.old_sha256.clone().unwrap_or_default(),
        new_definition_sha256: change.new_sha256.clone().unwrap_or_default(),
    }
}

/// The generated form of a registry change: what the encoded events of
/// [`super::discovery_wire`] are tested against.
#[cfg(test)]
pub fn event_to_pb(event: &RegistryEvent, health: &ProviderHealthBook) -> pb::ServiceEvent {
    let (head, tail) = event_parts(event);
    pb::ServiceEvent {
        service: event
            .entry
            .as_deref()
            .map(|entry| discovery_info(entry, health)),
        tool_changes: tail.tool_changes,
        ..head
    }
}

/// The wire form of a registry change without its service, in two parts: the fields numbered
/// before `service` (4) and those after it (see [`discovery_info_parts`]).
pub fn event_parts(event: &RegistryEvent) -> (pb::ServiceEvent, pb::ServiceEvent) {
    let (kind, tool_changes) = match &event.kind {
        ChangeKind::Added => (pb::ServiceEventType::Added, Vec::new()),
        ChangeKind::Updated(changes) => (
            pb::ServiceEventType::Updated,
            changes.iter().map(tool_change_to_pb).collect(),
        ),
        ChangeKind::Removed => (pb::ServiceEventType::Removed, Vec::new()),
        ChangeKind::Expired => (pb::ServiceEventType::Expired, Vec::new()),
    };
    let head = pb::ServiceEvent {
        r#type: kind as i32,
        revision: event.revision,
        service_name: event.service.to_string(),
        ..Default::default()
    };
    let tail = pb::ServiceEvent {
        tool_changes,
        ..Default::default()
    };
    (head, tail)
}

/// Converts pre-flight requirements, rejecting malformed names, an empty list, and more than
/// [`MAX_REQUIREMENTS`] requirements or [`MAX_REQUIRED_TOOLS`] tool names.
pub fn requirements(
    requirements: Vec<pb::ServiceRequirement>,
) -> Result<Vec<Requirement>, RegistryError> {
    let refused = |what: String| RegistryError::invalid("requirements", ViolationKind::Field, what);
    if requirements.is_empty() {
        return Err(refused("at least one requirement is needed".to_owned()));
    }
    if requirements.len() > MAX_REQUIREMENTS {
        return Err(refused(format!(
            "{} requirements, more than the {MAX_REQUIREMENTS} one pre-flight check takes",
            requirements.len()
        )));
    }
    let tools: usize = (requirements.iter())
        .map(|requirement| requirement.tool_names.len())
        .sum();
    if tools > MAX_REQUIRED_TOOLS {
        return Err(refused(format!(
            "{tools} tool names across the requirements, more than the {MAX_REQUIRED_TOOLS} one pre-flight check takes"
        )));
    }
    let mut violations = Vec::new();
    let mut converted = Vec::with_capacity(requirements.len());
    for (index, requirement) in requirements.into_iter().enumerate() {
        let service = ServiceName::parse(&requirement.service_name)
            .map_err(|problem| {
                violations.push(FieldViolation::new(
                    format!("requirements[{index}].service_name"),
                    ViolationKind::Name,
                    problem,
                ))
            })
            .ok();
        let mut tools = Vec::with_capacity(requirement.tool_names.len());
        for (tool_index, tool) in requirement.tool_names.iter().enumerate() {
            match ToolName::parse(tool) {
                Ok(tool) => tools.push(tool),
                Err(problem) => violations.push(FieldViolation::new(
                    format!("requirements[{index}].tool_names[{tool_index}]"),
                    ViolationKind::Name,
                    problem,
                )),
            }
        }
        if let Some(service) = service {
            converted.push(Requirement {
                service,
                tools,
                optional: requirement.optional,
            });
        }
    }
    if violations.is_empty() {
        Ok(converted)
    } else {
        Err(RegistryError::InvalidArgument(violations))
    }
}

/// The wire form of a missing tool.
pub fn missing_to_pb(missing: &MissingTool) -> pb::MissingTool {
    pb::MissingTool {
        service_name: missing.service.to_string(),
        tool_name: missing
            .tool
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        reason: match missing.reason {
            MissingReason::ServiceNotRegistered => pb::MissingReason::ServiceNotRegistered,
            MissingReason::ToolNotOffered => pb::MissingReason::ToolNotOffered,
        } as i32,
        detail: missing.detail.clone(),
    }
}
