//! toolplane: a gRPC control plane for AI tool services.
//!
//! Tool providers register the tools they offer under a lease kept alive by heartbeats;
//! orchestrators discover those tools, check health, run a pre-flight check, and invoke tools
//! through the control plane, which validates, bounds and records every call.
//!
//! Crate map:
//! - [`pb`]: generated protobuf and gRPC code (`toolplane.v1`), nothing else.
//! - [`envelope`]: the seed 000 envelope meta on every request and response.
//! - [`access`]: which tenants a caller may act for, by its client certificate's identity.
//! - [`json`]: `Struct`/`Value` <-> JSON, canonical JSON, sha256.
//! - [`registry`]: the domain core: leases, validation, schema compilation and the bounded validator cache, the store, watch.
//! - [`invoke`]: the invocation engine: rate limits, calls in flight, deadlines, retries,
//!   provider health, records.
//! - [`provider`]: the provider SDK (seed 001) and the example Structs tools (seed 004).
//! - [`grpc`]: thin adapters per gRPC service, the provider client, error mapping, assembly,
//!   and the per-RPC call counts.
//! - [`mcp`]: the MCP endpoint: the registered tools served to MCP clients over Streamable
//!   HTTP.
//! - [`metrics`]: the Prometheus metrics endpoint: the server's state, calls by gRPC method
//!   and code, the process's own numbers.
//! - [`cli`]: how the client commands print tables and JSON; `audit verify`.
//! - [`client`]: a typed client with pre-flight and a client-side discovery cache.
//! - [`config`]: defaults < `toolplane.toml` < `TOOLPLANE_*` environment.
//! - [`trace_context`]: the caller's W3C trace context, passed on to providers.
//! - [`log_budget`]: how much of the log one source of events may take (an MCP server,
//!   refused calls).
//! - [`http_answers`]: answers of the HTTP servers toolplane calls, read within a bound.
//! - [`otlp`]: where and how spans are exported (OTLP/gRPC or OTLP/HTTP, TLS).
//! - [`spans`]: the spans exported over OTLP when `otlp_endpoint` is set.
//! - [`fuzz_checks`]: checks of the readers of untrusted input, run by the fuzz targets in
//!   `fuzz/` and, on the inputs kept in `fuzz/seeds/`, by `cargo test`.

pub mod access;
pub mod agent;
pub mod bench;
pub mod cli;
pub mod client;
pub mod config;
pub mod config_duration;
pub mod envelope;
pub mod fuzz_checks;
pub mod grpc;
pub mod http_answers;
pub mod invoke;
pub mod json;
pub mod log_budget;
pub mod mcp;
pub mod metrics;
pub mod otlp;
pub mod pb;
pub mod provider;
pub mod registry;
pub mod shown;
pub mod spans;
#[cfg(test)]
mod test_headers;
#[cfg(test)]
mod test_logs;
pub mod trace_context;
