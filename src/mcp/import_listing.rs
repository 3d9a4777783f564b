//! The tools of one listing of an MCP server, as an import takes them: each made a toolplane
//! tool and checked alone as a registration checks it (name, description, schemas compiled
//! within the registration limits), so that one tool toolplane cannot take leaves out that
//! tool only, with a warning.
//!
//! An import lists its server every `refresh_interval`, and the list rarely changes: the
//! outcome of each tool's check is kept ([`CheckedTools`]) until the next listing, so a tool
//! listed again as it was is neither compiled again nor warned about again (a tool left out
//! is logged once per definition, as a tool held back for approval is).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::Value;

use super::approval::{ApprovedTools, Verdict};
use super::import::UNVERSIONED;
use super::import_config::McpImport;
use crate::registry::RegistrationLimits;
use crate::registry::annotations::fitted_title;
use crate::registry::model::{Capability, ServiceSpec, ToolAnnotations, ToolSpec};
use crate::registry::validate::validate_service;

/// The most pages one listing of a server's tools reads.
pub const MAX_LISTING_PAGES: usize = 50;

/// How many times `max_tools_per_service` tools one listing reads at most: room for tools
/// left out or held back for approval beside those registered.
const LISTED_TOOLS_PER_REGISTERED: usize = 4;

/// The longest one listing of a server's tools may take, when the lease it renews is longer:
/// as long as the MCP SDKs' clients wait for a request's answer (the TypeScript SDK's default).
pub const LISTING_TIMEOUT: Duration = Duration::from_secs(60);

/// The tools of `session`'s server, page by page as MCP's pagination gives them, as rmcp's
/// `list_all_tools` reads them but bounded: a server whose pages never end (a cursor it gave
/// before, or pages without end) would otherwise hold the import in one listing forever, its
/// tools piling up in memory. The listing stops after [`MAX_LISTING_PAGES`] pages, after a
/// page naming a cursor given before, or once it holds four times `max_tools_per_service`
/// tools; what was read by then is taken, and why it stopped is logged at WARN.
///
/// A listing not done within [`LISTING_TIMEOUT`], or the lease of the import's registration
/// when shorter (past it, the listing renews nothing), fails: a server that stopped answering
/// held its import in that listing for good, never renewing its lease or opening its session
/// again (restarting a server toolplane started). The page asked for is cancelled at the
/// server (`notifications/cancelled`).
pub async fn list_tools(
    session: &Peer<RoleClient>,
    import: &McpImport,
    limits: &RegistrationLimits,
) -> Result<Vec<Tool>, String> {
    let bound = LISTING_TIMEOUT.min(import.lease(limits.max_ttl));
    match tokio::time::timeout(bound, list_pages(session, import, limits)).await {
        Ok(listed) => listed.map_err(|error| error.to_string()),
        Err(_) => Err(format!(
            "the MCP server did not finish listing its tools within {bound:?}"
        )),
    }
}

/// The pages of [`list_tools`], unbounded in time.
async fn list_pages(
    session: &Peer<RoleClient>,
    import: &McpImport,
    limits: &RegistrationLimits,
) -> Result<Vec<Tool>, ServiceError> {
    let most_tools = limits.max_tools.saturating_mul(LISTED_TOOLS_PER_REGISTERED);
    let (mut tools, mut cursor, mut cursors) = (Vec::new(), None, HashSet::new());
    for page in 1.. {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let answer = session.list_tools(Some(params)).await?;
        tools.extend(answer.tools);
        let Some(next) = answer.next_cursor else {
            break;
        };
        let stopped = if !cursors.insert(next.clone()) {
            "its next page is one it has listed already"
        } else if page == MAX_LISTING_PAGES {
            "it has more pages than a listing reads"
        } else if tools.len() >= most_tools {
            "it lists more tools than a listing reads"
        } else {
            cursor = Some(next);
            continue;
        };
        tracing::warn!(service = %import.service, source = %import.source, pages = page, tools = tools.len(), most_tools, "the MCP server's tool list is read no further: {stopped}; the tools read are taken");
        break;
    }
    Ok(tools)
}

/// A listed tool as an import takes it.
#[derive(Debug, Clone)]
pub struct ListedTool {
    /// The tool as it is registered.
    pub spec: ToolSpec,
    /// Its `definition_sha256`: the value `approved_tools` names it with.
    pub sha256: String,
    /// What the import's `approved_tools` say of it; `None` when the import asks for no
    /// approval.
    pub verdict: Option<Verdict>,
}

/// What each tool of an import's last listing was found to be, by name: kept from one listing
/// to the next, so that only tools new or changed since are checked (and logged) again.
#[derive(Debug, Default)]
pub struct CheckedTools {
    tools: HashMap<String, CheckedTool>,
    /// The names the last listing held more than once.
    listed_twice: BTreeSet<String>,
    /// How many tools the last registration left out, past `max_tools_per_service`.
    beyond_limit: usize,
}

/// A tool as it was listed, and the outcome of its check.
#[derive(Debug)]
struct CheckedTool {
    listed: Tool,
    /// The tool as it is registered and its definition hash; `None` when it is left out.
    taken: Option<(ToolSpec, String)>,
}

/// The tools of a listing that a registration takes (each checked on its own against `limits`,
/// unless `checked` holds it from the last listing as it is listed now; a tool left out is
/// logged at WARN when it is checked), with their definition hashes and what `approved` (when
/// the import asks for approval) says of them. `checked` is left holding this listing's tools.
///
/// A name listed more than once (pages that overlapped as the server's list changed between
/// them, or a fault of the server's) is taken from its first tool, and the others are left
/// out, so the rest of the listing can still be registered; the names are logged at WARN when
/// the last listing did not hold them twice too.
pub fn read_listing(
    import: &McpImport,
    approved: Option<&ApprovedTools>,
    limits: &RegistrationLimits,
    tools: &[Tool],
    checked: &mut CheckedTools,
) -> Vec<ListedTool> {
    let mut last = std::mem::take(&mut checked.tools);
    let mut listed = Vec::with_capacity(tools.len());
    let mut listed_twice = BTreeSet::new();
    for tool in tools {
        let name = tool.name.to_string();
        // `checked` holds the names this listing has listed so far.
        if checked.tools.contains_key(&name) {
            listed_twice.insert(name);
            continue;
        }
        let kept = last
            .remove(&name)
            .filter(|kept| kept.listed == *tool)
            .unwrap_or_else(|| CheckedTool {
                listed: tool.clone(),
                taken: check(import, limits, tool),
            });
        if let Some((spec, sha256)) = &kept.taken {
            listed.push(ListedTool {
                spec: spec.clone(),
                sha256: sha256.clone(),
                verdict: approved.map(|approved| approved.verdict(&spec.name, sha256)),
            });
        }
        checked.tools.insert(name, kept);
    }
    let newly: Vec<&String> = listed_twice.difference(&checked.listed_twice).collect();
    if !newly.is_empty() {
        tracing::warn!(
            service = %import.service,
            tools = ?newly,
            "the MCP server listed these names more than once: the first tool listed under \
             each is taken, the others left out"
        );
    }
    checked.listed_twice = listed_twice;
    listed
}

/// Leaves out the tools past the first `max_tools_per_service` of `tools` (a registration of
/// more is refused whole), logged at WARN when their count differs from the last listing's.
pub fn keep_within_limit(
    import: &McpImport,
    limits: &RegistrationLimits,
    tools: &mut Vec<ToolSpec>,
    checked: &mut CheckedTools,
) {
    let beyond = tools.len().saturating_sub(limits.max_tools);
    if beyond != 0 && beyond != checked.beyond_limit {
        tracing::warn!(
            service = %import.service,
            "the MCP server lists {} tools to register, {beyond} more than a registration may \
             hold (max_tools_per_service): the first {} are registered, the rest left out",
            tools.len(),
            limits.max_tools
        );
    }
    tools.truncate(limits.max_tools);
    checked.beyond_limit = beyond;
}

/// `tool` as it is registered, and its definition hash, when a registration takes it alone;
/// `None` (logged at WARN) when it does not.
fn check(
    import: &McpImport,
    limits: &RegistrationLimits,
    tool: &Tool,
) -> Option<(ToolSpec, String)> {
    let candidate = tool_spec(tool);
    let alone = ServiceSpec {
        name: import.service.to_string(),
        version: UNVERSIONED.to_owned(),
        endpoint: import.endpoint(),
        tools: vec![candidate.clone()],
        ttl: None,
        instance_id: String::new(),
    };
    match validate_service(&alone, limits) {
        Ok(validated) => {
            let sha256 = validated.tools[0].definition_sha256.clone();
            Some((candidate, sha256))
        }
        Err(error) => {
            tracing::warn!(service = %import.service, tool = %tool.name, %error, "an MCP tool is left out of the import");
            None
        }
    }
}

/// An MCP tool as a toolplane tool. One the server marks read-only or idempotent (its
/// `readOnlyHint` or `idempotentHint` annotation) declares [`Capability::Retry`], so a caller's
/// retry policy applies to it; no other tool does.
fn tool_spec(tool: &Tool) -> ToolSpec {
    let safe_to_retry = tool.annotations.as_ref().is_some_and(|annotations| {
        annotations.read_only_hint == Some(true) || annotations.idempotent_hint == Some(true)
    });
    ToolSpec {
        name: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema: Some(Value::Object((*tool.input_schema).clone())),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| Value::Object((**schema).clone())),
        capabilities: if safe_to_retry {
            vec![Capability::Retry]
        } else {
            Vec::new()
        },
        timeout_ms: None,
        // Inferred from the names at registration, as for any provider that declares none.
        domains: Vec::new(),
        categories: Vec::new(),
        annotations: annotations_of(tool),
    }
}

/// The hints `tool` gives (its annotations, and its title: the tool's own, else its
/// annotations', fitted to what a registration takes: one line, at most
/// [`MAX_TITLE_BYTES`](crate::registry::annotations::MAX_TITLE_BYTES)).
fn annotations_of(tool: &Tool) -> ToolAnnotations {
    let given = tool.annotations.clone().unwrap_or_default();
    let title = tool.title.clone().or(given.title).unwrap_or_default();
    ToolAnnotations {
        title: fitted_title(&title),
        read_only: given.read_only_hint,
        destructive: given.destructive_hint,
        idempotent: given.idempotent_hint,
        open_world: given.open_world_hint,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::envelope::TenantId;
    use crate::mcp::import::McpSource;
    use crate::registry::ServiceName;
    use crate::test_logs::logged;

    fn import(approved_tools: Option<ApprovedTools>) -> McpImport {
        McpImport {
            service: ServiceName::parse("files").expect("a service name"),
            source: McpSource::Http("http://127.0.0.1:9/mcp".to_owned()),
            tenant: TenantId(0),
            refresh_interval: Duration::from_secs(60),
            auth: None,
            approved_tools,
        }
    }

    fn tool(name: &'static str, description: &'static str) -> Tool {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
        let Value::Object(schema) = schema else {
            unreachable!("an object")
        };
        Tool::new(name, description, Arc::new(schema))
    }

    /// The tools `read_listing` takes from `tools` (name and hash), and the warnings it logs.
    fn read(
        import: &McpImport,
        tools: &[Tool],
        checked: &mut CheckedTools,
    ) -> (Vec<(String, String, Option<Verdict>)>, usize) {
        let limits = RegistrationLimits::default();
        let approved = import.approved_tools.as_ref();
        let (listed, log) = logged(|| read_listing(import, approved, &limits, tools, checked));
        let taken = (listed.into_iter())
            .map(|tool| (tool.spec.name, tool.sha256, tool.verdict))
            .collect();
        (taken, log.matches("left out of the import").count())
    }

    #[test]
    fn a_tool_listed_again_as_it_was_is_taken_as_before_and_not_warned_about_again() {
        let import = import(None);
        let mut checked = CheckedTools::default();
        let listing = [tool("read", "Reads a file."), tool("bad name", "Spaced.")];
        let (first, warned) = read(&import, &listing, &mut checked);
        assert_eq!(warned, 1, "the tool toolplane cannot take");
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0, "read");

        assert_eq!(read(&import, &listing, &mut checked), (first.clone(), 0));

        // The tool left out, changed (and still not one toolplane takes): warned about again.
        let changed = [tool("read", "Reads a file."), tool("bad name", "Other.")];
        assert_eq!(read(&import, &changed, &mut checked), (first.clone(), 1));

        // The tool taken, changed: checked again, under its new hash.
        let (again, warned) = read(&import, &[tool("read", "Reads a text file.")], &mut checked);
        assert_eq!(warned, 0);
        assert_eq!(again[0].0, "read");
        assert_ne!(again[0].1, first[0].1, "a new definition, a new hash");

        // A tool that left the listing and came back is checked again (and warned about).
        assert_eq!(read(&import, &listing, &mut checked), (first, 1));
    }

    /// A server that lists a name twice (pages that overlap when its list changes between
    /// them, or a fault of its own) has the first of each name taken and the others left
    /// out, warned about once, so its other tools are still registered (two tools of one name
    /// would have the whole registration refused).
    #[test]
    fn a_name_listed_twice_is_taken_once() {
        let import = import(None);
        let mut checked = CheckedTools::default();
        let listing = [
            tool("read", "Reads a file."),
            tool("write", "Writes a file."),
            tool("read", "Reads a file."),
            tool("write", "Another writer."),
        ];
        let limits = RegistrationLimits::default();
        let (taken, log) = logged(|| read_listing(&import, None, &limits, &listing, &mut checked));
        let names: Vec<&str> = taken.iter().map(|tool| tool.spec.name.as_str()).collect();
        assert_eq!(names, ["read", "write"]);
        assert_eq!(
            taken[1].spec.description, "Writes a file.",
            "the first listed"
        );
        assert_eq!(log.matches("more than once").count(), 1, "{log}");
        let tools = taken.into_iter().map(|tool| tool.spec).collect();
        let spec = ServiceSpec {
            name: "files".to_owned(),
            version: UNVERSIONED.to_owned(),
            endpoint: import.endpoint(),
            tools,
            ttl: None,
            instance_id: String::new(),
        };
        validate_service(&spec, &limits).expect("a registration takes them");

        let (again, log) = logged(|| read_listing(&import, None, &limits, &listing, &mut checked));
        assert_eq!(again.len(), 2);
        assert!(!log.contains("more than once"), "warned once: {log}");
    }

    /// A server listing more tools than a registration may hold has the first
    /// `max_tools_per_service` registered and the rest left out, warned about once while
    /// the count stays.
    #[test]
    fn tools_past_the_registration_limit_are_left_out() {
        let import = import(None);
        let mut checked = CheckedTools::default();
        let limits = RegistrationLimits {
            max_tools: 2,
            ..RegistrationLimits::default()
        };
        let names = ["a", "b", "c", "d"].map(|name| name.to_owned());
        let specs = |count: usize, checked: &mut CheckedTools| -> Vec<ToolSpec> {
            let listing: Vec<Tool> = names[..count]
                .iter()
                .map(|name| Tool::new(name.clone(), "A tool.", tool("x", "").input_schema))
                .collect();
            let taken = read_listing(&import, None, &limits, &listing, checked);
            taken.into_iter().map(|tool| tool.spec).collect()
        };
        let mut tools = specs(4, &mut checked);
        let ((), log) = logged(|| keep_within_limit(&import, &limits, &mut tools, &mut checked));
        let kept: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
        assert_eq!(kept, ["a", "b"]);
        assert_eq!(log.matches("max_tools_per_service").count(), 1, "{log}");

        let mut tools = specs(4, &mut checked);
        let ((), log) = logged(|| keep_within_limit(&import, &limits, &mut tools, &mut checked));
        assert_eq!((tools.len(), log.as_str()), (2, ""), "warned once");
        let mut tools = specs(3, &mut checked);
        let ((), log) = logged(|| keep_within_limit(&import, &limits, &mut tools, &mut checked));
        assert_eq!(tools.len(), 2);
        assert!(log.contains("1 more"), "another count, warned again: {log}");
    }

    #[test]
    fn approval_is_judged_at_every_listing() {
        let listing = [tool("read", "Reads a file.")];
        let mut checked = CheckedTools::default();
        let (open, _) = read(&import(None), &listing, &mut checked);
        let sha256 = open[0].1.clone();
        let service = ServiceName::parse("files").expect("a service name");
        let approving = |sha256: &str| {
            let table = BTreeMap::from([("read".to_owned(), sha256.to_owned())]);
            Some(ApprovedTools::check(&service, &table).expect("an approval"))
        };
        let other = "0".repeat(64);
        let (held, _) = read(&import(approving(&other)), &listing, &mut checked);
        assert_eq!(held[0].2, Some(Verdict::Changed(other)));
        let (approved, _) = read(&import(approving(&sha256)), &listing, &mut checked);
        assert_eq!(approved[0].2, Some(Verdict::Approved));
    }
}
