//! How the server's file watches ([`super::tls_reload`]) have fared since it started, for the
//! metrics: each kind of file's changes put in use and refused, and whether its last change
//! was refused (the previous files still in use: a renewed certificate that does not build,
//! a configuration file that does not parse), so an operator can alert on it rather than find
//! a WARN line.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The files a watch reads, as the metrics label them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadedFiles {
    /// The served TLS certificate, key and client CA.
    ServedTls,
    /// TLS towards providers.
    ProviderTls,
    /// TLS towards the OTLP collector.
    CollectorTls,
    /// `[[tenant_access]]` token files.
    TenantAccessTokenFiles,
    /// The configuration file, for `[[tenant_access]]`.
    TenantAccessConfig,
    /// The configuration file, for `[[mcp_imports]]`.
    McpImportsConfig,
    /// The configuration file, for the call limits.
    RateLimitsConfig,
}

impl ReloadedFiles {
    /// Every kind, in label order.
    pub const ALL: [ReloadedFiles; 7] = [
        ReloadedFiles::ServedTls,
        ReloadedFiles::ProviderTls,
        ReloadedFiles::CollectorTls,
        ReloadedFiles::TenantAccessTokenFiles,
        ReloadedFiles::TenantAccessConfig,
        ReloadedFiles::McpImportsConfig,
        ReloadedFiles::RateLimitsConfig,
    ];

    /// The metrics label value.
    pub fn label(self) -> &'static str {
        match self {
            ReloadedFiles::ServedTls => "served_tls",
            ReloadedFiles::ProviderTls => "provider_tls",
            ReloadedFiles::CollectorTls => "collector_tls",
            ReloadedFiles::TenantAccessTokenFiles => "tenant_access_token_files",
            ReloadedFiles::TenantAccessConfig => "tenant_access_config",
            ReloadedFiles::McpImportsConfig => "mcp_imports_config",
            ReloadedFiles::RateLimitsConfig => "rate_limits_config",
        }
    }

    /// How the log names them (its `what` field).
    pub fn what(self) -> &'static str {
        match self {
            ReloadedFiles::ServedTls => "served TLS",
            ReloadedFiles::ProviderTls => "TLS to providers",
            ReloadedFiles::CollectorTls => "TLS to the OTLP collector",
            ReloadedFiles::TenantAccessTokenFiles => "tenant_access token files",
            ReloadedFiles::TenantAccessConfig => "tenant_access in the configuration file",
            ReloadedFiles::McpImportsConfig => "mcp_imports in the configuration file",
            ReloadedFiles::RateLimitsConfig => "rate limits in the configuration file",
        }
    }
}

/// One kind's counts.
#[derive(Debug, Default)]
struct Counts {
    reloaded: AtomicU64,
    refused: AtomicU64,
    failing: AtomicBool,
}

/// The counts of every kind; shared by the watches and the metrics endpoint.
#[derive(Debug, Default)]
pub struct ReloadStats {
    counts: [Counts; ReloadedFiles::ALL.len()],
}

/// What [`ReloadStats::of`] answers for one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReloadCounts {
    /// Changes put in use.
    pub reloaded: u64,
    /// Changes refused (the previous files kept).
    pub refused: u64,
    /// Whether the last change was refused.
    pub failing: bool,
}

impl ReloadStats {
    fn counts(&self, files: ReloadedFiles) -> &Counts {
        // One slot per kind, in declaration order.
        &self.counts[files as usize]
    }

    /// Counts a change of `files` that was put in use (`true`) or refused.
    pub fn record(&self, files: ReloadedFiles, used: bool) {
        let counts = self.counts(files);
        let counter = if used {
            &counts.reloaded
        } else {
            &counts.refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        counts.failing.store(!used, Ordering::Relaxed);
    }

    /// The counts of `files`.
    pub fn of(&self, files: ReloadedFiles) -> ReloadCounts {
        let counts = self.counts(files);
        ReloadCounts {
            reloaded: counts.reloaded.load(Ordering::Relaxed),
            refused: counts.refused.load(Ordering::Relaxed),
            failing: counts.failing.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_change_decides_whether_a_kind_is_failing() {
        let stats = ReloadStats::default();
        stats.record(ReloadedFiles::ServedTls, false);
        stats.record(ReloadedFiles::TenantAccessConfig, true);
        let served = stats.of(ReloadedFiles::ServedTls);
        assert_eq!(
            (served.reloaded, served.refused, served.failing),
            (0, 1, true)
        );
        stats.record(ReloadedFiles::ServedTls, true);
        let served = stats.of(ReloadedFiles::ServedTls);
        assert_eq!(
            (served.reloaded, served.refused, served.failing),
            (1, 1, false)
        );
        let config = stats.of(ReloadedFiles::TenantAccessConfig);
        assert_eq!((config.reloaded, config.refused), (1, 0));
        assert_eq!(stats.of(ReloadedFiles::ProviderTls).reloaded, 0);
    }
}
