//! Which MCP session a use of an MCP server goes over. An import's server is spoken to over a
//! session of that import's own, opened with its credentials (a bearer token, or OAuth client
//! credentials) or by starting its command;
//! every service that names an MCP URL itself shares one session per URL, opened with no
//! token. So an import's credentials are used only for the import's own service: another
//! tenant's provider registering the same URL cannot make toolplane call with them, and two
//! imports of one server (tenants with different tokens) each keep theirs.

use std::collections::HashMap;

use super::import_config::{McpImport, McpSource, ServerAuth, StdioServer};
use crate::envelope::TenantId;
use crate::registry::ServiceName;

/// The session a use of an MCP server goes over: its endpoint, and the import (tenant and
/// service) whose session it is, or `None` for the one shared by registrations of the endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The endpoint (`mcp+` and the server's URL, or `mcp+stdio://TENANT/SERVICE`).
    pub endpoint: String,
    /// The import whose session it is.
    pub import: Option<(TenantId, ServiceName)>,
}

impl SessionKey {
    /// The session of `import`.
    pub fn of_import(import: &McpImport) -> Self {
        Self {
            endpoint: import.endpoint(),
            import: Some((import.tenant, import.service.clone())),
        }
    }

    /// The session shared by the services that register `endpoint` themselves.
    pub fn shared(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            import: None,
        }
    }
}

/// How a session is opened: with how toolplane authenticates (HTTP), or the command that
/// starts the server (stdio); neither for a shared session.
#[derive(Debug, Default)]
pub struct Opening {
    /// The bearer token sent, or the client credentials tokens are got with.
    pub auth: Option<ServerAuth>,
    /// Starts the server of an `mcp+stdio://` endpoint.
    pub command: Option<StdioServer>,
}

/// What the imports running say of their servers.
#[derive(Debug, Default)]
pub struct ImportEndpoints {
    /// The imports, by tenant and service, each with its endpoint (worked out once here, not
    /// on every call).
    imports: HashMap<TenantId, HashMap<ServiceName, Imported>>,
    /// For each imported endpoint, the import whose session health checks ping (a server may
    /// answer only with a token); the first in the configuration.
    pinged: HashMap<String, (TenantId, ServiceName)>,
}

/// An import running, and the endpoint its service is registered with.
#[derive(Debug)]
struct Imported {
    endpoint: String,
    import: McpImport,
}

impl ImportEndpoints {
    /// What `imports` say.
    pub fn of(imports: &[McpImport]) -> Self {
        let mut endpoints = Self::default();
        for import in imports {
            let endpoint = import.endpoint();
            endpoints
                .pinged
                .entry(endpoint.clone())
                .or_insert_with(|| (import.tenant, import.service.clone()));
            endpoints.imports.entry(import.tenant).or_default().insert(
                import.service.clone(),
                Imported {
                    endpoint,
                    import: import.clone(),
                },
            );
        }
        endpoints
    }

    /// The import of `tenant`'s `service`, when it runs at `endpoint`.
    fn imported(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        endpoint: &str,
    ) -> Option<&McpImport> {
        self.imports
            .get(&tenant)?
            .get(service)
            .filter(|imported| imported.endpoint == endpoint)
            .map(|imported| &imported.import)
    }

    /// The session a call of `tenant`'s `service` at `endpoint` goes over: its import's when
    /// it is the service an import registered at that endpoint, else the shared one.
    pub fn for_call(&self, tenant: TenantId, service: &ServiceName, endpoint: &str) -> SessionKey {
        SessionKey {
            endpoint: endpoint.to_owned(),
            import: self
                .imported(tenant, service, endpoint)
                .map(|_| (tenant, service.clone())),
        }
    }

    /// The session a health check of `endpoint` pings: an import's, when one imports from it.
    pub fn for_health_check(&self, endpoint: &str) -> SessionKey {
        SessionKey {
            endpoint: endpoint.to_owned(),
            import: self.pinged.get(endpoint).cloned(),
        }
    }

    /// How the session `key` is opened now: with its import's token or command while that
    /// import runs at the key's endpoint; else with neither.
    pub fn opening(&self, key: &SessionKey) -> Opening {
        let Some(import) = key
            .import
            .as_ref()
            .and_then(|(tenant, service)| self.imported(*tenant, service, &key.endpoint))
        else {
            return Opening::default();
        };
        Opening {
            auth: import.auth.clone(),
            command: match &import.source {
                McpSource::Stdio(server) => Some(server.clone()),
                McpSource::Http(_) => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::mcp::import_config::Secret;

    fn import(tenant: u64, service: &str, url: &str, token: Option<&str>) -> McpImport {
        McpImport {
            service: ServiceName::parse(service).expect("a service name"),
            source: McpSource::Http(url.to_owned()),
            tenant: TenantId(tenant),
            refresh_interval: Duration::from_secs(60),
            auth: token.map(|token| ServerAuth::Bearer(Secret(token.to_owned()))),
            approved_tools: None,
        }
    }

    fn name(service: &str) -> ServiceName {
        ServiceName::parse(service).expect("a service name")
    }

    /// Only the service an import registered goes over its session, with its token; another
    /// service at the same URL, in its tenant or another, shares the tokenless one.
    #[test]
    fn an_imports_token_is_used_only_for_its_own_service() {
        let url = "http://mcp:3001/mcp";
        let endpoint = format!("mcp+{url}");
        let endpoints = ImportEndpoints::of(&[
            import(1, "github", url, Some("one")),
            import(2, "github", url, Some("two")),
        ]);
        let ones = endpoints.for_call(TenantId(1), &name("github"), &endpoint);
        assert_eq!(ones.import, Some((TenantId(1), name("github"))));
        assert_eq!(
            endpoints.opening(&ones).auth,
            Some(ServerAuth::Bearer(Secret("one".into())))
        );
        let twos = endpoints.for_call(TenantId(2), &name("github"), &endpoint);
        assert_eq!(
            endpoints.opening(&twos).auth,
            Some(ServerAuth::Bearer(Secret("two".into())))
        );
        for (tenant, service) in [(3, "github"), (1, "copy"), (2, "copy")] {
            let key = endpoints.for_call(TenantId(tenant), &name(service), &endpoint);
            assert_eq!(key, SessionKey::shared(&endpoint));
            assert_eq!(endpoints.opening(&key).auth, None);
        }
        // A service named as an import but registered at another URL is not the import's.
        let elsewhere = endpoints.for_call(TenantId(1), &name("github"), "mcp+http://other/mcp");
        assert_eq!(elsewhere.import, None);
        // Health checks ping over the first import's session.
        let pinged = endpoints.for_health_check(&endpoint);
        assert_eq!(
            endpoints.opening(&pinged).auth,
            Some(ServerAuth::Bearer(Secret("one".into())))
        );
        let plain = endpoints.for_health_check("mcp+http://other/mcp");
        assert_eq!(plain, SessionKey::shared("mcp+http://other/mcp"));
    }

    /// A key of an import that has gone, or moved to another URL, opens with nothing.
    #[test]
    fn a_gone_or_moved_imports_key_opens_with_nothing() {
        let old = import(0, "github", "http://old/mcp", Some("t"));
        let key = SessionKey::of_import(&old);
        let moved = ImportEndpoints::of(&[import(0, "github", "http://new/mcp", Some("t"))]);
        assert_eq!(moved.opening(&key).auth, None);
        assert_eq!(ImportEndpoints::default().opening(&key).auth, None);
    }
}
