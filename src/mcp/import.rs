//! Importing the tools of MCP servers: for each `[[mcp_imports]]` entry, toolplane opens an MCP
//! session with the server, lists its tools (every page) and registers them as a service of
//! its own under a lease it keeps alive, with the server's URL (after `mcp+`) as endpoint, so
//! its tools are discovered, validated, bounded, recorded and invoked like any other (calls go
//! over MCP, see [`super::client`]).
//!
//! The list is read again every `refresh_interval`, and at once when the server sends
//! `notifications/tools/list_changed`; a changed list registers the service again (an
//! `UPDATED` event), an unchanged one renews the lease. A tool toolplane cannot take (a name
//! outside `[A-Za-z0-9_.-]`, a schema that does not compile) is left out, with a warning. While
//! the server cannot be reached, toolplane tries again (1 s, doubling up to the refresh
//! interval) and the lease is not renewed, so the service expires after `3 x refresh_interval`
//! (at most `max_ttl`) and comes back when the server does. A `bearer_token_env` names the
//! environment variable whose value is sent as `Authorization: Bearer ...` to the server.

use std::time::Duration;

use rmcp::model::Tool;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::task::JoinSet;

use super::client::McpCaller;
use crate::envelope::TenantId;
use crate::invoke::caller::MCP_ENDPOINT_PREFIX;
use crate::registry::model::{ServiceSpec, ToolSpec};
use crate::registry::validate::validate_service;
use crate::registry::{LeaseId, Registry, ServiceName};

/// How often an imported server's tools are listed again, by default.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// The first wait before trying an unreachable server again.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The version an imported service gets when its server names none in semantic versioning.
const UNVERSIONED: &str = "0.0.0";

/// One `[[mcp_imports]]` entry of the configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpImportConfig {
    /// The service the server's tools are registered under (a DNS label).
    pub service: String,
    /// The MCP server's Streamable HTTP URL (`http://` or `https://`).
    pub url: String,
    /// The tenant the service is registered in.
    #[serde(default)]
    pub tenant: u64,
    /// How often the server's tools are listed again.
    #[serde(default = "default_refresh_interval", with = "humantime_serde")]
    pub refresh_interval: Duration,
    /// The environment variable holding a bearer token sent to the server
    /// (`Authorization: Bearer ...`), when it asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
}

/// A secret: shown as `[redacted]` wherever it is printed for debugging.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

fn default_refresh_interval() -> Duration {
    DEFAULT_REFRESH_INTERVAL
}

/// An import, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpImport {
    /// The service the tools are registered under.
    pub service: ServiceName,
    /// The MCP server's URL.
    pub url: String,
    /// The tenant.
    pub tenant: TenantId,
    /// How often the tools are listed again.
    pub refresh_interval: Duration,
    /// The bearer token sent to the server, if any.
    pub bearer_token: Option<Secret>,
}

impl McpImport {
    /// The endpoint its service is registered with: the server's URL after `mcp+`.
    pub fn endpoint(&self) -> String {
        format!("{MCP_ENDPOINT_PREFIX}{}", self.url)
    }
}

impl McpImportConfig {
    /// The import this entry asks for; the error names what to fix.
    pub fn check(&self, max_ttl: Duration) -> Result<McpImport, String> {
        let service = ServiceName::parse(&self.service)
            .map_err(|problem| format!("mcp_imports: service {:?}: {problem}", self.service))?;
        let uri: http::Uri = self.url.parse().map_err(|_| {
            format!(
                "mcp_imports: url {:?} of service {service} is not a URL",
                self.url
            )
        })?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!(
                "mcp_imports: url {:?} of service {service} must be an http:// or https:// URL \
                 with a host, e.g. http://10.0.0.7:3001/mcp",
                self.url
            ));
        }
        if self.refresh_interval < Duration::from_secs(1) || self.refresh_interval > max_ttl / 2 {
            return Err(format!(
                "mcp_imports: refresh_interval of service {service} must lie between 1s and \
                 half of max_ttl ({:?}), so the lease is renewed before it runs out",
                max_ttl / 2
            ));
        }
        let bearer_token = match &self.bearer_token_env {
            None => None,
            Some(variable) => Some(Secret(std::env::var(variable).map_err(|_| {
                format!(
                    "mcp_imports: bearer_token_env of service {service} names {variable}, \
                     which is not set (or not UTF-8) in toolplane's environment"
                )
            })?)),
        };
        Ok(McpImport {
            service,
            url: self.url.clone(),
            tenant: TenantId(self.tenant),
            refresh_interval: self.refresh_interval,
            bearer_token,
        })
    }
}

/// Runs every import until the returned set is dropped; each uses the session `caller` keeps
/// with its server, the one its tools are called over.
pub fn spawn_all(imports: &[McpImport], registry: &Registry, caller: &McpCaller) -> JoinSet<()> {
    let mut running = JoinSet::new();
    for import in imports {
        running.spawn(run(import.clone(), registry.clone(), caller.clone()));
    }
    running
}

/// What an import registered last: its lease, and the version and tools it registered under
/// it.
struct Registered {
    lease: LeaseId,
    version: String,
    tools: Vec<ToolSpec>,
}

async fn run(import: McpImport, registry: Registry, caller: McpCaller) {
    let endpoint = import.endpoint();
    let mut retry = FIRST_RETRY;
    let mut registered: Option<Registered> = None;
    loop {
        match caller.session(&endpoint).await {
            Ok(session) => loop {
                let version = session
                    .peer_info()
                    .and_then(|info| info.server_info.clone())
                    .map(|implementation| implementation.version)
                    .filter(|version| semver::Version::parse(version).is_ok())
                    .unwrap_or_else(|| UNVERSIONED.to_owned());
                match session.list_all_tools().await {
                    Ok(tools) => {
                        retry = FIRST_RETRY;
                        let spec = service_spec(&import, &registry, &endpoint, version, &tools);
                        registered = keep_registered(&import, &registry, spec, registered);
                    }
                    Err(error) => {
                        tracing::warn!(service = %import.service, url = %import.url, %error, "cannot list the MCP server's tools");
                        caller.forget(&endpoint, &session).await;
                        break;
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(import.refresh_interval) => {}
                    () = session.service().tools_changed.notified() => {}
                }
            },
            Err(error) => {
                tracing::warn!(service = %import.service, %error, retry_in = ?retry, "cannot reach the MCP server to import");
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(import.refresh_interval);
    }
}

/// The registration of `tools`: those toolplane can take, each checked on its own.
fn service_spec(
    import: &McpImport,
    registry: &Registry,
    endpoint: &str,
    version: String,
    tools: &[Tool],
) -> ServiceSpec {
    let ttl = (import.refresh_interval * 3).min(registry.limits().max_ttl);
    let mut spec = ServiceSpec {
        name: import.service.to_string(),
        version,
        endpoint: endpoint.to_owned(),
        tools: Vec::new(),
        ttl: Some(ttl),
        instance_id: String::new(),
    };
    for tool in tools {
        let candidate = tool_spec(tool);
        let alone = ServiceSpec {
            tools: vec![candidate.clone()],
            ..spec.clone()
        };
        match validate_service(&alone, registry.limits()) {
            Ok(_) => spec.tools.push(candidate),
            Err(error) => {
                tracing::warn!(service = %import.service, tool = %tool.name, %error, "an MCP tool is left out of the import");
            }
        }
    }
    spec
}

/// An MCP tool as a toolplane tool.
fn tool_spec(tool: &Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema: Some(Value::Object((*tool.input_schema).clone())),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| Value::Object((**schema).clone())),
        capabilities: Vec::new(),
        timeout_ms: None,
    }
}

/// Registers `spec` when its tools changed (or nothing is registered), else renews the lease;
/// answers what is registered now.
fn keep_registered(
    import: &McpImport,
    registry: &Registry,
    spec: ServiceSpec,
    registered: Option<Registered>,
) -> Option<Registered> {
    if let Some(current) =
        registered.filter(|current| current.tools == spec.tools && current.version == spec.version)
        && registry
            .heartbeat(import.tenant, &import.service, current.lease)
            .is_ok()
    {
        return Some(current);
    }
    match registry.register(import.tenant, &spec) {
        Ok(entry) => {
            tracing::info!(service = %import.service, url = %import.url, tools = spec.tools.len(), "MCP server's tools imported");
            Some(Registered {
                lease: entry.last_registered().lease.id,
                version: spec.version,
                tools: spec.tools,
            })
        }
        Err(error) => {
            tracing::warn!(service = %import.service, %error, "cannot register the MCP server's tools");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(service: &str, url: &str, refresh_interval: Duration) -> McpImportConfig {
        McpImportConfig {
            service: service.into(),
            url: url.into(),
            tenant: 3,
            refresh_interval,
            bearer_token_env: None,
        }
    }

    #[test]
    fn an_entry_names_a_service_an_http_url_and_a_refresh_the_lease_outlives() {
        let max_ttl = Duration::from_secs(3600);
        let good = entry(
            "github",
            "https://mcp.example.com/mcp",
            DEFAULT_REFRESH_INTERVAL,
        );
        let import = good.check(max_ttl).expect("valid");
        assert_eq!(
            (import.service.as_str(), import.tenant),
            ("github", TenantId(3))
        );
        let with_token = McpImportConfig {
            bearer_token_env: Some("PATH".into()),
            ..good.clone()
        };
        let token = with_token.check(max_ttl).expect("PATH is set").bearer_token;
        assert_eq!(format!("{token:?}"), "Some([redacted])");
        let unset = McpImportConfig {
            bearer_token_env: Some("TOOLPLANE_TEST_VARIABLE_NEVER_SET".into()),
            ..good
        };
        assert!(unset.check(max_ttl).expect_err("unset").contains("not set"));
        for (bad, named) in [
            (
                entry("GitHub", "http://h/mcp", DEFAULT_REFRESH_INTERVAL),
                "service",
            ),
            (
                entry("github", "ftp://h/mcp", DEFAULT_REFRESH_INTERVAL),
                "url",
            ),
            (
                entry("github", "not a url", DEFAULT_REFRESH_INTERVAL),
                "url",
            ),
            (
                entry("github", "http://h/mcp", Duration::from_millis(500)),
                "refresh_interval",
            ),
            (
                entry("github", "http://h/mcp", Duration::from_secs(1801)),
                "refresh_interval",
            ),
        ] {
            let error = bad.check(max_ttl).expect_err("refused");
            assert!(error.contains(named), "{error}");
        }
    }
}
