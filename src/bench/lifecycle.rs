//! Scenario 3 (registration churn, heartbeats, expiry lateness) and scenario 5 (cold start to
//! SERVING, resident memory per registered tool).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use tokio::sync::Mutex;

use super::lateness::ServerLateness;
use super::load::closed_loop;
use super::procs::{ChildProcess, free_port};
use super::report::Row;
use super::{Bench, channel, meta, register_tools, wait_serving};
use crate::pb;
use crate::pb::discovery_service_client::DiscoveryServiceClient;

/// Callers registering or heartbeating at once.
const CHURN_CONCURRENCY: usize = 16;
/// The TTL of leases in the expiry measurement.
const EXPIRY_TTL: Duration = Duration::from_secs(2);

fn small_registration(name: String, ttl: Duration) -> pb::ServiceRegistration {
    pb::ServiceRegistration {
        service_name: name,
        service_version: "1.0.0".into(),
        endpoint: String::new(),
        tools: vec![pb::ToolRegistration {
            tool_name: "ping".into(),
            description: "ping".into(),
            tool_schema: crate::json::json_to_struct(&serde_json::json!({"type": "object"})),
            ..Default::default()
        }],
        ttl: ttl.try_into().ok(),
        instance_id: String::new(),
    }
}

/// What one expiry measurement saw.
struct ExpiryRun {
    /// From each lease's deadline to its EXPIRED event at a watcher.
    lateness_us: Histogram<u64>,
    /// The server's own count of the round's lapses (`toolplane_lease_expiry_lateness_seconds`).
    at_server: ServerLateness,
    early: u64,
    wrongly_expired: u64,
    never_expired: u64,
}

async fn expiry_run(
    endpoint: &str,
    metrics: &str,
    round: usize,
    services: usize,
) -> Result<ExpiryRun, String> {
    let mut client = DiscoveryServiceClient::new(channel(endpoint).await?);
    let at_start = ServerLateness::scrape(metrics).await?;
    let mut stream = client
        .watch_services(pb::WatchServicesRequest {
            meta: meta(),
            service_name: String::new(),
        })
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    loop {
        let event = stream
            .message()
            .await
            .map_err(|s| s.to_string())?
            .and_then(|m| m.event)
            .ok_or("watch ended")?;
        if event.r#type == pb::ServiceEventType::Synced as i32 {
            break;
        }
    }
    let expired: Arc<Mutex<Vec<(String, SystemTime)>>> = Arc::default();
    let sink = Arc::clone(&expired);
    let watcher = tokio::spawn(async move {
        while let Ok(Some(message)) = stream.message().await {
            if let Some(event) = message
                .event
                .filter(|e| e.r#type == pb::ServiceEventType::Expired as i32)
            {
                sink.lock()
                    .await
                    .push((event.service_name, SystemTime::now()));
            }
        }
    });
    let mut leases = HashMap::new();
    for index in 0..services {
        let name = format!("expiry-{round}-{index}");
        let answer = client
            .register_service(pb::RegisterServiceRequest {
                meta: meta(),
                registration: Some(small_registration(name.clone(), EXPIRY_TTL)),
            })
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        let expires_at = answer
            .expires_at
            .and_then(|t| SystemTime::try_from(t).ok())
            .ok_or("no expires_at")?;
        leases.insert(name, (answer.lease_id, expires_at, index % 10 == 0));
    }
    // The (service, lease) of each lease kept alive.
    let heartbeated = || {
        leases
            .iter()
            .filter(|(_, (_, _, abandoned))| !abandoned)
            .map(|(name, (lease, _, _))| (name.clone(), lease.clone()))
    };
    let window_end = Instant::now() + EXPIRY_TTL * 2 + Duration::from_millis(500);
    while Instant::now() < window_end {
        tokio::time::sleep(EXPIRY_TTL / 4).await;
        let beats = heartbeated().map(|(service_name, lease_id)| {
            let mut client = client.clone();
            let request = pb::HeartbeatRequest {
                meta: meta(),
                service_name,
                lease_id,
            };
            async move { client.heartbeat(request).await }
        });
        join_all(beats).await;
    }
    watcher.abort();
    // The heartbeated leases go now, so that they do not lapse during the next round.
    let goodbyes = heartbeated().map(|(service_name, lease_id)| {
        let mut client = client.clone();
        let request = pb::DeregisterServiceRequest {
            meta: meta(),
            service_name,
            lease_id,
        };
        async move { client.deregister_service(request).await }
    });
    for goodbye in join_all(goodbyes).await {
        goodbye.map_err(|s| format!("DeregisterService: {s}"))?;
    }
    let at_server = ServerLateness::scrape(metrics).await?.since(&at_start);
    let seen = expired.lock().await.clone();
    let mut run = ExpiryRun {
        lateness_us: Histogram::new(3).map_err(|e| e.to_string())?,
        at_server,
        early: 0,
        wrongly_expired: 0,
        never_expired: 0,
    };
    for (name, at) in &seen {
        match leases.get(name) {
            Some((_, expires_at, true)) => match at.duration_since(*expires_at) {
                Ok(late) => {
                    let _ = run
                        .lateness_us
                        .record(u64::try_from(late.as_micros()).unwrap_or(u64::MAX).max(1));
                }
                Err(_) => run.early += 1,
            },
            Some((_, _, false)) => run.wrongly_expired += 1,
            None => {}
        }
    }
    let abandoned = leases
        .values()
        .filter(|(_, _, abandoned)| *abandoned)
        .count() as u64;
    run.never_expired = abandoned.saturating_sub(run.lateness_us.len() + run.early);
    Ok(run)
}

/// Runs scenario 3.
pub(super) async fn churn(bench: &Bench) -> Result<Vec<Row>, String> {
    // Metrics on, for the server's own count of expiry lateness (it also counts each call, a
    // few atomic increments: BENCHMARKS.md item 24).
    let metrics = format!("127.0.0.1:{}", free_port().map_err(|e| e.to_string())?);
    let toolplane = bench
        .start_toolplane(&[("TOOLPLANE_METRICS_LISTEN", &metrics)])
        .await?;
    let endpoint = toolplane.endpoint();
    let client = DiscoveryServiceClient::new(channel(&endpoint).await?);
    let (mut registrations, mut heartbeats) = (Vec::new(), Vec::new());
    let counter = Arc::new(AtomicU64::new(0));
    let mut leases = Vec::new();
    for index in 0..100 {
        let name = format!("beat-{index}");
        let answer = client
            .clone()
            .register_service(pb::RegisterServiceRequest {
                meta: meta(),
                registration: Some(small_registration(name.clone(), Duration::from_secs(3600))),
            })
            .await
            .map_err(|s| s.to_string())?;
        leases.push((name, answer.into_inner().lease_id));
    }
    let leases = Arc::new(leases);
    for _ in 0..bench.sizes.repetitions {
        let (registrar, counter) = (client.clone(), Arc::clone(&counter));
        let measured = closed_loop(CHURN_CONCURRENCY, bench.sizes.measure_for, move |_| {
            let mut client = registrar.clone();
            let name = format!("churn-{}", counter.fetch_add(1, Ordering::Relaxed));
            async move {
                client
                    .register_service(pb::RegisterServiceRequest {
                        meta: meta(),
                        registration: Some(small_registration(name, Duration::from_secs(600))),
                    })
                    .await
                    .map(drop)
            }
        })
        .await
        .all_succeeded("RegisterService")?;
        registrations.push(measured.rps());
        let (beater, leases) = (client.clone(), Arc::clone(&leases));
        let measured = closed_loop(CHURN_CONCURRENCY, bench.sizes.measure_for, move |worker| {
            let mut client = beater.clone();
            let (name, lease) = leases[worker % leases.len()].clone();
            async move {
                client
                    .heartbeat(pb::HeartbeatRequest {
                        meta: meta(),
                        service_name: name,
                        lease_id: lease,
                    })
                    .await
                    .map(drop)
            }
        })
        .await
        .all_succeeded("Heartbeat")?;
        heartbeats.push(measured.rps());
    }
    let mut rows = vec![
        Row::single(
            "3 churn",
            "registrations (1 tool each)",
            "req/s",
            registrations,
        ),
        Row::single("3 churn", "heartbeats", "req/s", heartbeats),
    ];
    let (mut late_max, mut late_p99, mut early, mut wrong, mut never) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut server_p99, mut server_max) = (Vec::new(), Vec::new());
    for round in 0..bench.sizes.repetitions {
        let run = expiry_run(&endpoint, &metrics, round, bench.sizes.expiry_services).await?;
        late_max.push(run.lateness_us.max() as f64 / 1000.0);
        late_p99.push(run.lateness_us.value_at_quantile(0.99) as f64 / 1000.0);
        server_p99.extend(run.at_server.bound_ms(0.99));
        server_max.extend(run.at_server.bound_ms(1.0));
        early.push(run.early as f64);
        wrong.push(run.wrongly_expired as f64);
        never.push(run.never_expired as f64);
    }
    let label = format!(
        "{} leases, 10% abandoned, ttl {}s",
        bench.sizes.expiry_services,
        EXPIRY_TTL.as_secs()
    );
    rows.push(
        Row::single(
            "3 expiry",
            &format!("expiry lateness max ({label})"),
            "ms",
            late_max,
        )
        .target("<= 1000 ms", |t, _| t <= 1000.0),
    );
    rows.push(Row::single(
        "3 expiry",
        "expiry lateness p99",
        "ms",
        late_p99,
    ));
    rows.push(Row::single(
        "3 expiry",
        "at the server: lateness p99 (its metric's bucket, upper bound)",
        "ms",
        server_p99,
    ));
    rows.push(Row::single(
        "3 expiry",
        "at the server: lateness max (its metric's bucket, upper bound)",
        "ms",
        server_max,
    ));
    rows.push(
        Row::single(
            "3 expiry",
            "leases expired before their deadline",
            "count",
            early,
        )
        .target("0", |t, _| t == 0.0),
    );
    rows.push(
        Row::single(
            "3 expiry",
            "heartbeated leases that expired",
            "count",
            wrong,
        )
        .target("0", |t, _| t == 0.0),
    );
    rows.push(
        Row::single(
            "3 expiry",
            "abandoned leases not yet expired in the window",
            "count",
            never,
        )
        .target("0", |t, _| t == 0.0),
    );
    Ok(rows)
}

/// Runs scenario 5.
pub(super) async fn startup_and_memory(bench: &Bench) -> Result<Vec<Row>, String> {
    let mut cold = Vec::new();
    for _ in 0..bench.sizes.repetitions.max(3) {
        let addr = format!("127.0.0.1:{}", free_port().map_err(|e| e.to_string())?);
        let tls_env = bench.toolplane_tls_env();
        let env: Vec<(&str, &str)> = tls_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let child = ChildProcess::spawn(
            &bench.binaries.toolplane,
            &["serve", "--listen", &addr],
            &env,
            &addr,
        )?
        .with_tls(bench.tls.is_some());
        let serving_at = wait_serving(&child.endpoint(), Duration::from_secs(30)).await?;
        cold.push(serving_at.duration_since(child.spawned_at).as_secs_f64() * 1000.0);
    }
    let mut rows = vec![
        Row::single(
            "5 startup",
            "cold start to SERVING (spawn to first SERVING answer)",
            "ms",
            cold,
        )
        .target("<= 100 ms", |t, _| t <= 100.0),
    ];

    let toolplane = bench.start_toolplane(&[]).await?;
    let mut client = DiscoveryServiceClient::new(channel(&toolplane.endpoint()).await?);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let empty = toolplane.resident_bytes();
    let mut registered = 0;
    let mut schema_text = 0;
    // (tools, resident growth, schema text) at each level.
    let mut levels: Vec<(usize, f64, usize)> = Vec::new();
    for level in bench.sizes.memory_tools.clone() {
        schema_text += register_tools(
            &mut client,
            &format!("memory-{level}"),
            level - registered,
            Some(1024),
        )
        .await?;
        registered = level;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let grown = toolplane.resident_bytes().saturating_sub(empty) as f64;
        rows.push(Row::single(
            "5 memory",
            &format!("resident growth at {registered} tools (1 KB schemas)"),
            "bytes",
            vec![grown],
        ));
        rows.push(Row::single(
            "5 memory",
            &format!("resident growth per tool at {registered} tools, beyond the schema text"),
            "bytes",
            vec![(grown - schema_text as f64) / registered as f64],
        ));
        levels.push((registered, grown, schema_text));
    }
    // The cost of each further tool: the growth between two levels over the tools added,
    // which leaves out what the process holds once whatever the tool count (allocator caches
    // warmed by the registration path, see BENCHMARKS.md). The target is judged from the first
    // level to the last: between two nearby levels, memory the allocator kept from the first
    // level's registrations can be reused and hide the growth.
    if levels.len() > 2 {
        rows.extend(
            levels
                .windows(2)
                .map(|pair| per_added_tool(pair[0], pair[1])),
        );
    }
    if let [first, .., last] = levels[..] {
        rows.push(per_added_tool(first, last).target("<= 8 KB", |t, _| t <= 8192.0));
    }
    rows.extend(search_index_memory(&toolplane, &mut client, registered).await?);
    Ok(rows)
}

/// The first SearchTools over `tools` registered tools builds every service's search index:
/// how long it took, and the resident memory the indexes took per tool.
async fn search_index_memory(
    toolplane: &ChildProcess,
    client: &mut DiscoveryServiceClient<tonic::transport::Channel>,
    tools: usize,
) -> Result<[Row; 2], String> {
    let before = toolplane.resident_bytes();
    let started = Instant::now();
    client
        .search_tools(pb::SearchToolsRequest {
            meta: meta(),
            query: "benchmark tool".into(),
            ..Default::default()
        })
        .await
        .map_err(|status| format!("the first search: {status}"))?;
    let took = started.elapsed().as_secs_f64() * 1000.0;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = toolplane.resident_bytes().saturating_sub(before) as f64;
    Ok([
        Row::single(
            "5 memory",
            &format!("first SearchTools at {tools} tools (builds every search index)"),
            "ms",
            vec![took],
        ),
        Row::single(
            "5 memory",
            &format!("resident growth per tool of the search indexes, at {tools} tools"),
            "bytes",
            vec![grown / tools.max(1) as f64],
        ),
    ])
}

/// Resident memory per tool added between two levels of (tools, resident growth, schema
/// text), less the added schema text.
fn per_added_tool(
    (tools, before, text_before): (usize, f64, usize),
    (registered, grown, text): (usize, f64, usize),
) -> Row {
    let added = (registered - tools) as f64;
    let text = (text - text_before) as f64;
    Row::single(
        "5 memory",
        &format!(
            "resident per added tool from {tools} to {registered} tools, beyond its schema text"
        ),
        "bytes",
        vec![(grown - before - text) / added],
    )
}
