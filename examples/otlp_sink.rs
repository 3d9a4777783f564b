//! A minimal OTLP trace collector that counts the spans it receives and prints the count
//! every second: something for toolplane's `otlp_endpoint` to export to while measuring what
//! exporting spans costs (BENCHMARKS.md), without installing a collector. It takes OTLP/gRPC
//! on its first address and OTLP/HTTP (protobuf bodies POSTed to `/v1/traces`) on its second.
//!
//! ```text
//! cargo run --release --example otlp_sink -- 127.0.0.1:4317 127.0.0.1:4318
//! TOOLPLANE_OTLP_ENDPOINT=http://127.0.0.1:4317 target/release/toolplane serve
//! TOOLPLANE_OTLP_ENDPOINT=http://127.0.0.1:4318 TOOLPLANE_OTLP_PROTOCOL=http/protobuf \
//!     target/release/toolplane serve
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
use prost::Message;

/// An OTLP/HTTP answer: its content type and protobuf body.
type ProtobufAnswer = ([(axum::http::HeaderName, &'static str); 1], Vec<u8>);

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
        self.count(&request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Sink {
    /// Adds the spans in `export` to the count.
    fn count(&self, export: &ExportTraceServiceRequest) {
        let count: usize = export
            .resource_spans
            .iter()
            .flat_map(|resource| &resource.scope_spans)
            .map(|scope| scope.spans.len())
            .sum();
        self.spans.fetch_add(count as u64, Ordering::Relaxed);
    }

    /// Takes one OTLP/HTTP export: a protobuf `ExportTraceServiceRequest` body.
    async fn take_http_export(
        axum::extract::State(sink): axum::extract::State<Sink>,
        body: axum::body::Bytes,
    ) -> Result<ProtobufAnswer, axum::http::StatusCode> {
        let export = ExportTraceServiceRequest::decode(body)
            .map_err(|_| axum::http::StatusCode::BAD_REQUEST)?;
        sink.count(&export);
        let content_type = (axum::http::header::CONTENT_TYPE, "application/x-protobuf");
        Ok((
            [content_type],
            ExportTraceServiceResponse::default().encode_to_vec(),
        ))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address_argument = |index: usize, default: &str| {
        std::env::args()
            .nth(index)
            .unwrap_or_else(|| default.to_owned())
    };
    let address = address_argument(1, "127.0.0.1:4317").parse()?;
    let http_address = address_argument(2, "127.0.0.1:4318");
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
    let http_listener = tokio::net::TcpListener::bind(&http_address).await?;
    let http_routes = axum::Router::new()
        .route("/v1/traces", axum::routing::post(Sink::take_http_export))
        .with_state(sink.clone());
    tokio::spawn(async move { axum::serve(http_listener, http_routes).await });
    println!("OTLP/gRPC trace sink on {address}, OTLP/HTTP on {http_address}/v1/traces");
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink))
        .serve(address)
        .await?;
    Ok(())
}
