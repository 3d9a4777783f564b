//! What of the configuration file is read again while the server runs: `[[tenant_access]]`,
//! `forwarded_client_cert_proxies` and `forwarded_client_cert_header` (see
//! [`crate::access::LiveTenantAccess`]), `[[mcp_imports]]` (see [`crate::mcp::live_imports`]),
//! and the call limits: `rate_limit_per_second`, `rate_limit_burst`, `[tool_rate_limits]` and
//! `max_in_flight_per_service` (see [`crate::invoke::limits::RateLimits::reconfigure`]). Every
//! other setting is read at the start only; one changed in the file is named in a WARN log
//! line, as it takes effect at the next restart.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::ServerConfig;
use crate::access::TenantAccessSource;
use crate::grpc::tls_reload::settled_text;
use crate::invoke::limits::RateLimitConfig;
use crate::mcp::import::McpImportsSource;

/// The settings put in force again when the file changes.
const RELOADED_SETTINGS: [&str; 8] = [
    "tenant_access",
    "forwarded_client_cert_proxies",
    "forwarded_client_cert_header",
    "mcp_imports",
    "rate_limit_per_second",
    "rate_limit_burst",
    "tool_rate_limits",
    "max_in_flight_per_service",
];

/// Reads a part of the configuration file again (with the environment laid over it, as at
/// the start); the error says why the file cannot be used.
pub type ReadConfigPart<T> = Arc<dyn Fn() -> Result<T, String> + Send + Sync>;

/// Where a part of the configuration is read again from while the server runs: the
/// configuration file, watched for changes every `tls_reload_interval`, and how to read the
/// part from it.
#[derive(Clone)]
pub struct ConfigSource<T> {
    /// The configuration file.
    pub file: PathBuf,
    /// The sha256 of the file's content when the configuration in force was read from it (a
    /// change made before the watch starts is a change).
    pub file_read: [u8; 32],
    /// Reads the part from it.
    pub read: ReadConfigPart<T>,
}

impl<T> std::fmt::Debug for ConfigSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSource")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// The parts of the configuration read again from its file while the server runs. They share
/// each reading of the file: a change is read (once it settles) and checked once, and each
/// part takes its own settings from that reading. Each is `None` for a configuration read from
/// no file.
#[derive(Debug, Clone)]
pub struct ReloadedParts {
    /// Where the tenant access rules are read again from. Each reading also logs the settings
    /// changed in the file that wait for a restart.
    pub tenant_access: Option<TenantAccessSource>,
    /// Where the MCP imports are read again from.
    pub mcp_imports: Option<McpImportsSource>,
    /// Where the call limits are read again from.
    pub rate_limits: Option<ConfigSource<RateLimitConfig>>,
}

/// The last reading of the configuration file, shared by the parts read again from it: a
/// change is read (once it settles), checked and its token files read once, and each part
/// takes its own piece of that reading. Each part's watch sees the change at its own tick; the
/// parts after the first find the file as it was read and take that reading.
#[derive(Debug, Default)]
struct Reading {
    /// The file's text when last read, and what reading it gave.
    last: Mutex<Option<(String, Result<ServerConfig, String>)>>,
}

impl Reading {
    /// The configuration in `path` (with the environment laid over it) now. When the file
    /// holds the text of the last reading, that reading's outcome: a file that reads whole,
    /// as it read once settled, is not being written. Else the file is read through `settled`
    /// (its token files too), and the reading is kept.
    fn configuration(
        &self,
        path: &Path,
        settled: impl Fn(&Path) -> std::io::Result<String>,
    ) -> Result<ServerConfig, String> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let (Some((text, outcome)), Ok(now)) = (&*last, std::fs::read_to_string(path))
            && *text == now
        {
            return outcome.clone();
        }
        let text = RefCell::new(None);
        let outcome = super::process_environment()
            .and_then(|env| {
                ServerConfig::load_read_by(Some(path), env.into_iter(), |file| {
                    let read = settled(file)?;
                    if file == path {
                        *text.borrow_mut() = Some(read.clone());
                    }
                    Ok(read)
                })
            })
            .map_err(|error| error.to_string());
        *last = text.into_inner().map(|text| (text, outcome.clone()));
        outcome
    }
}

impl ServerConfig {
    /// The parts read again from the file this configuration was read from, with the
    /// environment laid over it as at the start.
    pub fn reloaded_parts(&self) -> ReloadedParts {
        let reading = Arc::new(Reading::default());
        let started = self.clone();
        ReloadedParts {
            tenant_access: self.source_of(&reading, move |now| {
                if let Some((path, _)) = &now.file {
                    warn_of_unreloaded_changes(&started, &now, path);
                }
                now.checked_tenant_access
            }),
            mcp_imports: self.source_of(&reading, |now| now.checked_mcp_imports),
            rate_limits: self.source_of(&reading, |now| now.rate_limit_config()),
        }
    }

    /// Where `part` of the configuration is read again from, through `reading`; `None`
    /// without a file.
    fn source_of<T>(
        &self,
        reading: &Arc<Reading>,
        part: impl Fn(ServerConfig) -> T + Send + Sync + 'static,
    ) -> Option<ConfigSource<T>> {
        let (file, file_read) = self.file.clone()?;
        let (path, reading) = (file.clone(), Arc::clone(reading));
        let read =
            move || -> Result<T, String> { reading.configuration(&path, settled_text).map(&part) };
        Some(ConfigSource {
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
             (only tenant_access, the forwarded_client_cert settings, mcp_imports and the rate \
             limits are read again)"
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
        let source = started
            .reloaded_parts()
            .tenant_access
            .expect("read from a file");
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
                .reloaded_parts()
                .tenant_access
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
        let source = started
            .reloaded_parts()
            .mcp_imports
            .expect("imports from a file");
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
        assert!(bare.reloaded_parts().mcp_imports.is_some());
    }

    /// The call limits are read again, and none is named as waiting for a restart.
    #[test]
    fn rate_limits_are_read_again() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("toolplane.toml");
        std::fs::write(&file, "rate_limit_per_second = 5\n").expect("write");
        let started = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        let source = started
            .reloaded_parts()
            .rate_limits
            .expect("read from a file");
        std::fs::write(
            &file,
            "rate_limit_per_second = 7\nmax_in_flight_per_service = 3\n\
             [tool_rate_limits.\"svc/t\"]\nper_second = 1\nburst = 2\n",
        )
        .expect("rewrite");
        let limits = (source.read)().expect("valid");
        assert_eq!(limits.per_service.map(|bucket| bucket.per_second), Some(7));
        assert_eq!(limits.max_in_flight_per_service, 3);
        assert_eq!(limits.per_tool.len(), 1);
        let now = ServerConfig::load(Some(&file), std::iter::empty()).expect("valid");
        assert!(now.settings_changed_since(&started).is_empty());
    }

    /// A change is read once for every part: the parts after the first take its reading while
    /// the file holds what was read, and a file changed again (or broken) is read again.
    #[test]
    fn the_parts_share_one_reading_of_each_change() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("toolplane.toml");
        std::fs::write(&file, "rate_limit_per_second = 5\n").expect("write");
        let settled_reads = Mutex::new(0);
        let settled = |path: &Path| {
            *settled_reads.lock().expect("lock") += 1;
            std::fs::read_to_string(path)
        };
        let reading = Reading::default();
        let first = reading.configuration(&file, settled).expect("valid");
        let again = reading.configuration(&file, settled).expect("valid");
        assert_eq!(
            (first == again, *settled_reads.lock().expect("lock")),
            (true, 1)
        );

        std::fs::write(&file, "rate_limit_per_second = 7\n").expect("rewrite");
        let changed = reading.configuration(&file, settled).expect("valid");
        assert_eq!(changed.rate_limit_per_second, 7);
        reading.configuration(&file, settled).expect("valid");
        assert_eq!(*settled_reads.lock().expect("lock"), 2);

        std::fs::write(&file, "rate_limit_per_second = \"many\"\n").expect("break");
        let refused = reading.configuration(&file, settled).expect_err("invalid");
        let again = reading.configuration(&file, settled).expect_err("invalid");
        assert_eq!((refused, *settled_reads.lock().expect("lock")), (again, 3));
    }
}
