//! The registry's domain types: validated names, tool and service specifications, and the
//! registered forms that carry definition hashes and leases.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::Value;

pub use super::annotations::ToolAnnotations;
use super::instance::{Contract, Instance, InstanceId};
use super::lease::{LeaseId, monotonic_now, wall_time_of};
use super::quota::Usage;
use crate::envelope::TenantId;

/// A service name: a DNS label (RFC 1123), as a Kubernetes service name. Validated on creation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceName(String);

/// The longest service name (a DNS label).
pub const MAX_SERVICE_NAME_LEN: usize = 63;
/// The longest tool name.
pub const MAX_TOOL_NAME_LEN: usize = 128;

impl ServiceName {
    /// Validates a service name; the error says what is wrong.
    pub fn parse(name: &str) -> Result<Self, String> {
        let bytes = name.as_bytes();
        let valid_char = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if name.is_empty() || name.len() > MAX_SERVICE_NAME_LEN {
            return Err(format!(
                "service name must be 1 to {MAX_SERVICE_NAME_LEN} characters, got {}",
                name.len()
            ));
        }
        if !bytes.iter().all(valid_char)
            || !bytes.first().is_some_and(alnum)
            || !bytes.last().is_some_and(alnum)
        {
            return Err(format!(
                "service name {name:?} must be a DNS label: lowercase letters, digits and '-', \
                 starting and ending with a letter or digit"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tool name: 1 to 128 characters of `[A-Za-z0-9_.-]`. Validated on creation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolName(String);

impl ToolName {
    /// Validates a tool name; the error says what is wrong.
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.is_empty() || name.len() > MAX_TOOL_NAME_LEN {
            return Err(format!(
                "tool name must be 1 to {MAX_TOOL_NAME_LEN} characters, got {}",
                name.len()
            ));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return Err(format!(
                "tool name {name:?} may contain only letters, digits, '_', '.' and '-'"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An advanced feature a tool supports (seed 000 `ServiceCapabilities`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// Accepts batches of work in one call.
    Batching,
    /// Can stream its response.
    Streaming,
    /// Its responses may be cached.
    Caching,
    /// Safe to retry after a transient failure.
    Retry,
}

impl Capability {
    /// The capability's name in lowercase: `batching`, `streaming`, `caching` or `retry`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Batching => "batching",
            Self::Streaming => "streaming",
            Self::Caching => "caching",
            Self::Retry => "retry",
        }
    }
}

/// Health of the control plane or a service (seed 002 `HealthState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// Serving normally.
    Healthy,
    /// Ready to take work.
    Ready,
    /// Alive but may not take work.
    Alive,
    /// Not able to take work.
    Unhealthy,
}

/// A tool as a provider describes it, before validation and compilation.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The tool's name, as sent.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// The input JSON Schema, when one was sent.
    pub input_schema: Option<Value>,
    /// The output JSON Schema, when the tool declares one.
    pub output_schema: Option<Value>,
    /// The advanced features the tool supports.
    pub capabilities: Vec<Capability>,
    /// The per-call time limit in milliseconds, when the tool declares one.
    pub timeout_ms: Option<u32>,
    /// The domains the provider declares (see [`super::taxonomy`]); empty to have them
    /// inferred.
    pub domains: Vec<String>,
    /// The categories the provider declares; empty to have them inferred.
    pub categories: Vec<String>,
    /// Hints about the tool's behaviour (MCP's tool annotations); empty when none.
    pub annotations: ToolAnnotations,
}

/// A service registration as a provider sends it, before validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSpec {
    /// The service's name, as sent.
    pub name: String,
    /// The service's version, as sent.
    pub version: String,
    /// Where the service serves ToolProviderService; may be empty.
    pub endpoint: String,
    /// The tools offered.
    pub tools: Vec<ToolSpec>,
    /// The requested lease TTL; `None` takes the server default.
    pub ttl: Option<Duration>,
    /// Which replica registers, as sent; empty for the service's unnamed instance.
    pub instance_id: String,
}

/// A compiled JSON Schema validator, shared by every reader of a tool.
pub type SchemaValidator = Arc<jsonschema::Validator>;

/// A slot the transport layer may fill once with its encoded form of a tool (the gRPC layer
/// keeps the tool's encoded `ToolRegistration` there), so reads do not rebuild it from the
/// schema text on every request. The domain neither reads nor knows its type.
pub type WireSlot = std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>;

/// A validated tool with its definition hash.
///
/// Schemas are kept as compact JSON text: a parsed `serde_json::Value` of a 1 KB schema takes
/// about 20 KB of memory, the text about 1 KB. [`RegisteredTool::input_schema_json`] parses it
/// when a JSON value is needed. The compiled validators live in the registry's bounded
/// [`super::validators::ValidatorCache`], not here.
#[derive(Debug)]
pub struct RegisteredTool {
    /// The tool's name.
    pub name: ToolName,
    /// What the tool does.
    pub description: String,
    /// The input JSON Schema, as compact JSON text.
    pub input_schema: Arc<str>,
    /// The output JSON Schema as compact JSON text, when declared.
    pub output_schema: Option<Arc<str>>,
    /// The advanced features the tool supports, sorted and without duplicates.
    pub capabilities: Vec<Capability>,
    /// The per-call time limit in milliseconds, when declared.
    pub timeout_ms: Option<u32>,
    /// sha256 over the canonical JSON of name, description and both schemas (and the
    /// annotations, when there are any).
    pub definition_sha256: String,
    /// The areas the tool works in, most general first: declared, or inferred from the
    /// service's and the tool's names ([`super::taxonomy`]).
    pub domains: Vec<String>,
    /// The kinds of operation it is (`crud.read`, `search` ...): declared, or inferred from
    /// its name's verb; may be empty.
    pub categories: Vec<String>,
    /// Hints about its behaviour, as declared (MCP's tool annotations); empty when none.
    pub annotations: ToolAnnotations,
    /// The transport layer's encoded form, built on first read.
    pub wire: WireSlot,
}

impl RegisteredTool {
    /// The input schema as JSON.
    pub fn input_schema_json(&self) -> Value {
        serde_json::from_str(&self.input_schema).unwrap_or(Value::Null)
    }

    /// The bytes of the definition counted against the tenant's `max_tool_bytes_per_tenant`:
    /// name, description, title and the schemas' compact JSON text.
    pub fn definition_bytes(&self) -> u64 {
        let bytes = self.name.as_str().len()
            + self.description.len()
            + self.annotations.title.len()
            + self.input_schema.len()
            + self.output_schema.as_deref().map_or(0, str::len);
        bytes as u64
    }

    /// Whether `other` is registered exactly as this tool is: definition, capabilities, time
    /// limit, domains and categories.
    pub fn same_as(&self, other: &RegisteredTool) -> bool {
        self.definition_sha256 == other.definition_sha256
            && self.capabilities == other.capabilities
            && self.timeout_ms == other.timeout_ms
            && self.domains == other.domains
            && self.categories == other.categories
    }

    /// The output schema as JSON, when declared.
    pub fn output_schema_json(&self) -> Option<Value> {
        self.output_schema
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
    }
}

/// A validated service registration, ready to be stored.
#[derive(Debug)]
pub struct ValidatedService {
    /// The service's name.
    pub name: ServiceName,
    /// The service's version (semantic versioning).
    pub version: String,
    /// Where the service serves ToolProviderService; may be empty.
    pub endpoint: String,
    /// The tools offered, sorted by name.
    pub tools: Vec<Arc<RegisteredTool>>,
    /// The lease TTL granted.
    pub ttl: Duration,
    /// Which replica registers.
    pub instance: InstanceId,
}

/// A live service in the store: its instances, each under a lease of its own, and the
/// contract (version and tools) of the leading one.
#[derive(Debug)]
pub struct ServiceEntry {
    /// The tenant owning the service.
    pub tenant: TenantId,
    /// The service's name.
    pub name: ServiceName,
    /// The leading contract: the one of the highest version among the live instances (the
    /// most recent registration's among equals) when the entry was made.
    pub contract: Arc<Contract>,
    /// The instances, in the order they registered (the newest last); never empty. Some may
    /// have lapsed and not been swept yet: read them with [`Self::live_instances_at`].
    pub instances: Vec<Arc<Instance>>,
    /// Whose turn it is to take the next call (see `invoke::route`).
    pub turn: AtomicUsize,
}

impl ServiceEntry {
    /// A service of `instances` (not empty), led by the contract of the highest version among
    /// the live ones (the most recent registration's among equals).
    pub fn new(tenant: TenantId, name: ServiceName, instances: Vec<Arc<Instance>>) -> Self {
        let now = monotonic_now();
        let leader = instances
            .iter()
            .filter(|instance| instance.lease.is_live_at(now))
            .max_by(|a, b| a.contract.semver.cmp(&b.contract.semver))
            .or(instances.last())
            .expect("a service has at least one instance");
        let contract = Arc::clone(&leader.contract);
        Self {
            tenant,
            name,
            contract,
            instances,
            turn: AtomicUsize::new(0),
        }
    }

    /// The same service with other instances (`instances` not empty); the leading contract
    /// is chosen again.
    pub fn with_instances(&self, instances: Vec<Arc<Instance>>) -> Self {
        let entry = Self::new(self.tenant, self.name.clone(), instances);
        entry
            .turn
            .store(self.turn.load(Ordering::Relaxed), Ordering::Relaxed);
        entry
    }

    /// The service's version: the leading contract's.
    pub fn version(&self) -> &str {
        &self.contract.version
    }

    /// The tools offered, sorted by name: the leading contract's.
    pub fn tools(&self) -> &[Arc<RegisteredTool>] {
        &self.contract.tools
    }

    /// The instances whose lease is live at the monotonic time `now`, oldest first.
    pub fn live_instances_at(&self, now: u64) -> impl Iterator<Item = &Arc<Instance>> {
        self.instances
            .iter()
            .filter(move |instance| instance.lease.is_live_at(now))
    }

    /// Whether any instance is live at the monotonic time `now`.
    pub fn is_live_at(&self, now: u64) -> bool {
        self.live_instances_at(now).next().is_some()
    }

    /// Whether any instance is live now.
    pub fn is_live(&self) -> bool {
        self.is_live_at(monotonic_now())
    }

    /// The most recent live registration (the most recent of all when none is live).
    pub fn newest(&self) -> &Arc<Instance> {
        let now = monotonic_now();
        self.live_instances_at(now)
            .last()
            .or(self.instances.last())
            .expect("a service has at least one instance")
    }

    /// Where the most recent live registration serves ToolProviderService; may be empty.
    pub fn endpoint(&self) -> &str {
        &self.newest().endpoint
    }

    /// When the most recent live registration was made.
    pub fn registered_at(&self) -> SystemTime {
        self.newest().registered_at
    }

    /// When the service goes unless an instance heartbeats: the latest lease deadline.
    pub fn expires_at(&self) -> SystemTime {
        let deadline = self
            .instances
            .iter()
            .map(|instance| instance.lease.deadline())
            .max()
            .unwrap_or_default();
        wall_time_of(deadline)
    }

    /// The instance that joined last: for the entry a registration returns, the instance it
    /// registered.
    pub fn last_registered(&self) -> &Arc<Instance> {
        self.instances
            .last()
            .expect("a service has at least one instance")
    }

    /// The instance holding `lease`.
    pub fn instance_with_lease(&self, lease: LeaseId) -> Option<&Arc<Instance>> {
        self.instances
            .iter()
            .find(|instance| instance.lease.id == lease)
    }

    /// Finds one of the service's tools by name.
    pub fn tool(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.contract.tool(name)
    }

    /// What this service counts against its tenant's quota: one service, and the tools of
    /// each distinct contract its instances hold (one, unless replicas of several versions
    /// are registered at once, as during a rolling update).
    pub fn usage(&self) -> Usage {
        let mut contracts: Vec<&Arc<Contract>> = Vec::with_capacity(1);
        for instance in &self.instances {
            if !contracts
                .iter()
                .any(|seen| Arc::ptr_eq(seen, &instance.contract))
            {
                contracts.push(&instance.contract);
            }
        }
        let tools = contracts.iter().flat_map(|contract| &contract.tools);
        Usage {
            services: 1,
            tools: tools.clone().count() as u64,
            tool_bytes: tools.map(|tool| tool.definition_bytes()).sum(),
        }
    }

    /// Whole seconds since the most recent live registration was made.
    pub fn uptime_seconds(&self) -> u64 {
        SystemTime::now()
            .duration_since(self.registered_at())
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or(0)
    }
}

/// A tool together with the live service offering it.
#[derive(Debug, Clone)]
pub struct ToolRef {
    /// The service offering the tool.
    pub service: Arc<ServiceEntry>,
    /// The tool.
    pub tool: Arc<RegisteredTool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_are_dns_labels() {
        for good in ["a", "story-generator", "x1", &"a".repeat(63)] {
            assert!(ServiceName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "Upper", "a_b", "a.b", &"a".repeat(64)] {
            assert!(ServiceName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tool_names_allow_letters_digits_underscore_dot_dash() {
        for good in ["generate_structure", "a.b-C_9", &"t".repeat(128)] {
            assert!(ToolName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "has space", "slash/", "ünï", &"t".repeat(129)] {
            assert!(ToolName::parse(bad).is_err(), "{bad}");
        }
    }
}
