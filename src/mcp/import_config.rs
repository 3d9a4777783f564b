//! The `[[mcp_imports]]` entries of the configuration file, and the imports they ask for: a
//! service name, the MCP server (a Streamable HTTP URL, or a command toolplane starts and
//! speaks to over stdio, with the environment it is started with), a tenant, a refresh
//! interval, how toolplane authenticates to it ([`super::import_auth`]: a bearer token, or
//! OAuth client credentials: [`super::client_credentials`]), and optionally the tools approved
//! ([`super::approval`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::approval::ApprovedTools;
use super::client_credentials::ClientCredentialsConfig;
pub use super::import_auth::ServerAuth;
use crate::envelope::TenantId;
use crate::invoke::caller::{MCP_ENDPOINT_PREFIX, MCP_STDIO_ENDPOINT_PREFIX};
use crate::registry::ServiceName;

/// How often an imported server's tools are listed again, by default.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// The variables of toolplane's environment a server it starts inherits, beside the ones its
/// entry sets or passes on: the ones the MCP SDKs' stdio clients hand on (Python's
/// `DEFAULT_INHERITED_ENV_VARS`, TypeScript's `getDefaultEnvironment`), so a server is not
/// given toolplane's other secrets.
pub const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/// One `[[mcp_imports]]` entry of the configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpImportConfig {
    /// The service the server's tools are registered under (a DNS label).
    pub service: String,
    /// The MCP server's Streamable HTTP URL (`http://` or `https://`); or set `command`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// The command (program and arguments) that starts the MCP server, speaking MCP over its
    /// standard input and output; or set `url`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The tenant the service is registered in.
    #[serde(default)]
    pub tenant: u64,
    /// How often the server's tools are listed again.
    #[serde(default = "default_refresh_interval", with = "crate::config_duration")]
    pub refresh_interval: Duration,
    /// The environment variable holding a bearer token sent to the server
    /// (`Authorization: Bearer ...`), when it asks for one (`url` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
    /// A file holding the bearer token sent to the server (`url` only), read again as it is
    /// rotated: see [`ServerAuth::BearerFile`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_file: Option<PathBuf>,
    /// OAuth client credentials toolplane gets the server's access tokens with (`url` only);
    /// or set `bearer_token_env` or `bearer_token_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth_client_credentials: Option<ClientCredentialsConfig>,
    /// Variables set for a server toolplane starts (`command` only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Variables of toolplane's environment handed on to a server it starts (`command` only),
    /// beside [`INHERITED_ENV`]; each must be set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_env: Vec<String>,
    /// When set, only these tools are registered, each only while its definition hashes to
    /// the `definition_sha256` given (see [`super::approval`]); an empty table holds every
    /// tool back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_tools: Option<BTreeMap<String, String>>,
}

/// Reads the imports the configuration file gives now (with the environment laid over it, as
/// at the start), checked.
pub type ReadMcpImports = crate::config::ReadConfigPart<Vec<McpImport>>;

/// Where the imports are read again from while the server runs: the configuration file,
/// watched every `tls_reload_interval`.
pub type McpImportsSource = crate::config::ConfigSource<Vec<McpImport>>;

/// A secret: shown as `[redacted]` wherever it is printed for debugging.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// How the files an entry names (a `bearer_token_file`, a `private_key_file`) are read as it
/// is checked: from disk as the server reads them ([`read_from_disk`]), or as a check of the
/// configuration alone has it.
pub type ReadFile<'a> = dyn Fn(&Path) -> std::io::Result<String> + 'a;

/// Reads the file at `path` from disk.
pub fn read_from_disk(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

fn default_refresh_interval() -> Duration {
    DEFAULT_REFRESH_INTERVAL
}

/// An import, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpImport {
    /// The service the tools are registered under.
    pub service: ServiceName,
    /// Where the MCP server is.
    pub source: McpSource,
    /// The tenant.
    pub tenant: TenantId,
    /// How often the tools are listed again.
    pub refresh_interval: Duration,
    /// How toolplane authenticates to the server, if it does.
    pub auth: Option<ServerAuth>,
    /// The tools it may register, when the entry asks for approval; `None` registers every
    /// tool toolplane can take.
    pub approved_tools: Option<ApprovedTools>,
}

/// Where an imported MCP server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpSource {
    /// Served over Streamable HTTP at this URL.
    Http(String),
    /// Started by toolplane, speaking over stdio.
    Stdio(StdioServer),
}

/// A server toolplane starts: its command and the variables it is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServer {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The variables set for it beside the [`INHERITED_ENV`] ones: the entry's `env`, and the
    /// values of its `pass_env` variables.
    pub env: Vec<(String, Secret)>,
}

impl StdioServer {
    /// A server started by `command` with no variables beside the inherited ones.
    pub fn command(command: Vec<String>) -> Self {
        Self {
            command,
            env: Vec::new(),
        }
    }
}

impl std::fmt::Display for McpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Http(url) => f.write_str(url),
            Self::Stdio(server) => write!(f, "stdio: {}", server.command.join(" ")),
        }
    }
}

impl McpImport {
    /// Whether `other` imports from the same server in the same way: everything but the
    /// `approved_tools` alike.
    pub fn same_server_as(&self, other: &McpImport) -> bool {
        let without_approvals = |import: &McpImport| McpImport {
            approved_tools: None,
            ..import.clone()
        };
        without_approvals(self) == without_approvals(other)
    }

    /// The endpoint its service is registered with: the server's URL after `mcp+`, or
    /// `mcp+stdio://TENANT/SERVICE` for a server toolplane starts.
    pub fn endpoint(&self) -> String {
        match &self.source {
            McpSource::Http(url) => format!("{MCP_ENDPOINT_PREFIX}{url}"),
            McpSource::Stdio(_) => format!(
                "{MCP_STDIO_ENDPOINT_PREFIX}{}/{}",
                self.tenant, self.service
            ),
        }
    }

    /// The lease its service is registered with: three refresh intervals, at most `max_ttl`.
    pub fn lease(&self, max_ttl: Duration) -> Duration {
        (self.refresh_interval * 3).min(max_ttl)
    }
}

impl McpImportConfig {
    /// The import this entry asks for, its lease at most `max_ttl` and its token file read
    /// again every `token_file_reread` (`tls_reload_interval`), the files it names read by
    /// `read_file` now; the error names what to fix.
    pub fn check(
        &self,
        max_ttl: Duration,
        token_file_reread: Duration,
        read_file: &ReadFile<'_>,
    ) -> Result<McpImport, String> {
        let service = ServiceName::parse(&self.service)
            .map_err(|problem| format!("mcp_imports: service {:?}: {problem}", self.service))?;
        let source = match (self.url.is_empty(), self.command.is_empty()) {
            (false, true) if self.env.is_empty() && self.pass_env.is_empty() => {
                McpSource::Http(self.checked_url(&service)?)
            }
            (false, true) => {
                return Err(format!(
                    "mcp_imports: env and pass_env of service {service} are for a server \
                     toolplane starts (command), not one at a url"
                ));
            }
            (true, false) => McpSource::Stdio(StdioServer {
                command: self.command.clone(),
                env: self.environment(&service)?,
            }),
            _ => {
                return Err(format!(
                    "mcp_imports: service {service} needs either url (a server serving \
                     Streamable HTTP) or command (a server toolplane starts, over stdio), \
                     not both"
                ));
            }
        };
        if self.refresh_interval < Duration::from_secs(1) || self.refresh_interval > max_ttl / 2 {
            return Err(format!(
                "mcp_imports: refresh_interval of service {service} must lie between 1s and \
                 half of max_ttl ({:?}), so the lease is renewed before it runs out",
                max_ttl / 2
            ));
        }
        let started = matches!(source, McpSource::Stdio(_));
        let reread = token_file_reread;
        let auth = super::import_auth::checked_auth(self, &service, started, reread, read_file)?;
        let approved_tools = self
            .approved_tools
            .as_ref()
            .map(|table| ApprovedTools::check(&service, table))
            .transpose()?;
        Ok(McpImport {
            service,
            source,
            tenant: TenantId(self.tenant),
            refresh_interval: self.refresh_interval,
            auth,
            approved_tools,
        })
    }

    /// The variables a server started for `service` is given beside the inherited ones.
    fn environment(&self, service: &ServiceName) -> Result<Vec<(String, Secret)>, String> {
        let bad_name = |name: &str| name.is_empty() || name.contains(['=', '\0']);
        let mut env = Vec::new();
        for (name, value) in &self.env {
            if bad_name(name) || value.contains('\0') {
                return Err(format!(
                    "mcp_imports: env of service {service} sets {name:?}: a variable's name is \
                     not empty and holds no '=' or NUL, its value no NUL"
                ));
            }
            env.push((name.clone(), Secret(value.clone())));
        }
        for name in &self.pass_env {
            if bad_name(name) {
                return Err(format!(
                    "mcp_imports: pass_env of service {service} names {name:?}, which is no \
                     variable name"
                ));
            }
            let value = std::env::var(name).map_err(|_| {
                format!(
                    "mcp_imports: pass_env of service {service} names {name}, which is not \
                     set (or not UTF-8) in toolplane's environment"
                )
            })?;
            env.push((name.clone(), Secret(value)));
        }
        Ok(env)
    }

    fn checked_url(&self, service: &ServiceName) -> Result<String, String> {
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
        Ok(self.url.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(service: &str, url: &str, refresh_interval: Duration) -> McpImportConfig {
        McpImportConfig {
            service: service.into(),
            url: url.into(),
            command: Vec::new(),
            tenant: 3,
            refresh_interval,
            bearer_token_env: None,
            bearer_token_file: None,
            oauth_client_credentials: None,
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            approved_tools: None,
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
        let import = good
            .check(max_ttl, Duration::ZERO, &read_from_disk)
            .expect("valid");
        assert_eq!(
            (import.service.as_str(), import.tenant),
            ("github", TenantId(3))
        );
        let with_token = McpImportConfig {
            bearer_token_env: Some("PATH".into()),
            ..good.clone()
        };
        let token = with_token
            .check(max_ttl, Duration::ZERO, &read_from_disk)
            .expect("PATH is set")
            .auth;
        assert_eq!(format!("{token:?}"), "Some(Bearer([redacted]))");
        let unset = McpImportConfig {
            bearer_token_env: Some("TOOLPLANE_TEST_VARIABLE_NEVER_SET".into()),
            ..good.clone()
        };
        assert!(
            unset
                .check(max_ttl, Duration::ZERO, &read_from_disk)
                .expect_err("unset")
                .contains("not set")
        );
        let client_credentials = ClientCredentialsConfig {
            client_id: "toolplane".into(),
            client_secret_env: Some("PATH".into()),
            private_key_file: None,
            signing_algorithm: None,
            scopes: Vec::new(),
            authorization_server: None,
        };
        let with_credentials = McpImportConfig {
            oauth_client_credentials: Some(client_credentials.clone()),
            ..good.clone()
        };
        assert!(matches!(
            with_credentials
                .check(max_ttl, Duration::ZERO, &read_from_disk)
                .expect("valid")
                .auth,
            Some(ServerAuth::ClientCredentials(_))
        ));
        let started = McpImportConfig {
            url: String::new(),
            command: vec!["npx".into(), "server-memory".into()],
            ..entry("memory", "", DEFAULT_REFRESH_INTERVAL)
        };
        let import = started
            .check(max_ttl, Duration::ZERO, &read_from_disk)
            .expect("a command");
        assert_eq!(import.endpoint(), "mcp+stdio://3/memory");
        let with_env = McpImportConfig {
            env: BTreeMap::from([("LOG_LEVEL".to_owned(), "debug".to_owned())]),
            pass_env: vec!["PATH".into()],
            ..started.clone()
        };
        let McpSource::Stdio(server) = with_env
            .check(max_ttl, Duration::ZERO, &read_from_disk)
            .expect("valid")
            .source
        else {
            panic!("a started server");
        };
        let names: Vec<&str> = server.env.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["LOG_LEVEL", "PATH"]);
        assert_eq!(
            format!("{:?}", server.env[0]),
            "(\"LOG_LEVEL\", [redacted])"
        );
        for (bad, named) in [
            (
                McpImportConfig {
                    pass_env: vec!["TOOLPLANE_TEST_VARIABLE_NEVER_SET".into()],
                    ..started.clone()
                },
                "not set",
            ),
            (
                McpImportConfig {
                    env: BTreeMap::from([("A=B".to_owned(), "c".to_owned())]),
                    ..started.clone()
                },
                "env of service memory",
            ),
            (
                McpImportConfig {
                    pass_env: vec!["PATH".into()],
                    ..entry("memory", "http://h/mcp", DEFAULT_REFRESH_INTERVAL)
                },
                "not one at a url",
            ),
            (
                McpImportConfig {
                    oauth_client_credentials: Some(client_credentials.clone()),
                    ..started.clone()
                },
                "not one toolplane starts",
            ),
            (
                McpImportConfig {
                    bearer_token_env: Some("PATH".into()),
                    oauth_client_credentials: Some(client_credentials.clone()),
                    ..entry("memory", "http://h/mcp", DEFAULT_REFRESH_INTERVAL)
                },
                "sets both",
            ),
        ] {
            let error = bad
                .check(max_ttl, Duration::ZERO, &read_from_disk)
                .expect_err("refused");
            assert!(error.contains(named), "{error}");
        }
        let both = McpImportConfig {
            command: vec!["npx".into()],
            ..entry("memory", "http://h/mcp", DEFAULT_REFRESH_INTERVAL)
        };
        assert!(
            both.check(max_ttl, Duration::ZERO, &read_from_disk)
                .expect_err("both")
                .contains("either url")
        );
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
            let error = bad
                .check(max_ttl, Duration::ZERO, &read_from_disk)
                .expect_err("refused");
            assert!(error.contains(named), "{error}");
        }
    }
}
