//! What of the configuration file is read again while the server runs: `[[tenant_access]]`,
//! `forwarded_client_cert_proxies` and `forwarded_client_cert_header` (see
//! [`crate::access::LiveTenantAccess`]), and `[[mcp_imports]]` (see
//! [`crate::mcp::live_imports`]). Every other setting is read at the start only; one changed in
//! the file is named in a WARN log line, as it takes effect at the next restart.

use std::path::Path;
use std::sync::Arc;

use super::ServerConfig;
use crate::access::{TenantAccess, TenantAccessSource};
use crate::mcp::import::{McpImport, McpImportsSource};

/// The settings put in force again when the file changes.
const RELOADED_SETTINGS: [&str; 4] = [
    "tenant_access",
    "forwarded_client_cert_proxies",
    "forwarded_client_cert_header",
    "mcp_imports",
];

impl ServerConfig {
    /// Where the tenant access rules are read again from: the file this configuration was read
    /// from, with the environment laid over it as at the start; `None` without a file.
    pub fn tenant_access_source(&self) -> Option<TenantAccessSource> {
        let (file, file_read) = self.file.clone()?;
        let started = self.clone();
        let path = file.clone();
        let read = move || -> Result<TenantAccess, String> {
            let now = ServerConfig::load(Some(&path), std::env::vars())
                .map_err(|error| error.to_string())?;
            warn_of_unreloaded_changes(&started, &now, &path);
            Ok(now.checked_tenant_access)
        };
        Some(TenantAccessSource {
            file,
            file_read,
            read: Arc::new(read),
        })
    }

    /// Where the MCP imports are read again from: the file this configuration was read from,
    /// with the environment laid over it as at the start; `None` without a file.
    pub fn mcp_imports_source(&self) -> Option<McpImportsSource> {
        let (file, file_read) = self.file.clone()?;
        let path = file.clone();
        let read = move || -> Result<Vec<McpImport>, String> {
            let now = ServerConfig::load(Some(&path), std::env::vars())
                .map_err(|error| error.to_string())?;
            Ok(now.checked_mcp_imports)
        };
        Some(McpImportsSource {
            file,
            file_read,
            read: Arc::new(read),
        })
    }

    /// The settings (by name) whose values differ between `self` and `other`, other than those
    /// read again while the server runs ([`RELOADED_SETTINGS`]).
    pub(super) fn settings_changed_since(&self, other: &ServerConfig) -> Vec<String> {
        // A loaded configuration serializes (`load` starts from the default's table); were one
        // not to, no setting would be named.
        let table = |config: &ServerConfig| toml::Table::try_from(config).unwrap_or_default();
        let (before, after) = (table(other), table(self));
        let mut names: Vec<String> = before
            .keys()
            .chain(after.keys())
            .filter(|name| !RELOADED_SETTINGS.contains(&name.as_str()))
            .filter(|name| before.get(*name) != after.get(*name))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Logs the settings that changed in `path` since the server started and are not put in force
/// until a restart.
fn warn_of_unreloaded_changes(started: &ServerConfig, now: &ServerConfig, path: &Path) {
    let changed = now.settings_changed_since(started);
    if !changed.is_empty() {
        tracing::warn!(
            file = %path.display(),
            settings = %changed.join(", "),
            "settings changed in the configuration file take effect at the next restart \
             (only tenant_access, the forwarded_client_cert settings and mcp_imports are read \
             again)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The source reads the file as it is now, with the environment laid over it; settings
    /// other than tenant access are compared with the configuration at the start.
    #[test]
    fn the_source_reads_the_rules_in_the_file_now() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("toolplane.toml");
        let first = "default_ttl = \"30s\"\nforwarded_client_cert_proxies = \"127.0.0.6\"\n\
                     [[tenant_access]]\nidentity = \"a.example\"\ntenants = [1]\n";
        std::fs::write(&file, first).expect("write");
        let started = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        let source = started.tenant_access_source().expect("read from a file");
        assert_eq!(source.file, file);

        let second = "default_ttl = \"45s\"\nforwarded_client_cert_proxies = \"10.1.0.0/16\"\n\
                      [[tenant_access]]\nidentity = \"a.example\"\ntenants = [1]\n\
                      [[tenant_access]]\nidentity = \"b.example\"\ntenants = [2]\n";
        std::fs::write(&file, second).expect("rewrite");
        let rules = (source.read)().expect("valid rules");
        assert_eq!(rules.identities(), 2);
        assert_eq!(rules.forwarded_client_cert_proxies().len(), 1);
        let now = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        assert_eq!(
            now.settings_changed_since(&started),
            ["default_ttl"],
            "tenant access is read again; only default_ttl waits for a restart"
        );

        let broken = "forwarded_client_cert_proxies = \"127.0.0.6\"\n\
                      [[tenant_access]]\nidentity = \"a.example\"\n";
        std::fs::write(&file, broken).expect("break");
        let error = (source.read)().expect_err("grants nothing");
        assert!(error.contains("tenant_access entry 1"), "{error}");

        assert!(
            ServerConfig::load(None, std::iter::empty())
                .expect("defaults")
                .tenant_access_source()
                .is_none(),
            "nothing to read again without a file"
        );
    }

    /// The imports are read again, approvals and servers alike, and none is named as waiting
    /// for a restart; a bad entry is refused.
    #[test]
    fn imports_are_read_again() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("toolplane.toml");
        let entry = |url: &str, approved: &str| {
            format!(
                "[[mcp_imports]]\nservice = \"github\"\nurl = \"{url}\"\n\
                 approved_tools = {{ {approved} }}\n"
            )
        };
        let sha = "ab".repeat(32);
        std::fs::write(&file, entry("http://a/mcp", "")).expect("write");
        let started = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        let source = started.mcp_imports_source().expect("imports from a file");
        std::fs::write(
            &file,
            entry("http://a/mcp", &format!("list_issues = \"{sha}\"")),
        )
        .expect("rewrite");
        let imports = (source.read)().expect("valid");
        assert_eq!(
            imports[0].approved_tools.as_ref().map(|tools| tools.len()),
            Some(1)
        );
        let now = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        assert!(now.settings_changed_since(&started).is_empty());
        std::fs::write(&file, entry("http://b/mcp", "")).expect("rewrite");
        let imports = (source.read)().expect("valid");
        assert_eq!(imports[0].endpoint(), "mcp+http://b/mcp");
        let now = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        assert!(now.settings_changed_since(&started).is_empty());
        std::fs::write(&file, entry("http://a/mcp", "list_issues = \"short\"")).expect("break");
        assert!(
            (source.read)()
                .expect_err("refused")
                .contains("approved_tools")
        );
        // A file without imports at the start is watched for imports added to it.
        std::fs::write(&file, "default_ttl = \"30s\"\n").expect("rewrite");
        let bare = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        assert!(bare.mcp_imports_source().is_some());
    }
}
