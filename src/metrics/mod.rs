//! Prometheus metrics: what the server is doing, mostly read from the state it keeps anyway
//! when a scraper asks (`GET /metrics` on the `metrics_listen` address, [`http`]).
//! Invocations are counted by the record log, which sees each one once; the registry's sizes,
//! the providers' health, whether the server is serving and the agents are read from the
//! store, the health book, the serving state and the agent store; gRPC calls are counted per
//! method and code as they are answered ([`crate::grpc::rpc_stats`], only when metrics are
//! served); the process's own numbers come from `/proc/self`.
//!
//! Label values are bounded sets (invocation statuses, agent states, served gRPC methods, gRPC
//! codes), never tenants, services or tools, whose numbers are the operator's to bound, not
//! the metrics backend's.

mod agents;
pub mod http;
pub mod log_lines;
mod process;
mod rpc;

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::agent::model_calls::ModelCalls;
use crate::agent::store::AgentStore;
use crate::grpc::reload_stats::{ReloadStats, ReloadedFiles};
use crate::grpc::rpc_stats::RpcStats;
use crate::grpc::serving::ServingState;
use crate::invoke::health::ProviderHealthBook;
use crate::invoke::record_stats::DURATION_BUCKETS;
use crate::invoke::records::{InvocationStatus, RecordLog};
use crate::mcp::import::LiveImports;
use crate::mcp::token_requests::{TokenReason, TokenRequests};
use crate::mcp::{McpRefusals, McpSessions};
use crate::registry::lateness::LATENESS_BUCKETS;
use crate::registry::store::RegistryStore;

/// Where the metrics are read from.
#[derive(Debug, Clone)]
pub struct MetricsSources {
    /// The invocation record log (invocation counts and durations).
    pub records: Arc<RecordLog>,
    /// The registry's store (services, tools, tenants).
    pub store: Arc<dyn RegistryStore>,
    /// The providers' health.
    pub health: Arc<ProviderHealthBook>,
    /// Whether the server is serving or draining.
    pub serving: ServingState,
    /// Calls per RPC.
    pub rpcs: Arc<RpcStats>,
    /// The agents and their conversations.
    pub agents: Arc<AgentStore>,
    /// The agents' model calls.
    pub model_calls: Arc<ModelCalls>,
    /// The MCP imports running, and whether each one's tools are registered now.
    pub mcp_imports: LiveImports,
    /// The OAuth access tokens the MCP imports have asked for.
    pub mcp_token_requests: Arc<TokenRequests>,
    /// The MCP endpoint's sessions, when it is served.
    pub mcp_sessions: Option<McpSessions>,
    /// The MCP requests tenant access refused, when the endpoint is served.
    pub mcp_refusals: Option<Arc<McpRefusals>>,
    /// How the file watches (TLS, tenant access) have fared.
    pub reloads: Arc<ReloadStats>,
}

/// The text a scrape is answered with (OpenMetrics text format).
pub fn render(sources: &MetricsSources) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(sources.clone()));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let value = i64::try_from(value).unwrap_or(i64::MAX);
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

/// Writes a counter family with one label, `label`: a sample for each of `counts` (the
/// label's value and the count).
fn counter_by<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    counts: impl IntoIterator<Item = (&'a str, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, count) in counts {
        family
            .encode_family(&[(label, value)])?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&count, None)?;
    }
    Ok(())
}

/// Writes a histogram of `buckets` (not cumulative; one more than `bounds`, the last holding
/// what is past every bound) whose values add up to `sum`.
fn histogram(
    encoder: &mut MetricEncoder,
    bounds: &[f64],
    buckets: &[u64],
    sum: f64,
) -> Result<(), std::fmt::Error> {
    let buckets: Vec<(f64, u64)> = bounds
        .iter()
        .copied()
        .chain([f64::INFINITY])
        .zip(buckets.iter().copied())
        .collect();
    let count = buckets.iter().map(|(_, count)| count).sum();
    encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
}

impl Collector for MetricsSources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.records.stats();
        let mut counts = encoder.encode_descriptor(
            "toolplane_invocations",
            "Invocations recorded since the server started, by how they ended.",
            None,
            MetricType::Counter,
        )?;
        for status in InvocationStatus::ALL {
            let labels = [("status", status.name())];
            counts
                .encode_family(&labels)?
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                    &stats.of(status).count,
                    None,
                )?;
        }
        let mut durations = encoder.encode_descriptor(
            "toolplane_invocation_duration_seconds",
            "How long invocations took, from arrival to answer, by how they ended.",
            None,
            MetricType::Histogram,
        )?;
        for status in InvocationStatus::ALL {
            let labels = [("status", status.name())];
            let of_status = stats.of(status);
            histogram(
                &mut durations.encode_family(&labels)?,
                &DURATION_BUCKETS,
                &of_status.buckets,
                of_status.duration_sum_seconds,
            )?;
        }
        encoder
            .encode_descriptor(
                "toolplane_invocation_record_write_failures",
                "Invocation records that could not be written to the record file (each failed its call INTERNAL).",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                &stats.write_failures,
                None,
            )?;
        encoder
            .encode_descriptor(
                "toolplane_invocation_record_sync_failures",
                "Times the record file, or a file rotated from it, could not be flushed to the disk (its records since the last flush may be lost on a power failure; the current file is tried again each second).",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                &stats.sync_failures,
                None,
            )?;
        encoder
            .encode_descriptor(
                "toolplane_invocation_record_file_read_bytes",
                "Bytes of the record files read to find records memory no longer holds (GetInvocationRecord, ListInvocationRecords); files known not to hold what is asked for are skipped.",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                &stats.file_bytes_read,
                None,
            )?;

        let (tenants, usage) = self.store.totals();
        gauge(
            &mut encoder,
            "toolplane_registered_services",
            "Services registered under a live lease, across tenants.",
            usage.services,
        )?;
        gauge(
            &mut encoder,
            "toolplane_registered_tools",
            "Tools the registered services hold, across tenants (a service whose instances \
             registered different tools, as in a rolling update, counts each set).",
            usage.tools,
        )?;
        gauge(
            &mut encoder,
            "toolplane_registered_instances",
            "Live instances (replicas, each under a lease of its own) of the registered \
             services, across tenants.",
            self.store.instance_count(),
        )?;
        gauge(
            &mut encoder,
            "toolplane_registered_tool_definition_bytes",
            "Bytes of the registered tools' names, descriptions and schema text, across tenants.",
            usage.tool_bytes,
        )?;
        let lateness = self.store.expiry_lateness();
        histogram(
            &mut encoder.encode_descriptor(
                "toolplane_lease_expiry_lateness_seconds",
                "How long past its deadline each lease that lapsed was removed from the registry \
                 (and its change published to the tenant's watchers).",
                None,
                MetricType::Histogram,
            )?,
            &LATENESS_BUCKETS,
            &lateness.buckets,
            lateness.sum_seconds,
        )?;
        gauge(
            &mut encoder,
            "toolplane_tenants",
            "Tenants with at least one registered service.",
            tenants,
        )?;
        gauge(
            &mut encoder,
            "toolplane_unhealthy_provider_endpoints",
            "Provider endpoints whose last grpc.health.v1 check failed.",
            self.health.unhealthy_count() as u64,
        )?;
        gauge(
            &mut encoder,
            "toolplane_serving",
            "1 while the server is serving, 0 once it has begun to shut down.",
            u64::from(self.serving.is_serving()),
        )?;
        let (imported, not_imported) = self.mcp_imports.counts();
        let mut imports = encoder.encode_descriptor(
            "toolplane_mcp_imports",
            "The configured MCP imports, by whether their tools are registered now \
             (not_imported: not yet, or the server cannot be reached or its tools registered).",
            None,
            MetricType::Gauge,
        )?;
        for (state, count) in [("imported", imported), ("not_imported", not_imported)] {
            imports
                .encode_family(&[("state", state)])?
                .encode_gauge(&i64::try_from(count).unwrap_or(i64::MAX))?;
        }
        gauge(
            &mut encoder,
            "toolplane_mcp_import_held_tools",
            "Tools the MCP imports with approved_tools listed at their last listing but hold \
             back: not approved, or changed since approved (the log names each).",
            self.mcp_imports.held_tools(),
        )?;
        let mut token_requests = encoder.encode_descriptor(
            "toolplane_mcp_import_token_requests",
            "OAuth access tokens the MCP imports with oauth_client_credentials asked their \
             servers' authorization servers for, by why (session: a session opened; expiring: \
             the token in use was about to expire; rejected: the server answered 401; \
             insufficient_scope: the server asked for more scopes) and outcome (granted, or \
             failed: refused or not answered; the log says why).",
            None,
            MetricType::Counter,
        )?;
        for (reason, (granted, failed)) in TokenReason::ALL
            .iter()
            .zip(self.mcp_token_requests.counts())
        {
            for (outcome, count) in [("granted", granted), ("failed", failed)] {
                token_requests
                    .encode_family(&[("reason", reason.name()), ("outcome", outcome)])?
                    .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                        &count, None,
                    )?;
            }
        }
        if let Some(sessions) = &self.mcp_sessions {
            gauge(
                &mut encoder,
                "toolplane_mcp_sessions",
                "The MCP sessions held now (at most mcp_max_sessions).",
                sessions.held_now() as u64,
            )?;
        }
        if let Some(refusals) = &self.mcp_refusals {
            counter_by(
                &mut encoder,
                "toolplane_mcp_requests_refused",
                "MCP requests refused, by why (tenant access: unknown_token 401, \
                 tenant_not_granted 403, forwarded_certificate_unreadable 400; sessions past \
                 mcp_max_sessions: sessions_limit 503, past mcp_max_sessions_per_tenant: \
                 tenant_sessions_limit 429).",
                "reason",
                McpRefusals::REASONS.iter().copied().zip(refusals.counts()),
            )?;
        }
        encode_reloads(&mut encoder, &self.reloads)?;
        agents::encode(&mut encoder, &self.agents, &self.model_calls.counts())?;
        rpc::encode(&mut encoder, &self.rpcs)?;
        log_lines::encode(&mut encoder)?;
        process::encode(&mut encoder)
    }
}

fn encode_reloads(
    encoder: &mut DescriptorEncoder,
    reloads: &ReloadStats,
) -> Result<(), std::fmt::Error> {
    let mut changes = encoder.encode_descriptor(
        "toolplane_file_reloads",
        "Changed files read again since the server started, by which files and whether they \
         were put in use (reloaded) or could not be used (refused: the previous ones kept).",
        None,
        MetricType::Counter,
    )?;
    for files in ReloadedFiles::ALL {
        let counts = reloads.of(files);
        for (result, count) in [("reloaded", counts.reloaded), ("refused", counts.refused)] {
            changes
                .encode_family(&[("files", files.label()), ("result", result)])?
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&count, None)?;
        }
    }
    let mut failing = encoder.encode_descriptor(
        "toolplane_file_reload_failing",
        "1 while the last change of these files could not be used (the previous ones are in \
         use, and the WARN log says why), else 0.",
        None,
        MetricType::Gauge,
    )?;
    for files in ReloadedFiles::ALL {
        failing
            .encode_family(&[("files", files.label())])?
            .encode_gauge(&i64::from(reloads.of(files).failing))?;
    }
    Ok(())
}

/// Sources with nothing in them but two MCP imports of servers that cannot be reached, serving
/// (inside a tokio runtime: the store and the imports start tasks).
#[cfg(test)]
pub(crate) fn test_sources() -> MetricsSources {
    use crate::mcp::import::{McpImport, McpSource};
    let store: Arc<dyn crate::registry::store::RegistryStore> =
        crate::registry::memory::MemoryStore::start(16, 16);
    let registry = crate::registry::Registry::new(Arc::clone(&store), Default::default(), 16);
    let unreachable = |service: &str| McpImport {
        service: crate::registry::ServiceName::parse(service).expect("a service name"),
        // Nothing listens on the discard port of the loopback address.
        source: McpSource::Http("http://127.0.0.1:9/mcp".to_owned()),
        tenant: crate::envelope::TenantId(0),
        refresh_interval: std::time::Duration::from_secs(60),
        auth: None,
        approved_tools: None,
    };
    let imports = [unreachable("first"), unreachable("second")];
    MetricsSources {
        records: Arc::new(RecordLog::in_memory(10)),
        store,
        health: Arc::new(ProviderHealthBook::default()),
        serving: ServingState::new(),
        rpcs: Arc::new(crate::grpc::server::served_rpc_stats().expect("descriptors decode")),
        agents: Arc::new(AgentStore::new(10, 0, 0)),
        model_calls: Arc::default(),
        mcp_imports: LiveImports::start(
            &imports,
            &registry,
            &Default::default(),
            &crate::invoke::heavy::HeavyWork::new(1),
        ),
        mcp_token_requests: Arc::default(),
        mcp_sessions: Some(McpSessions::default()),
        mcp_refusals: Some(Arc::default()),
        reloads: Arc::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invoke::records::RecordDraft;

    fn draft(status: InvocationStatus) -> RecordDraft {
        let now = std::time::SystemTime::now();
        RecordDraft {
            invocation_id: "id".into(),
            tenant: crate::envelope::TenantId(1),
            correlation_id: String::new(),
            tool_name: "t".into(),
            service_name: "s".into(),
            definition_sha256: String::new(),
            input_sha256: String::new(),
            output_sha256: String::new(),
            started_at: now,
            finished_at: now + std::time::Duration::from_millis(3),
            attempts: 1,
            status,
            error_reason: String::new(),
            trace_id: String::new(),
        }
    }

    #[tokio::test]
    async fn a_scrape_reports_invocations_by_status_and_the_registry() {
        let records = Arc::new(RecordLog::in_memory(10));
        for status in [
            InvocationStatus::Succeeded,
            InvocationStatus::Succeeded,
            InvocationStatus::TimedOut,
        ] {
            records.append(draft(status)).expect("appended");
        }
        let sources = MetricsSources {
            records,
            ..test_sources()
        };
        sources.reloads.record(ReloadedFiles::ServedTls, false);
        sources
            .mcp_token_requests
            .count(TokenReason::InsufficientScope, false);
        let text = render(&sources);
        for line in [
            "# TYPE toolplane_invocations counter",
            "toolplane_invocations_total{status=\"succeeded\"} 2",
            "toolplane_invocations_total{status=\"timed_out\"} 1",
            "toolplane_invocations_total{status=\"cancelled\"} 0",
            "# TYPE toolplane_invocation_duration_seconds histogram",
            "toolplane_invocation_duration_seconds_count{status=\"succeeded\"} 2",
            "toolplane_invocation_duration_seconds_bucket{le=\"0.0025\",status=\"succeeded\"} 0",
            "toolplane_invocation_duration_seconds_bucket{le=\"0.005\",status=\"succeeded\"} 2",
            "toolplane_invocation_duration_seconds_bucket{le=\"+Inf\",status=\"succeeded\"} 2",
            "toolplane_invocation_record_write_failures_total 0",
            "toolplane_invocation_record_sync_failures_total 0",
            "toolplane_invocation_record_file_read_bytes_total 0",
            "toolplane_registered_services 0",
            "toolplane_serving 1",
            "toolplane_agents{state=\"idle\"} 0",
            "toolplane_agents{state=\"toolcall\"} 0",
            "toolplane_agent_turns_running 0",
            "toolplane_agent_conversation_bytes 0",
            "toolplane_mcp_imports{state=\"imported\"} 0",
            "toolplane_mcp_imports{state=\"not_imported\"} 2",
            "toolplane_mcp_import_held_tools 0",
            "# TYPE toolplane_mcp_import_token_requests counter",
            "toolplane_mcp_import_token_requests_total{reason=\"session\",outcome=\"granted\"} 0",
            "toolplane_mcp_import_token_requests_total{reason=\"insufficient_scope\",outcome=\"failed\"} 1",
            "toolplane_mcp_sessions 0",
            "toolplane_mcp_requests_refused_total{reason=\"unknown_token\"} 0",
            "toolplane_file_reloads_total{files=\"served_tls\",result=\"refused\"} 1",
            "toolplane_file_reloads_total{files=\"tenant_access_config\",result=\"reloaded\"} 0",
            "toolplane_file_reload_failing{files=\"served_tls\"} 1",
            "toolplane_file_reload_failing{files=\"provider_tls\"} 0",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
        sources.serving.shut_down();
        assert!(render(&sources).lines().any(|l| l == "toolplane_serving 0"));
    }
}
