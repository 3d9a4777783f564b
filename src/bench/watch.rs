//! Scenario 4: WatchServices fan-out: change-to-delivery latency across N watchers, and the
//! server's resident memory per watcher.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::{Barrier, Mutex};

use super::report::Row;
use super::{Bench, channels, meta};
use crate::pb;
use crate::pb::discovery_service_client::DiscoveryServiceClient;

/// Watch streams per connection (below the HTTP/2 server's limit on concurrent streams).
const STREAMS_PER_CONNECTION: usize = 100;
/// Changes whose delivery is timed.
const CHANGES: usize = 20;

type SentAt = Arc<Mutex<HashMap<String, Instant>>>;

/// Opens `count` watchers, waits for all to be synced, times `CHANGES` registrations reaching
/// every one of them; returns (latencies, server bytes per watcher).
async fn fan_out(
    endpoint: &str,
    server: &super::procs::ChildProcess,
    round: usize,
    count: usize,
) -> Result<(Histogram<u64>, f64), String> {
    let connections = channels(endpoint, count.div_ceil(STREAMS_PER_CONNECTION)).await?;
    let before = server.resident_bytes();
    let synced = Arc::new(Barrier::new(count + 1));
    let sent_at: SentAt = Arc::default();
    let latencies = Arc::new(Mutex::new(
        Histogram::<u64>::new(3).map_err(|e| e.to_string())?,
    ));
    let mut watchers = Vec::with_capacity(count);
    for index in 0..count {
        let mut client =
            DiscoveryServiceClient::new(connections[index / STREAMS_PER_CONNECTION].clone());
        let (synced, sent_at, latencies) = (
            Arc::clone(&synced),
            Arc::clone(&sent_at),
            Arc::clone(&latencies),
        );
        watchers.push(tokio::spawn(async move {
            let Ok(response) = client
                .watch_services(pb::WatchServicesRequest {
                    meta: meta(),
                    service_name: String::new(),
                })
                .await
            else {
                synced.wait().await;
                return;
            };
            let mut stream = response.into_inner();
            let mut seen = 0;
            let mut waiting = true;
            while let Ok(Some(message)) = stream.message().await {
                let Some(event) = message.event else { continue };
                if waiting && event.r#type == pb::ServiceEventType::Synced as i32 {
                    waiting = false;
                    synced.wait().await;
                    continue;
                }
                if event.r#type == pb::ServiceEventType::Added as i32
                    && let Some(sent) = sent_at.lock().await.get(&event.service_name).copied()
                {
                    let _ = latencies.lock().await.record(
                        u64::try_from(sent.elapsed().as_micros())
                            .unwrap_or(u64::MAX)
                            .max(1),
                    );
                    seen += 1;
                    if seen == CHANGES {
                        return;
                    }
                }
            }
        }));
    }
    synced.wait().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let per_watcher = server.resident_bytes().saturating_sub(before) as f64 / count as f64;
    let mut client = DiscoveryServiceClient::new(connections[0].clone());
    for change in 0..CHANGES {
        let name = format!("fanout-{round}-{count}-{change}");
        sent_at.lock().await.insert(name.clone(), Instant::now());
        let registration = pb::ServiceRegistration {
            service_name: name,
            service_version: "1.0.0".into(),
            ttl: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            ..Default::default()
        };
        client
            .register_service(pb::RegisterServiceRequest {
                meta: meta(),
                registration: Some(registration),
            })
            .await
            .map_err(|s| s.to_string())?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let give_up = Instant::now() + Duration::from_secs(60);
    for watcher in watchers {
        let _ =
            tokio::time::timeout(give_up.saturating_duration_since(Instant::now()), watcher).await;
    }
    let latencies = latencies.lock().await.clone();
    Ok((latencies, per_watcher))
}

/// Runs scenario 4.
pub(super) async fn run(bench: &Bench) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for count in bench.sizes.watchers.clone() {
        let (mut p50, mut p99, mut memory, mut delivered) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..bench.sizes.repetitions {
            let toolplane = bench.start_toolplane(&[]).await?;
            let (latencies, per_watcher) =
                fan_out(&toolplane.endpoint(), &toolplane, round, count).await?;
            p50.push(latencies.value_at_quantile(0.5) as f64 / 1000.0);
            p99.push(latencies.value_at_quantile(0.99) as f64 / 1000.0);
            memory.push(per_watcher);
            delivered.push(latencies.len() as f64 / (count * CHANGES) as f64 * 100.0);
        }
        let label = format!("{count} watchers");
        rows.push(Row::single(
            "4 watch",
            &format!("{label}: change-to-delivery p50"),
            "ms",
            p50,
        ));
        let row = Row::single(
            "4 watch",
            &format!("{label}: change-to-delivery p99"),
            "ms",
            p99,
        );
        rows.push(if count >= 10_000 {
            row.target("<= 100 ms at 10,000 watchers", |t, _| t <= 100.0)
        } else {
            row
        });
        rows.push(
            Row::single(
                "4 watch",
                &format!("{label}: changes delivered"),
                "%",
                delivered,
            )
            .target("100 %", |t, _| t >= 100.0),
        );
        rows.push(Row::single(
            "4 watch",
            &format!("{label}: server resident memory per watcher"),
            "bytes",
            memory,
        ));
    }
    Ok(rows)
}
