//! The checks a loaded configuration must pass before it is used.

use std::time::Duration;

use super::ServerConfig;
use crate::access::{ForwardedIdentityHeader, TenantAccess};
use crate::mcp::import::McpImport;

/// The longest a duration setting may be. Each is added to the clock, which counts about 292
/// billion years (past that, adding panics), and none means anything longer.
const MAX_DURATION_SETTING: Duration = Duration::from_secs(100 * 31_557_600); // 365.25-day years

/// The parts of a configuration that are checked into forms of their own.
pub(super) struct Checked {
    /// The MCP imports, their token and `pass_env` variables read.
    pub(super) imports: Vec<McpImport>,
    /// The tenant access rules.
    pub(super) tenant_access: TenantAccess,
}

impl ServerConfig {
    /// Checks settings that go together, ranges, and TLS files named where they would not
    /// be used; the error says which setting to change. Answers the MCP imports and the tenant
    /// access rules, checked, their token files read by `read_file`.
    pub(super) fn check(
        &self,
        read_file: &dyn Fn(&std::path::Path) -> std::io::Result<String>,
    ) -> Result<Checked, String> {
        let mut endpoints = vec![("listen", self.listen)];
        endpoints.extend(self.metrics_address()?.map(|a| ("metrics_listen", a)));
        endpoints.extend(self.mcp_address()?.map(|a| ("mcp_listen", a)));
        if let Some(collision) = super::colliding_endpoints(&endpoints) {
            return Err(collision);
        }
        let mut imports = Vec::with_capacity(self.mcp_imports.len());
        for entry in &self.mcp_imports {
            let reread = self.tls_reload_interval;
            let import = entry.check(self.max_ttl, reread, read_file)?;
            let twice = imports.iter().any(|other: &McpImport| {
                (other.tenant, &other.service) == (import.tenant, &import.service)
            });
            if twice {
                return Err(format!(
                    "mcp_imports: service {} of tenant {} is imported twice",
                    import.service, import.tenant
                ));
            }
            imports.push(import);
        }
        if self
            .mcp_allowed_hosts
            .split(',')
            .all(|host| host.trim().is_empty())
        {
            return Err(
                "mcp_allowed_hosts is empty: list the hosts MCP clients reach toolplane by \
                 (comma-separated, as in their Host header), or * to accept any"
                    .to_owned(),
            );
        }
        if !self.otlp_endpoint.is_empty() {
            crate::otlp::check_endpoint(&self.otlp_endpoint).map_err(|error| error.to_string())?;
        }
        if let Some(setting) = self.otlp_tls_setting()
            && !self.otlp_endpoint.starts_with("https://")
        {
            return Err(format!(
                "{setting} is set but otlp_endpoint {:?} is not an https:// address: TLS files \
                 are only used with a TLS collector",
                self.otlp_endpoint
            ));
        }
        if self.otlp_client_cert_file.is_empty() != self.otlp_client_key_file.is_empty() {
            return Err(
                "otlp_client_cert_file and otlp_client_key_file go together: set both \
                 (toolplane presents that certificate to the collector) or neither"
                    .to_owned(),
            );
        }
        if self.tls_cert_file.is_empty() != self.tls_key_file.is_empty() {
            return Err(
                "tls_cert_file and tls_key_file go together: set both to serve TLS, or neither \
                 to serve plain text"
                    .to_owned(),
            );
        }
        if !self.tls_client_ca_file.is_empty() && self.tls_cert_file.is_empty() {
            return Err(
                "tls_client_ca_file is set but TLS is not served: client certificates are asked \
                 for only over TLS (set tls_cert_file and tls_key_file)"
                    .to_owned(),
            );
        }
        if self.provider_client_cert_file.is_empty() != self.provider_client_key_file.is_empty() {
            return Err(
                "provider_client_cert_file and provider_client_key_file go together: set both \
                 (toolplane presents that certificate to providers that ask for one) or neither"
                    .to_owned(),
            );
        }
        let most_calls = crate::agent::runner::MAX_TOOL_CALLS_PER_TURN;
        if !(1..=most_calls).contains(&self.max_concurrent_tool_calls) {
            return Err(format!(
                "max_concurrent_tool_calls must be 1 to {most_calls} (the most tool calls a turn \
                 makes), got {}",
                self.max_concurrent_tool_calls
            ));
        }
        let most_retries = crate::agent::model_retries::MAX_MODEL_RETRIES;
        if self.model_max_retries > most_retries {
            return Err(format!(
                "model_max_retries must be 0 to {most_retries}, got {}",
                self.model_max_retries
            ));
        }
        if let Some((key, _)) = self.tool_rate_limits.iter().find(|(key, _)| {
            key.split_once('/')
                .is_none_or(|(s, t)| s.is_empty() || t.is_empty())
        }) {
            return Err(format!("tool_rate_limits key {key:?} must be SERVICE/TOOL"));
        }
        if self.min_ttl > self.max_ttl
            || self.default_ttl < self.min_ttl
            || self.default_ttl > self.max_ttl
        {
            return Err(format!(
                "need min_ttl <= default_ttl <= max_ttl, got {} <= {} <= {}",
                humantime::format_duration(self.min_ttl),
                humantime::format_duration(self.default_ttl),
                humantime::format_duration(self.max_ttl)
            ));
        }
        self.check_durations()?;
        if !self.keepalive_interval.is_zero() && self.keepalive_timeout.is_zero() {
            return Err(
                "keepalive_timeout must be above 0s while keepalive_interval is set (0s turns \
                 keepalive off)"
                    .to_owned(),
            );
        }
        let proxies = crate::access::parse_proxies(&self.forwarded_client_cert_proxies)?;
        let env = |variable: &str| std::env::var(variable).ok();
        let tenant_access = TenantAccess::from_rules_read_by(&self.tenant_access, env, read_file)?
            .with_forwarded_client_cert_proxies(proxies)
            .with_forwarded_identity_header(self.forwarded_client_cert_header);
        let forwarded = !tenant_access.forwarded_client_cert_proxies().is_empty();
        if !forwarded && self.forwarded_client_cert_header != ForwardedIdentityHeader::default() {
            return Err(format!(
                "forwarded_client_cert_header is {} but forwarded_client_cert_proxies is empty: \
                 list the proxies that set it (the header is believed from no one else)",
                self.forwarded_client_cert_header.name()
            ));
        }
        if tenant_access.identities() > 0 && self.tls_client_ca_file.is_empty() && !forwarded {
            return Err(
                "tenant_access grants tenants by client certificate identity, but none is asked \
                 for: set tls_client_ca_file (with tls_cert_file and tls_key_file), or \
                 forwarded_client_cert_proxies when a proxy terminates TLS in front of toolplane"
                    .to_owned(),
            );
        }
        if forwarded && tenant_access.identities() == 0 {
            return Err(
                "forwarded_client_cert_proxies is set, but no tenant_access entry names an \
                 identity: the forwarded certificates would grant nothing"
                    .to_owned(),
            );
        }
        Ok(Checked {
            imports,
            tenant_access,
        })
    }

    /// The first OTLP TLS file setting that is set, if any.
    fn otlp_tls_setting(&self) -> Option<&'static str> {
        [
            ("otlp_ca_file", &self.otlp_ca_file),
            ("otlp_client_cert_file", &self.otlp_client_cert_file),
            ("otlp_client_key_file", &self.otlp_client_key_file),
        ]
        .into_iter()
        .find(|(_, value)| !value.is_empty())
        .map(|(setting, _)| setting)
    }

    /// Checks the duration settings: each at most [`MAX_DURATION_SETTING`], and the health
    /// checks' interval above zero (a ticker takes no zero period: the checks' task panicked,
    /// and providers' health went unchecked).
    fn check_durations(&self) -> Result<(), String> {
        if self.provider_health_interval.is_zero() {
            return Err(
                "provider_health_interval must be above 0s (each provider's health is checked \
                 every interval)"
                    .to_owned(),
            );
        }
        let durations = [
            ("tls_reload_interval", self.tls_reload_interval),
            ("default_ttl", self.default_ttl),
            ("min_ttl", self.min_ttl),
            ("max_ttl", self.max_ttl),
            ("drain_grace", self.drain_grace),
            ("max_invoke_timeout", self.max_invoke_timeout),
            ("provider_health_interval", self.provider_health_interval),
            ("keepalive_interval", self.keepalive_interval),
            ("keepalive_timeout", self.keepalive_timeout),
            ("model_timeout", self.model_timeout),
        ];
        match durations
            .iter()
            .find(|(_, value)| *value > MAX_DURATION_SETTING)
        {
            Some((name, value)) => Err(format!(
                "{name} must be at most 100 years, got {}",
                humantime::format_duration(*value)
            )),
            None => Ok(()),
        }
    }
}
