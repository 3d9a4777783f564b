//! How a tenant's registered tools look to an MCP client: the `tools/list` entry of each, and
//! the tool and service a `tools/call` name stands for.
//!
//! A tool is listed under its own name (toolplane's tool names are MCP's: 1-128 of
//! `[A-Za-z0-9_.-]`). MCP names are unique per server, so a name several services offer is
//! listed once per service as `SERVICE.TOOL` (service names are DNS labels, without dots).
//! Names starting `SERVICE.` belong to that service: one that reads as `SERVICE.TOOL` of a tool
//! the service offers stands for that tool, and another service's tool of that name is listed
//! and called as `ITS_SERVICE.NAME`. So no two tools are listed under one name, and no service
//! can take calls meant for another's tool by naming a tool after it.

use std::sync::Arc;

use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::envelope::TenantId;
use crate::registry::model::{Capability, RegisteredTool};
use crate::registry::{Registry, ServiceName, ToolName, ToolRef};

/// The `_meta` keys toolplane adds to what it lists and answers (a `toolplane/` prefix, as MCP
/// asks of implementation-specific keys).
pub mod meta_keys {
    /// The service offering the tool.
    pub const SERVICE: &str = "toolplane/service";
    /// That service's version.
    pub const SERVICE_VERSION: &str = "toolplane/service_version";
    /// The tool's name as registered (the listed name may be `SERVICE.TOOL`).
    pub const TOOL: &str = "toolplane/tool";
    /// The capabilities the tool declared (`retry`, `streaming`, ...).
    pub const CAPABILITIES: &str = "toolplane/capabilities";
    /// sha256 of the tool's definition, as in `GetTool` and the invocation records.
    pub const DEFINITION_SHA256: &str = "toolplane/definition_sha256";
    /// The tool's domains (`github`, `github.issues`), declared or inferred.
    pub const DOMAINS: &str = "toolplane/domains";
    /// The tool's categories (`crud.read`, `search` ...), declared or inferred.
    pub const CATEGORIES: &str = "toolplane/categories";
    /// The invocation record's id (on a call's answer).
    pub const INVOCATION_ID: &str = "toolplane/invocation_id";
    /// Why a call failed: the `ErrorInfo` reason gRPC callers get.
    pub const ERROR_REASON: &str = "toolplane/error_reason";
    /// The provider's warnings and output-schema mismatches.
    pub const WARNINGS: &str = "toolplane/warnings";
}

/// The name a tool is listed under: its own, or `SERVICE.TOOL` when `offered_by` (the number of
/// the tenant's services offering a tool of that name) is more than one, or when its own name
/// reads as another service's tool (`SERVICE.TOOL` of a tool that service offers).
pub fn listed_name(
    registry: &Registry,
    tenant: TenantId,
    found: &ToolRef,
    offered_by: usize,
) -> String {
    if offered_by > 1 || service_tool(registry, tenant, found.tool.name.as_str()).is_some() {
        format!("{}.{}", found.service.name, found.tool.name)
    } else {
        found.tool.name.to_string()
    }
}

/// How many services offer the tool of each entry of `page` (tools sorted by name, then
/// service): the length of its run of equal names, except for the runs at the page's edges,
/// which may go on beyond it and are counted by `offered_by` (a store lookup).
pub fn offered_counts(page: &[ToolRef], offered_by: impl Fn(&ToolName) -> usize) -> Vec<usize> {
    let mut counts = Vec::with_capacity(page.len());
    let mut start = 0;
    while start < page.len() {
        let name = &page[start].tool.name;
        let run = page[start..]
            .iter()
            .take_while(|found| &found.tool.name == name)
            .count();
        let at_edge = start == 0 || start + run == page.len();
        let count = if at_edge { offered_by(name) } else { run };
        counts.extend(std::iter::repeat_n(count, run));
        start += run;
    }
    counts
}

/// The `tools/list` entry of a tool listed as `name`. The input schema is the registered one;
/// the output schema is given only when it describes an object, as MCP requires (a tool whose
/// output is no object still answers, in text); a tool declaring [`Capability::Retry`] is
/// annotated `idempotentHint`.
pub fn listed_tool(found: &ToolRef, name: String) -> Tool {
    let tool = &found.tool;
    let input_schema = match serde_json::from_str::<Value>(&tool.input_schema) {
        Ok(Value::Object(schema)) => schema,
        // Registration accepts only schemas that are JSON objects.
        _ => JsonObject::new(),
    };
    let output_schema = tool
        .output_schema
        .as_deref()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|schema| match schema {
            Value::Object(schema) if schema.get("type") == Some(&json!("object")) => Some(schema),
            _ => None,
        });
    let capabilities: Vec<&str> = tool
        .capabilities
        .iter()
        .map(|capability| capability.as_str())
        .collect();
    let mut meta = JsonObject::new();
    meta.insert(
        meta_keys::SERVICE.into(),
        json!(found.service.name.as_str()),
    );
    meta.insert(
        meta_keys::SERVICE_VERSION.into(),
        json!(found.service.version()),
    );
    meta.insert(meta_keys::TOOL.into(), json!(tool.name.as_str()));
    meta.insert(meta_keys::CAPABILITIES.into(), json!(capabilities));
    meta.insert(
        meta_keys::DEFINITION_SHA256.into(),
        json!(tool.definition_sha256),
    );
    meta.insert(meta_keys::DOMAINS.into(), json!(tool.domains));
    meta.insert(meta_keys::CATEGORIES.into(), json!(tool.categories));
    let mut listed = Tool::new(name, tool.description.clone(), Arc::new(input_schema));
    if let Some(schema) = output_schema {
        listed = listed.with_raw_output_schema(Arc::new(schema));
    }
    if let Some(annotations) = annotations_of(tool) {
        if let Some(title) = &annotations.title {
            listed = listed.with_title(title.clone());
        }
        listed = listed.with_annotations(annotations);
    }
    listed.meta = Some(MetaObject(meta));
    listed
}

/// The annotations a tool is listed with: those it was registered with, and, when it says
/// nothing of it, `idempotentHint` for a tool safe to retry after a transient failure (one
/// calling twice does no more than calling once); `None` when there is nothing to say.
fn annotations_of(tool: &RegisteredTool) -> Option<ToolAnnotations> {
    let hints = &tool.annotations;
    let idempotent = hints.idempotent.or(tool
        .capabilities
        .contains(&Capability::Retry)
        .then_some(true));
    let title = Some(hints.title.clone()).filter(|title| !title.is_empty());
    let said = [
        hints.read_only,
        hints.destructive,
        idempotent,
        hints.open_world,
    ];
    if title.is_none() && said.iter().all(Option::is_none) {
        return None;
    }
    Some(ToolAnnotations::from_raw(
        title,
        hints.read_only,
        hints.destructive,
        idempotent,
        hints.open_world,
    ))
}

/// The tool of `tenant` that `name` names as `SERVICE.TOOL`, if its service offers one.
fn service_tool(
    registry: &Registry,
    tenant: TenantId,
    name: &str,
) -> Option<(ToolName, ServiceName)> {
    let (service, tool) = name.split_once('.')?;
    let service = ServiceName::parse(service).ok()?;
    let tool = ToolName::parse(tool).ok()?;
    registry.get_tool(tenant, &tool, Some(&service)).ok()?;
    Some((tool, service))
}

/// The tool a `tools/call` name stands for, and its service when the name is `SERVICE.TOOL`
/// of a tool that service offers; otherwise the tool of that name, which the invocation engine
/// finds, or finds ambiguous or unknown. A name that is no tool name is [`None`].
pub fn resolve_name(
    registry: &Registry,
    tenant: TenantId,
    name: &str,
) -> Option<(ToolName, Option<ServiceName>)> {
    if let Some((tool, service)) = service_tool(registry, tenant, name) {
        return Some((tool, Some(service)));
    }
    ToolName::parse(name).ok().map(|tool| (tool, None))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::registry::memory::MemoryStore;
    use crate::registry::model::{ServiceSpec, ToolSpec};
    use crate::registry::{RegistrationLimits, RegistryStore};

    /// An empty registry in memory.
    pub(in crate::mcp) fn registry() -> Registry {
        let store: Arc<dyn RegistryStore> = MemoryStore::start(64, 0);
        Registry::new(store, RegistrationLimits::default(), 16)
    }

    /// Registers `service` offering `tools` (schemas `{"type": "object"}`) in tenant 1.
    pub(in crate::mcp) fn register(
        registry: &Registry,
        service: &str,
        tools: &[&str],
        output: Option<Value>,
    ) {
        let spec = self::service(service, tools, output);
        registry.register(TenantId(1), &spec).expect("registered");
    }

    /// `service` offering `tools` (schemas `{"type": "object"}`) under the default lease.
    pub(in crate::mcp) fn service(
        service: &str,
        tools: &[&str],
        output: Option<Value>,
    ) -> ServiceSpec {
        ServiceSpec {
            name: service.into(),
            version: "1.0.0".into(),
            endpoint: String::new(),
            tools: tools
                .iter()
                .map(|name| ToolSpec {
                    name: (*name).into(),
                    description: format!("{name} of {service}"),
                    input_schema: Some(json!({"type": "object"})),
                    output_schema: output.clone(),
                    capabilities: Vec::new(),
                    timeout_ms: None,
                    domains: Vec::new(),
                    categories: Vec::new(),
                    annotations: Default::default(),
                })
                .collect(),
            ttl: None,
            instance_id: String::new(),
        }
    }

    fn resolved(registry: &Registry, name: &str) -> Option<(String, Option<String>)> {
        resolve_name(registry, TenantId(1), name)
            .map(|(tool, service)| (tool.to_string(), service.map(|s| s.to_string())))
    }

    #[tokio::test]
    async fn a_name_two_services_offer_is_listed_and_called_as_service_dot_tool() {
        let registry = registry();
        register(&registry, "alpha", &["search", "only.alpha"], None);
        register(&registry, "beta", &["search"], None);
        assert_eq!(
            listed_names(&registry),
            ["only.alpha", "alpha.search", "beta.search"]
        );
        assert_eq!(
            resolved(&registry, "beta.search"),
            Some(("search".into(), Some("beta".into())))
        );
        // A unique plain name that reads as no service's tool is that tool.
        assert_eq!(
            resolved(&registry, "only.alpha"),
            Some(("only.alpha".into(), None))
        );
        // Ambiguous or unknown names go to the engine as they are, which says so.
        assert_eq!(resolved(&registry, "search"), Some(("search".into(), None)));
        assert_eq!(
            resolved(&registry, "gamma.search"),
            Some(("gamma.search".into(), None))
        );
        assert_eq!(resolved(&registry, "no tool!"), None);
        // Counted from the page, the store asked only about the runs at its edges.
        register(&registry, "gamma", &["search", "zeta"], None);
        register(&registry, "delta", &["only.alpha", "zeta"], None);
        let all = registry.all_tools(TenantId(1));
        let looked_up = std::sync::Mutex::new(Vec::new());
        let counts = offered_counts(&all[1..all.len() - 1], |name| {
            looked_up.lock().expect("lock").push(name.to_string());
            registry.store().tools_named(TenantId(1), name).len()
        });
        // only.alpha (delta) | search (alpha beta gamma) | zeta (delta), zeta (gamma) cut off.
        assert_eq!(counts, [2, 3, 3, 3, 2]);
        assert_eq!(*looked_up.lock().expect("lock"), ["only.alpha", "zeta"]);
    }

    /// The names of tenant 1's tools as listed, in listing order.
    fn listed_names(registry: &Registry) -> Vec<String> {
        let all = registry.all_tools(TenantId(1));
        let counts = offered_counts(&all, |name| {
            registry.store().tools_named(TenantId(1), name).len()
        });
        (all.iter().zip(counts))
            .map(|(found, offered_by)| listed_name(registry, TenantId(1), found, offered_by))
            .collect()
    }

    /// A tool named as another service's tool (`files.read` beside service `files`' `read`) is
    /// listed and called as `ITS_SERVICE.NAME`: no two tools share a listed name, and the
    /// service's tool keeps its calls, whether its own name is ambiguous or not.
    #[tokio::test]
    async fn a_tool_named_as_another_services_tool_does_not_take_its_calls() {
        let registry = registry();
        register(&registry, "files", &["read"], None);
        register(&registry, "docs", &["read"], None);
        register(&registry, "mimic", &["files.read", "docs.write"], None);
        assert_eq!(
            listed_names(&registry),
            ["docs.write", "mimic.files.read", "docs.read", "files.read"]
        );
        let files_read = Some(("read".into(), Some("files".into())));
        assert_eq!(resolved(&registry, "files.read"), files_read);
        assert_eq!(
            resolved(&registry, "mimic.files.read"),
            Some(("files.read".into(), Some("mimic".into())))
        );
        // `docs` offers no `write`: `docs.write` is mimic's tool, under its own name.
        assert_eq!(
            resolved(&registry, "docs.write"),
            Some(("docs.write".into(), None))
        );
        // With `read` offered by `files` alone, it is listed plain and still called either way.
        let registry = self::registry();
        register(&registry, "files", &["read"], None);
        register(&registry, "mimic", &["files.read", "docs.write"], None);
        assert_eq!(
            listed_names(&registry),
            ["docs.write", "mimic.files.read", "read"]
        );
        assert_eq!(resolved(&registry, "files.read"), files_read);
        assert_eq!(resolved(&registry, "read"), Some(("read".into(), None)));
    }

    #[tokio::test]
    async fn an_output_schema_is_listed_only_when_it_describes_an_object() {
        let registry = registry();
        register(
            &registry,
            "objects",
            &["obj"],
            Some(json!({"type": "object"})),
        );
        register(
            &registry,
            "numbers",
            &["num"],
            Some(json!({"type": "number"})),
        );
        for found in registry.all_tools(TenantId(1)) {
            let listed = listed_tool(&found, found.tool.name.to_string());
            let meta = listed.meta.as_ref().expect("meta");
            assert_eq!(
                meta.0[meta_keys::SERVICE],
                json!(found.service.name.as_str())
            );
            assert_eq!(
                listed.output_schema.is_some(),
                found.tool.name.as_str() == "obj"
            );
            assert_eq!(
                Value::Object((*listed.input_schema).clone()),
                json!({"type": "object"})
            );
        }
    }
}
