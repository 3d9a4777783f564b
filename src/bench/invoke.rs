//! Scenario 2: InvokeTool through toolplane against CallTool straight to the provider, with
//! inputs of 256 B and 4 KB and a simple and a complex schema: added latency at concurrency 1,
//! saturation throughput, and server CPU time per call.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::fixtures::input_of_size;
use super::load::{Measured, closed_loop};
use super::path_cpu::{PathCpu, Target};
use super::procs::ChildProcess;
use super::report::Row;
use super::{Bench, channels, meta};
use crate::json::json_to_struct;
use crate::pb;
use crate::pb::discovery_service_client::DiscoveryServiceClient;
use crate::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use crate::pb::tool_provider_service_client::ToolProviderServiceClient;

const SCENARIO: &str = "2 invoke";
/// Callers at saturation.
const SATURATION_CONCURRENCY: usize = 64;
/// Connections the saturating callers share.
const CONNECTIONS: usize = 8;

/// One measurement and the CPU time the processes on its path spent on it.
struct Run {
    measured: Measured,
    cpu: PathCpu,
}

/// Measures `call` at `concurrency` against `target`, through clients made by `client` (one
/// per connection), with the CPU time each process on the path spent.
async fn measure<C, F, Fut>(
    target: &Target<'_>,
    client: fn(tonic::transport::Channel) -> C,
    concurrency: usize,
    bench: &Bench,
    call: F,
) -> Result<Run, String>
where
    C: Clone + Send + Sync + 'static,
    F: Fn(C) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send,
{
    let clients: Arc<Vec<C>> = Arc::new(
        channels(&target.endpoint(), connections(concurrency))
            .await?
            .into_iter()
            .map(client)
            .collect(),
    );
    let before = target.read_cpu();
    let measured = closed_loop(concurrency, bench.sizes.measure_for, move |worker| {
        call(clients[worker % clients.len()].clone())
    })
    .await
    .all_succeeded(&format!(
        "calls at c={concurrency} to {}",
        target.endpoint()
    ))?;
    let cpu = before.per_call_until(&target.read_cpu(), measured.calls);
    Ok(Run { measured, cpu })
}

fn connections(concurrency: usize) -> usize {
    if concurrency == 1 { 1 } else { CONNECTIONS }
}

/// InvokeTool through toolplane.
async fn through(
    target: &Target<'_>,
    tool: &'static str,
    input: Arc<prost_types::Struct>,
    concurrency: usize,
    bench: &Bench,
) -> Result<Run, String> {
    let client = ToolInvokeServiceClient::new;
    measure(target, client, concurrency, bench, move |mut client| {
        let request = pb::InvokeToolRequest {
            meta: meta(),
            tool_name: tool.into(),
            input: Some((*input).clone()),
            ..Default::default()
        };
        async move { client.invoke_tool(request).await.map(drop) }
    })
    .await
}

/// CallTool straight to the provider.
async fn direct(
    target: &Target<'_>,
    tool: &'static str,
    input: Arc<prost_types::Struct>,
    concurrency: usize,
    bench: &Bench,
) -> Result<Run, String> {
    let client = ToolProviderServiceClient::new;
    measure(target, client, concurrency, bench, move |mut client| {
        let request = pb::CallToolRequest {
            meta: meta(),
            tool_name: tool.into(),
            input: Some((*input).clone()),
            ..Default::default()
        };
        async move { client.call_tool(request).await.map(drop) }
    })
    .await
}

/// Starts the bench provider (bench_simple, bench_complex) registered with `toolplane`.
async fn start_provider(bench: &Bench, toolplane: &str) -> Result<ChildProcess, String> {
    let child = bench
        .start_bench_mode("provider", &["--control-plane", toolplane])
        .await?;
    let mut discovery = DiscoveryServiceClient::new(super::channel(toolplane).await?);
    for _ in 0..3000 {
        let found = discovery
            .get_tool(pb::GetToolRequest {
                meta: meta(),
                tool_name: "bench_complex".into(),
                service_name: String::new(),
            })
            .await;
        if found.is_ok() {
            return Ok(child);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("the bench provider never registered".to_owned())
}

/// Starts the pass-through baseline in front of the provider.
async fn start_passthrough(bench: &Bench, provider: &str) -> Result<ChildProcess, String> {
    bench
        .start_bench_mode("passthrough", &["--provider", provider])
        .await
}

fn values(runs: &[Run], pick: impl Fn(&Run) -> f64) -> Vec<f64> {
    runs.iter().map(pick).collect()
}

/// Per round, the latency at `quantile` of `through` less that of `direct`.
fn added(through: &[Run], direct: &[Run], quantile: f64) -> Vec<f64> {
    through
        .iter()
        .zip(direct)
        .map(|(t, d)| t.measured.percentile_us(quantile) - d.measured.percentile_us(quantile))
        .collect()
}

/// The three ways a call is measured: through toolplane, through the pass-through (the floor
/// of toolplane's transport), and straight to the provider.
#[derive(Debug, Clone, Copy)]
enum Path {
    Toolplane,
    Floor,
    Direct,
}

/// The processes scenario 2 measures.
struct Servers {
    toolplane: ChildProcess,
    floor: ChildProcess,
    provider: ChildProcess,
}

/// One measurement of every path, per round.
#[derive(Default)]
struct Rounds {
    toolplane: Vec<Run>,
    floor: Vec<Run>,
    direct: Vec<Run>,
}

impl Servers {
    async fn measure(
        &self,
        path: Path,
        tool: &'static str,
        input: &Arc<prost_types::Struct>,
        concurrency: usize,
        bench: &Bench,
    ) -> Result<Run, String> {
        let input = Arc::clone(input);
        match path {
            Path::Toolplane => {
                let target = Target::relayed(&self.toolplane, &self.provider);
                through(&target, tool, input, concurrency, bench).await
            }
            Path::Floor => {
                let target = Target::relayed(&self.floor, &self.provider);
                through(&target, tool, input, concurrency, bench).await
            }
            Path::Direct => {
                let target = Target::direct(&self.provider);
                direct(&target, tool, input, concurrency, bench).await
            }
        }
    }

    /// Measures the three paths in every round, in an order that rotates from round to round,
    /// so each path is compared with the others measured moments apart.
    async fn rounds(
        &self,
        tool: &'static str,
        input: &Arc<prost_types::Struct>,
        concurrency: usize,
        bench: &Bench,
    ) -> Result<Rounds, String> {
        const ORDER: [Path; 3] = [Path::Toolplane, Path::Floor, Path::Direct];
        let mut rounds = Rounds::default();
        for round in 0..bench.sizes.repetitions.max(1) {
            for offset in 0..ORDER.len() {
                let path = ORDER[(round + offset) % ORDER.len()];
                let run = self.measure(path, tool, input, concurrency, bench).await?;
                match path {
                    Path::Toolplane => rounds.toolplane.push(run),
                    Path::Floor => rounds.floor.push(run),
                    Path::Direct => rounds.direct.push(run),
                }
            }
        }
        Ok(rounds)
    }
}

/// The rows of concurrency 1: latency through toolplane and straight to the provider, and what
/// toolplane and the pass-through add to it.
fn latency_rows(label: &str, rounds: &Rounds) -> Vec<Row> {
    let p50 = |runs: &[Run]| values(runs, |r| r.measured.percentile_us(0.5));
    let p99 = |runs: &[Run]| values(runs, |r| r.measured.percentile_us(0.99));
    let Rounds {
        toolplane,
        floor,
        direct,
    } = rounds;
    vec![
        Row::paired(
            SCENARIO,
            &format!("{label} c=1 p50"),
            "us",
            p50(toolplane),
            p50(direct),
        ),
        Row::paired(
            SCENARIO,
            &format!("{label} c=1 p99"),
            "us",
            p99(toolplane),
            p99(direct),
        ),
        Row::single(
            SCENARIO,
            &format!("{label} added p50 at c=1"),
            "us",
            added(toolplane, direct, 0.5),
        )
        .target("<= 100 us", |t, _| t <= 100.0),
        Row::single(
            SCENARIO,
            &format!("{label} added p99 at c=1"),
            "us",
            added(toolplane, direct, 0.99),
        ),
        Row::paired(
            SCENARIO,
            &format!("{label} added p50 at c=1, toolplane vs pass-through (the floor)"),
            "us",
            added(toolplane, direct, 0.5),
            added(floor, direct, 0.5),
        ),
    ]
}

/// The rows of saturation: throughput of each path, the called server's CPU time per call,
/// and the CPU time per call of the whole path with how busy the machine was, which together
/// explain the throughput ratios (the machine is the bottleneck when it is near 100% busy).
fn saturation_rows(label: &str, rounds: &Rounds) -> Vec<Row> {
    let rps = |runs: &[Run]| values(runs, |r| r.measured.rps());
    let cpu = |runs: &[Run]| values(runs, |r| r.cpu.server());
    let ends = |runs: &[Run]| values(runs, |r| r.cpu.ends());
    let whole = |runs: &[Run]| values(runs, |r| r.cpu.whole());
    let busy = |runs: &[Run]| values(runs, |r| r.cpu.busy_percent);
    let Rounds {
        toolplane,
        floor,
        direct,
    } = rounds;
    let c = SATURATION_CONCURRENCY;
    vec![
        Row::paired(
            SCENARIO,
            &format!("{label} saturation c={c}"),
            "req/s",
            rps(toolplane),
            rps(direct),
        )
        .target(">= 0.5x direct", |t, base| t >= 0.5 * base),
        Row::paired(
            SCENARIO,
            &format!("{label} server CPU per call (toolplane vs provider)"),
            "us",
            cpu(toolplane),
            cpu(direct),
        ),
        Row::paired(
            SCENARIO,
            &format!(
                "{label} load generator + provider CPU per call (through toolplane vs direct)"
            ),
            "us",
            ends(toolplane),
            ends(direct),
        ),
        Row::paired(
            SCENARIO,
            &format!(
                "{label} whole-path CPU per call (load generator + toolplane + provider vs load generator + provider)"
            ),
            "us",
            whole(toolplane),
            whole(direct),
        ),
        Row::paired(
            SCENARIO,
            &format!("{label} machine busy at saturation (through toolplane vs direct)"),
            "%",
            busy(toolplane),
            busy(direct),
        ),
        Row::paired(
            SCENARIO,
            &format!("{label} pass-through (the floor): saturation c={c} vs direct"),
            "req/s",
            rps(floor),
            rps(direct),
        ),
        Row::paired(
            SCENARIO,
            &format!("{label} saturation c={c}, toolplane vs pass-through (the floor)"),
            "req/s",
            rps(toolplane),
            rps(floor),
        ),
        Row::paired(
            SCENARIO,
            &format!("{label} server CPU per call (toolplane vs pass-through)"),
            "us",
            cpu(toolplane),
            cpu(floor),
        ),
        Row::paired(
            SCENARIO,
            &format!(
                "{label} whole-path CPU per call (through toolplane vs through the pass-through)"
            ),
            "us",
            whole(toolplane),
            whole(floor),
        ),
    ]
}

/// Runs scenario 2.
pub(super) async fn run(bench: &Bench) -> Result<Vec<Row>, String> {
    let toolplane = bench.start_toolplane(&[]).await?;
    let provider = start_provider(bench, &toolplane.endpoint()).await?;
    let floor = start_passthrough(bench, &provider.endpoint()).await?;
    let servers = Servers {
        toolplane,
        floor,
        provider,
    };
    let mut rows = Vec::new();
    for tool in ["bench_simple", "bench_complex"] {
        for size in [256, 4096] {
            let input: Value = input_of_size(size);
            let input = Arc::new(json_to_struct(&input).expect("bench inputs are objects"));
            let label = format!("{tool} {size} B");
            let rounds = servers.rounds(tool, &input, 1, bench).await?;
            rows.extend(latency_rows(&label, &rounds));
            let rounds = servers
                .rounds(tool, &input, SATURATION_CONCURRENCY, bench)
                .await?;
            rows.extend(saturation_rows(&label, &rounds));
        }
    }
    Ok(rows)
}
