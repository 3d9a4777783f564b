//! Scenario 1: GetTool, ListTools (a page of 100) and SearchTools (the best 10) with many
//! registered tools whose schemas are 1-4 KB, against a bare tonic server answering the same
//! bytes.

use std::sync::Arc;

use prost::Message;

use super::load::{Measured, closed_loop, open_loop};
use super::procs::ChildProcess;
use super::report::Row;
use super::{Bench, alternate, channels, meta, register_tools};
use crate::pb;
use crate::pb::discovery_service_client::DiscoveryServiceClient;

/// Callers share this many connections at concurrency 64.
const CONNECTIONS: usize = 8;
const SCENARIO: &str = "1 discovery";

#[derive(Clone, Copy)]
enum Read {
    GetTool,
    ListTools,
    SearchTools,
}

/// The query of the SearchTools measurements: every tool's description holds its first two
/// words, so every tool is scored and matches, and one tool's number ranks it first.
const SEARCH_QUERY: &str = "benchmark tool 4242";

fn search_request() -> pb::SearchToolsRequest {
    pb::SearchToolsRequest {
        meta: meta(),
        query: SEARCH_QUERY.into(),
        max_results: 10,
        ..Default::default()
    }
}

async fn measure(
    endpoint: &str,
    read: Read,
    concurrency: usize,
    bench: &Bench,
    tools: usize,
) -> Result<Measured, String> {
    let clients: Arc<Vec<_>> = Arc::new(
        channels(endpoint, if concurrency == 1 { 1 } else { CONNECTIONS })
            .await?
            .into_iter()
            .map(DiscoveryServiceClient::new)
            .collect(),
    );
    let what = match read {
        Read::GetTool => format!("GetTool at c={concurrency}, {endpoint}"),
        Read::ListTools => format!("ListTools at c={concurrency}, {endpoint}"),
        Read::SearchTools => format!("SearchTools at c={concurrency}, {endpoint}"),
    };
    closed_loop(concurrency, bench.sizes.measure_for, move |worker| {
        let mut client = clients[worker % clients.len()].clone();
        async move {
            match read {
                Read::GetTool => {
                    let name = format!("tool_{:06}", (worker * 7919) % tools);
                    client
                        .get_tool(pb::GetToolRequest {
                            meta: meta(),
                            tool_name: name,
                            service_name: String::new(),
                        })
                        .await
                        .map(drop)
                }
                Read::ListTools => client
                    .list_tools(pb::ListToolsRequest {
                        meta: meta(),
                        page_size: 100,
                        ..Default::default()
                    })
                    .await
                    .map(drop),
                Read::SearchTools => client.search_tools(search_request()).await.map(drop),
            }
        }
    })
    .await
    .all_succeeded(&what)
}

async fn measure_open(endpoint: &str, bench: &Bench, tools: usize) -> Result<Measured, String> {
    let clients: Arc<Vec<_>> = Arc::new(
        channels(endpoint, CONNECTIONS)
            .await?
            .into_iter()
            .map(DiscoveryServiceClient::new)
            .collect(),
    );
    open_loop(
        bench.sizes.open_loop_rate,
        bench.sizes.measure_for,
        move |index| {
            let mut client = clients[index as usize % clients.len()].clone();
            let name = format!("tool_{:06}", (index as usize * 7919) % tools);
            async move {
                client
                    .get_tool(pb::GetToolRequest {
                        meta: meta(),
                        tool_name: name,
                        service_name: String::new(),
                    })
                    .await
                    .map(drop)
            }
        },
    )
    .await
    .all_succeeded(&format!(
        "GetTool open loop at {} req/s, {endpoint}",
        bench.sizes.open_loop_rate
    ))
}

/// Starts the baseline answering with exactly what toolplane answered: every tool's GetTool
/// answer (looked up by name, as toolplane does), the first ListTools page and the
/// SearchTools answer.
async fn start_baseline(
    bench: &Bench,
    toolplane: &str,
    tools: usize,
) -> Result<ChildProcess, String> {
    let mut client = DiscoveryServiceClient::new(super::channel(toolplane).await?);
    let mut answers = Vec::new();
    for index in 0..tools {
        let request = pb::GetToolRequest {
            meta: meta(),
            tool_name: format!("tool_{index:06}"),
            service_name: String::new(),
        };
        let answer = client
            .get_tool(request)
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        answer
            .encode_length_delimited(&mut answers)
            .map_err(|e| e.to_string())?;
    }
    let list = client
        .list_tools(pb::ListToolsRequest {
            meta: meta(),
            page_size: 100,
            ..Default::default()
        })
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    let search = client
        .search_tools(search_request())
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    // The baseline reads the files before it serves, and `start_bench_mode` waits until it
    // serves: the directory is removed when this returns, also on an error.
    let dir = tempfile::Builder::new()
        .prefix("toolplane-bench-responses")
        .tempdir()
        .map_err(|e| e.to_string())?;
    std::fs::write(dir.path().join("get_tool.bin"), answers).map_err(|e| e.to_string())?;
    std::fs::write(dir.path().join("list_tools.bin"), list.encode_to_vec())
        .map_err(|e| e.to_string())?;
    std::fs::write(dir.path().join("search_tools.bin"), search.encode_to_vec())
        .map_err(|e| e.to_string())?;
    let dir_text = dir.path().to_string_lossy().into_owned();
    bench
        .start_bench_mode("baseline", &["--responses", &dir_text])
        .await
}

fn rps(values: &[Measured]) -> Vec<f64> {
    values.iter().map(Measured::rps).collect()
}

fn percentile(values: &[Measured], quantile: f64) -> Vec<f64> {
    values.iter().map(|m| m.percentile_us(quantile)).collect()
}

/// The p50 and p99 rows of a paired measurement.
fn latency_rows(label: &str, toolplane: &[Measured], baseline: &[Measured]) -> [Row; 2] {
    [0.5, 0.99].map(|quantile| {
        let name = format!("{label} p{}", (quantile * 100.0) as u32);
        Row::paired(
            SCENARIO,
            &name,
            "us",
            percentile(toolplane, quantile),
            percentile(baseline, quantile),
        )
    })
}

/// Runs scenario 1.
pub(super) async fn run(bench: &Bench) -> Result<Vec<Row>, String> {
    let toolplane = bench.start_toolplane(&[]).await?;
    let tools = bench.sizes.discovery_tools;
    let mut client = DiscoveryServiceClient::new(super::channel(&toolplane.endpoint()).await?);
    register_tools(&mut client, "discovery", tools, None).await?;
    let baseline = start_baseline(bench, &toolplane.endpoint(), tools).await?;
    let (ours, theirs) = (toolplane.endpoint(), baseline.endpoint());
    let mut rows = Vec::new();
    for (read, name, floor) in [
        (Read::GetTool, "GetTool", Some(0.8)),
        (Read::ListTools, "ListTools page 100", Some(0.5)),
        (Read::SearchTools, "SearchTools best 10", None),
    ] {
        for concurrency in [1, 64] {
            let (a, b) = alternate(
                bench.sizes.repetitions,
                async || measure(&ours, read, concurrency, bench, tools).await,
                async || measure(&theirs, read, concurrency, bench, tools).await,
            )
            .await?;
            let label = format!("{name} c={concurrency}");
            let row = Row::paired(
                SCENARIO,
                &format!("{label} throughput"),
                "req/s",
                rps(&a),
                rps(&b),
            );
            rows.push(match floor {
                Some(floor) if concurrency == 64 => row
                    .target(&format!(">= {floor}x baseline"), move |t, base| {
                        t >= floor * base
                    }),
                _ => row,
            });
            rows.extend(latency_rows(&label, &a, &b));
        }
    }
    let (a, b) = alternate(
        bench.sizes.repetitions,
        async || measure_open(&ours, bench, tools).await,
        async || measure_open(&theirs, bench, tools).await,
    )
    .await?;
    let label = format!("GetTool open loop {} req/s", bench.sizes.open_loop_rate);
    rows.extend(latency_rows(&label, &a, &b));
    Ok(rows)
}
