//! The benchmark harness behind `toolplane-bench`: it starts everything it measures on
//! loopback (each server in its own process), runs every scenario against toolplane and its
//! baseline in the same run, alternating, several times, and reports medians, spreads and
//! ratios. It measures and reports; it asserts nothing about speed.

mod discovery;
pub mod fixtures;
mod invoke;
mod lateness;
mod lifecycle;
pub mod load;
pub mod passthrough;
mod path_cpu;
pub mod procs;
pub mod report;
pub mod tls;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::envelope::{TenantId, request_meta};
use crate::json::json_to_struct;
use crate::pb;
use crate::pb::discovery_service_client::DiscoveryServiceClient;
use procs::{ChildProcess, free_port};
use report::Row;

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Repetitions of every measurement (at least 3 for a real run).
    pub repetitions: usize,
    /// How long each closed- or open-loop measurement runs.
    pub measure_for: Duration,
    /// Tools registered for the discovery scenario.
    pub discovery_tools: usize,
    /// Offered rate of the open-loop GetTool measurement.
    pub open_loop_rate: f64,
    /// Services registered for the expiry measurement.
    pub expiry_services: usize,
    /// Watcher counts of the fan-out scenario.
    pub watchers: Vec<usize>,
    /// Watchers, and tools in each changed service, of the fan-out of changes with tools.
    pub tool_changes: (usize, usize),
    /// Tool counts of the memory measurement.
    pub memory_tools: Vec<usize>,
}

impl Sizes {
    /// The full run BENCHMARKS.md reports.
    pub fn full() -> Self {
        Self {
            repetitions: 3,
            measure_for: Duration::from_secs(2),
            discovery_tools: 10_000,
            open_loop_rate: 2_000.0,
            expiry_services: 1_000,
            watchers: vec![1_000, 10_000],
            tool_changes: (1_000, 20),
            memory_tools: vec![1_000, 10_000, 100_000],
        }
    }

    /// A tiny run that exercises every code path in seconds (the test script runs it).
    pub fn quick() -> Self {
        Self {
            repetitions: 1,
            measure_for: Duration::from_millis(150),
            discovery_tools: 200,
            open_loop_rate: 200.0,
            expiry_services: 20,
            watchers: vec![20],
            tool_changes: (20, 3),
            memory_tools: vec![100, 300],
        }
    }
}

/// Where the binaries under test are.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `toolplane`.
    pub toolplane: PathBuf,
    /// `toolplane-bench` itself (for the baseline and bench provider modes).
    pub bench: PathBuf,
}

impl Binaries {
    /// The binaries next to the running one.
    pub fn beside_this_one() -> Self {
        Self {
            toolplane: procs::sibling_binary("toolplane"),
            bench: std::env::current_exe().unwrap_or_default(),
        }
    }
}

/// A running run: sizes, binaries, and whether every connection is TLS.
#[derive(Debug, Clone)]
pub struct Bench {
    /// How big.
    pub sizes: Sizes,
    /// What to run.
    pub binaries: Binaries,
    /// With `--tls`: the run's certificates, which every server serves and every client
    /// trusts; `None` runs everything in plain text.
    pub tls: Option<Arc<tls::RunTls>>,
}

/// An endpoint to connect to: over TLS trusting the run's CA when it is `https://`.
fn endpoint_of(endpoint: &str) -> Result<Endpoint, String> {
    let plain = Endpoint::from_shared(endpoint.to_owned()).map_err(|e| e.to_string())?;
    if endpoint.starts_with("https://") {
        plain
            .tls_config(tls::client_tls())
            .map_err(|e| format!("{endpoint}: {e}"))
    } else {
        Ok(plain)
    }
}

/// Connects to an endpoint.
pub async fn channel(endpoint: &str) -> Result<Channel, String> {
    endpoint_of(endpoint)?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| format!("{endpoint}: {e}"))
}

/// Several connections to an endpoint, for callers that share them round-robin.
pub async fn channels(endpoint: &str, count: usize) -> Result<Vec<Channel>, String> {
    let mut all = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        all.push(channel(endpoint).await?);
    }
    Ok(all)
}

/// Polls grpc.health.v1 until the server says SERVING; returns when it did.
pub async fn wait_serving(endpoint: &str, give_up_after: Duration) -> Result<Instant, String> {
    let give_up = Instant::now() + give_up_after;
    loop {
        if let Ok(channel) = endpoint_of(endpoint)?.connect().await {
            let answer = HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await;
            if answer.is_ok_and(|a| a.into_inner().status == ServingStatus::Serving as i32) {
                return Ok(Instant::now());
            }
        }
        if Instant::now() > give_up {
            return Err(format!("{endpoint} never reported SERVING"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The envelope of benchmark requests (tenant 0).
pub fn meta() -> Option<pb::Meta> {
    Some(request_meta(TenantId(0), "bench"))
}

impl Bench {
    /// A run of `sizes` with `binaries`; with `tls`, the run's certificates are made and this
    /// process's connections to `https://` endpoints trust them.
    pub fn new(sizes: Sizes, binaries: Binaries, tls: bool) -> Result<Self, String> {
        let tls = if tls {
            let made = tls::RunTls::generate()?;
            tls::trust_for_clients(&made);
            Some(Arc::new(made))
        } else {
            None
        };
        Ok(Self {
            sizes,
            binaries,
            tls,
        })
    }

    /// Starts `program subcommand --listen ADDR args...` on a free port with `env` and waits
    /// until it reports SERVING.
    async fn start_serving(
        &self,
        program: &std::path::Path,
        (subcommand, args): (&str, &[&str]),
        env: &[(&str, &str)],
    ) -> Result<ChildProcess, String> {
        let addr = format!("127.0.0.1:{}", free_port().map_err(|e| e.to_string())?);
        let mut all = vec![subcommand, "--listen", &addr];
        all.extend_from_slice(args);
        let child = ChildProcess::spawn(program, &all, env, &addr)?.with_tls(self.tls.is_some());
        wait_serving(&child.endpoint(), Duration::from_secs(30)).await?;
        Ok(child)
    }

    /// Starts a `toolplane-bench` mode (baseline, provider, passthrough), with `--tls-dir`
    /// in a TLS run, and waits until it serves.
    async fn start_bench_mode(&self, mode: &str, args: &[&str]) -> Result<ChildProcess, String> {
        let dir = self.tls.as_ref().map(|tls| tls.dir().display().to_string());
        let mut all = args.to_vec();
        if let Some(dir) = &dir {
            all.extend(["--tls-dir", dir.as_str()]);
        }
        self.start_serving(&self.binaries.bench, (mode, &all), &[])
            .await
    }

    /// The environment toolplane is started with: in a TLS run, the settings that make it
    /// serve the run's certificate and trust its CA for providers.
    pub fn toolplane_tls_env(&self) -> Vec<(&'static str, String)> {
        self.tls
            .as_ref()
            .map(|tls| tls.toolplane_env())
            .unwrap_or_default()
    }

    /// Starts a toolplane server (rate limits and the tenant quotas off: the
    /// churn scenario registers fresh names as fast as it can) and waits until it serves.
    pub async fn start_toolplane(
        &self,
        extra_env: &[(&str, &str)],
    ) -> Result<ChildProcess, String> {
        let mut env = vec![
            ("TOOLPLANE_RATE_LIMIT_PER_SECOND", "0"),
            ("TOOLPLANE_MAX_SERVICES_PER_TENANT", "0"),
            ("TOOLPLANE_MAX_TOOLS_PER_TENANT", "0"),
            ("TOOLPLANE_MAX_TOOL_BYTES_PER_TENANT", "0"),
        ];
        env.extend_from_slice(extra_env);
        let tls_env = self.toolplane_tls_env();
        env.extend(tls_env.iter().map(|(key, value)| (*key, value.as_str())));
        self.start_serving(&self.binaries.toolplane, ("serve", &[]), &env)
            .await
    }

    /// Runs the scenarios in `only` (every scenario when empty) and returns the rows; in a
    /// TLS run each row's scenario says `(TLS)`.
    pub async fn run(&self, only: &[u8]) -> Result<Vec<Row>, String> {
        let wanted = |scenario: u8| only.is_empty() || only.contains(&scenario);
        let mut rows = Vec::new();
        if wanted(1) {
            eprintln!("scenario 1: discovery reads");
            rows.extend(discovery::run(self).await?);
        }
        if wanted(2) {
            eprintln!("scenario 2: invocation");
            rows.extend(invoke::run(self).await?);
        }
        if wanted(3) {
            eprintln!("scenario 3: registration churn and expiry");
            rows.extend(lifecycle::churn(self).await?);
        }
        if wanted(4) {
            eprintln!("scenario 4: watch fan-out");
            rows.extend(watch::run(self).await?);
        }
        if wanted(5) {
            eprintln!("scenario 5: cold start and memory");
            rows.extend(lifecycle::startup_and_memory(self).await?);
        }
        if self.tls.is_some() {
            for row in &mut rows {
                row.scenario.push_str(" (TLS)");
            }
        }
        Ok(rows)
    }
}

/// Registers `tools` tools in services of up to 100, each tool with its own schema of 1-4 KB
/// (or `schema_bytes` when given); returns the total schema text in bytes.
pub async fn register_tools(
    client: &mut DiscoveryServiceClient<Channel>,
    prefix: &str,
    tools: usize,
    schema_bytes: Option<usize>,
) -> Result<usize, String> {
    let mut schema_text = 0;
    let mut next = 0;
    let mut service = 0;
    while next < tools {
        let count = (tools - next).min(100);
        let registrations: Vec<pb::ToolRegistration> = (next..next + count)
            .map(|index| {
                let schema = fixtures::tool_schema(
                    index,
                    schema_bytes.unwrap_or(1024 + (index * 37) % 3072),
                );
                schema_text += schema.to_string().len();
                pb::ToolRegistration {
                    tool_name: format!("tool_{index:06}"),
                    description: format!("benchmark tool {index}"),
                    tool_schema: json_to_struct(&schema),
                    ..Default::default()
                }
            })
            .collect();
        let registration = pb::ServiceRegistration {
            service_name: format!("{prefix}-{service:05}"),
            service_version: "1.0.0".into(),
            endpoint: String::new(),
            tools: registrations,
            ttl: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
            instance_id: String::new(),
        };
        client
            .register_service(pb::RegisterServiceRequest {
                meta: meta(),
                registration: Some(registration),
            })
            .await
            .map_err(|s| s.message().to_owned())?;
        next += count;
        service += 1;
    }
    Ok(schema_text)
}

/// Alternates two measurements `repetitions` times (toolplane first on even rounds, the
/// baseline first on odd ones) and collects each one's values.
pub async fn alternate<A, B, FA, FB>(
    repetitions: usize,
    mut toolplane: FA,
    mut baseline: FB,
) -> Result<(Vec<A>, Vec<B>), String>
where
    FA: AsyncFnMut() -> Result<A, String>,
    FB: AsyncFnMut() -> Result<B, String>,
{
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for round in 0..repetitions.max(1) {
        if round % 2 == 0 {
            first.push(toolplane().await?);
            second.push(baseline().await?);
        } else {
            second.push(baseline().await?);
            first.push(toolplane().await?);
        }
    }
    Ok((first, second))
}
