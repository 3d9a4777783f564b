//! toolplane: a gRPC control plane for AI tool services.
//!
//! Tool providers register the tools they offer under a lease kept alive by heartbeats;
//! orchestrators discover those tools, check health and run a pre-flight check.
//!
//! Crate map:
//! - [`pb`]: generated protobuf and gRPC code (`toolplane.v1`), nothing else.
//! - [`envelope`]: the seed 000 envelope meta on every request and response.
//! - [`json`]: `Struct`/`Value` <-> JSON, canonical JSON, sha256.
//! - [`registry`]: the domain core: leases, validation, schema compilation, the store, watch.
//! - [`grpc`]: thin adapters per gRPC service, error mapping, server assembly.
//! - [`cli`]: how the client commands print tables and JSON.
//! - [`client`]: a typed client with pre-flight and a client-side discovery cache.
//! - [`config`]: defaults < `toolplane.toml` < `TOOLPLANE_*` environment.

pub mod cli;
pub mod client;
pub mod config;
pub mod envelope;
pub mod grpc;
pub mod invoke;
pub mod json;
pub mod pb;
pub mod provider;
pub mod registry;
