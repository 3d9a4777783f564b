//! A minimal OTLP/gRPC trace collector that counts the spans it receives and prints the count
//! every second: something for toolplane's `otlp_endpoint` to export to while measuring what
//! exporting spans costs (BENCHMARKS.md), without installing a collector.
//!
//! ```text
//! cargo run --release --example otlp_sink -- 127.0.0.1:4317
//! TOOLPLANE_OTLP_ENDPOINT=http://127.0.0.1:4317 target/release/toolplane serve
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// Counts the spans exported to it.
#[derive(Debug, Default, Clone)]
struct Sink {
    spans: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let count: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|resource| &resource.scope_spans)
            .map(|scope| scope.spans.len())
            .sum();
        self.spans.fetch_add(count as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4317".to_owned())
        .parse()?;
    let sink = Sink::default();
    let spans = Arc::clone(&sink.spans);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        let mut last = 0;
        loop {
            ticks.tick().await;
            let now = spans.load(Ordering::Relaxed);
            if now != last {
                println!("spans received: {now} (+{})", now - last);
                last = now;
            }
        }
    });
    println!("OTLP/gRPC trace sink on {address}");
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink))
        .serve(address)
        .await?;
    Ok(())
}
