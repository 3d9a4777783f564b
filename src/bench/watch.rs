//! Scenario 4: WatchServices fan-out: change-to-delivery latency across N watchers, and the
//! server's resident memory per watcher.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Barrier;

use super::report::Row;
use super::{Bench, channels, meta};
use crate::pb;
use crate::pb::discovery_service_client::DiscoveryServiceClient;

/// Watch streams per connection (below the HTTP/2 server's limit on concurrent streams).
const STREAMS_PER_CONNECTION: usize = 100;
/// Changes whose delivery is timed.
const CHANGES: usize = 20;

/// When each timed change was sent, readable by every watcher without a lock (a shared lock
/// would line 10,000 receivers up behind each other and time the harness, not the server).
#[derive(Debug)]
struct SentTimes {
    base: Instant,
    /// Nanoseconds after `base` at which change N was sent; 0 until it is.
    at: Vec<AtomicU64>,
}

impl SentTimes {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            at: (0..CHANGES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn mark(&self, change: usize) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.at[change].store(nanos.max(1), Ordering::Release);
    }

    /// Time since the change named `service` (`fanout-R-N-C`) was sent, if it is a timed one.
    fn since(&self, service: &str) -> Option<Duration> {
        let change: usize = service.rsplit('-').next()?.parse().ok()?;
        let at = self.at.get(change)?.load(Ordering::Acquire);
        (at != 0).then(|| self.base.elapsed().saturating_sub(Duration::from_nanos(at)))
    }
}

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
    let sent_at = Arc::new(SentTimes::new());
    let mut watchers = Vec::with_capacity(count);
    for index in 0..count {
        let mut client =
            DiscoveryServiceClient::new(connections[index / STREAMS_PER_CONNECTION].clone());
        let (synced, sent_at) = (Arc::clone(&synced), Arc::clone(&sent_at));
        // Each watcher keeps its own few samples (a histogram each would allocate and zero
        // 10,000 sets of buckets while the deliveries are being timed).
        let mut latencies = Vec::with_capacity(CHANGES);
        watchers.push(tokio::spawn(async move {
            let Ok(response) = client
                .watch_services(pb::WatchServicesRequest {
                    meta: meta(),
                    service_name: String::new(),
                })
                .await
            else {
                synced.wait().await;
                return latencies;
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
                    && let Some(elapsed) = sent_at.since(&event.service_name)
                {
                    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
                    latencies.push(micros.max(1));
                    seen += 1;
                    if seen == CHANGES {
                        break;
                    }
                }
            }
            latencies
        }));
    }
    synced.wait().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let per_watcher = server.resident_bytes().saturating_sub(before) as f64 / count as f64;
    let mut client = DiscoveryServiceClient::new(connections[0].clone());
    for change in 0..CHANGES {
        let name = format!("fanout-{round}-{count}-{change}");
        sent_at.mark(change);
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
    let mut latencies = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for watcher in watchers {
        let left = give_up.saturating_duration_since(Instant::now());
        if let Ok(Ok(own)) = tokio::time::timeout(left, watcher).await {
            for micros in own {
                latencies.record(micros).map_err(|e| e.to_string())?;
            }
        }
    }
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
