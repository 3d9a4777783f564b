//! Scenario 4: WatchServices fan-out: change-to-delivery latency across N watchers, and the
//! server's resident memory per watcher; then changes of a service with tools (schemas of 1-4
//! KB) across fewer watchers.
//!
//! The watchers read only each event's type and service name (the rest of each message is
//! skipped unread, [`EventHead`]), so what is timed is the server's fan-out, not the harness
//! decoding schemas.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Barrier;

use tonic::transport::Channel;

use super::report::Row;
use super::{Bench, channels, fixtures, meta};
use crate::json::json_to_struct;
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

/// What a watcher reads of a `WatchServicesResponse`: its event's type and service name.
#[derive(Clone, PartialEq, prost::Message)]
struct WatchedHead {
    #[prost(message, optional, tag = "2")]
    event: Option<EventHead>,
}

/// A `ServiceEvent`'s type and service name; the service and tool changes are skipped.
#[derive(Clone, PartialEq, prost::Message)]
struct EventHead {
    #[prost(int32, tag = "1")]
    r#type: i32,
    #[prost(string, tag = "3")]
    service_name: String,
}

/// Opens a watch of every service of the bench's tenant, read as [`WatchedHead`]s.
async fn watch_heads(channel: Channel) -> Result<tonic::Streaming<WatchedHead>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
    let codec = tonic_prost::ProstCodec::<pb::WatchServicesRequest, WatchedHead>::default();
    let path = http::uri::PathAndQuery::from_static(crate::grpc::discovery_wire::WATCH_SERVICES);
    let request = tonic::Request::new(pb::WatchServicesRequest {
        meta: meta(),
        service_name: String::new(),
    });
    Ok(grpc
        .server_streaming(request, path, codec)
        .await?
        .into_inner())
}

/// The registrations of the timed changes, built before the timing starts: services
/// `fanout-R-N-C`, each with `tools` tools whose schemas are 1-4 KB.
fn changes(round: usize, count: usize, tools: usize) -> Vec<pb::ServiceRegistration> {
    (0..CHANGES)
        .map(|change| pb::ServiceRegistration {
            service_name: format!("fanout-{round}-{count}-{change}"),
            service_version: "1.0.0".into(),
            tools: (0..tools)
                .map(|index| pb::ToolRegistration {
                    tool_name: format!("tool_{index:03}"),
                    description: format!("benchmark tool {index}"),
                    tool_schema: json_to_struct(&fixtures::tool_schema(
                        index,
                        1024 + (index * 37) % 3072,
                    )),
                    ..Default::default()
                })
                .collect(),
            ttl: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            ..Default::default()
        })
        .collect()
}

/// Opens `count` watchers, waits for all to be synced, times `CHANGES` registrations (each of
/// a service with `tools` tools) reaching every one of them; returns (latencies, server bytes
/// per watcher).
async fn fan_out(
    endpoint: &str,
    server: &super::procs::ChildProcess,
    round: usize,
    (count, tools): (usize, usize),
) -> Result<(Histogram<u64>, f64), String> {
    let connections = channels(endpoint, count.div_ceil(STREAMS_PER_CONNECTION)).await?;
    let registrations = changes(round, count, tools);
    let before = server.resident_bytes();
    let synced = Arc::new(Barrier::new(count + 1));
    let sent_at = Arc::new(SentTimes::new());
    let mut watchers = Vec::with_capacity(count);
    for index in 0..count {
        let channel = connections[index / STREAMS_PER_CONNECTION].clone();
        let (synced, sent_at) = (Arc::clone(&synced), Arc::clone(&sent_at));
        // Each watcher keeps its own few samples (a histogram each would allocate and zero
        // 10,000 sets of buckets while the deliveries are being timed).
        let mut latencies = Vec::with_capacity(CHANGES);
        watchers.push(tokio::spawn(async move {
            let Ok(mut stream) = watch_heads(channel).await else {
                synced.wait().await;
                return latencies;
            };
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
    for (change, registration) in registrations.into_iter().enumerate() {
        sent_at.mark(change);
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
    let mut cases: Vec<(usize, usize)> = bench
        .sizes
        .watchers
        .iter()
        .map(|&count| (count, 0))
        .collect();
    cases.push(bench.sizes.tool_changes);
    for (count, tools) in cases {
        let (mut p50, mut p99, mut memory, mut delivered) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..bench.sizes.repetitions {
            let toolplane = bench.start_toolplane(&[]).await?;
            let (latencies, per_watcher) =
                fan_out(&toolplane.endpoint(), &toolplane, round, (count, tools)).await?;
            p50.push(latencies.value_at_quantile(0.5) as f64 / 1000.0);
            p99.push(latencies.value_at_quantile(0.99) as f64 / 1000.0);
            memory.push(per_watcher);
            delivered.push(latencies.len() as f64 / (count * CHANGES) as f64 * 100.0);
        }
        let label = match tools {
            0 => format!("{count} watchers"),
            _ => format!("{count} watchers, changes of {tools} tools"),
        };
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
        rows.push(if count >= 10_000 && tools == 0 {
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
        if tools == 0 {
            rows.push(Row::single(
                "4 watch",
                &format!("{label}: server resident memory per watcher"),
                "bytes",
                memory,
            ));
        }
    }
    Ok(rows)
}
