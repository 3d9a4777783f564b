//! The gRPC layer: one thin adapter per service over the domain core, the one mapping from
//! domain errors to `tonic::Status`, and server assembly.

mod accept;
pub mod accepting;
mod access_reload;
pub mod agent;
mod agent_convert;
mod answer;
pub mod call_scheduling;
pub mod coalesce;
mod config_watch;
pub mod connections;
pub mod convert;
#[cfg(test)]
#[path = "damage_tests.rs"]
mod damage;
pub mod deadline;
pub mod discovery;
pub mod discovery_wire;
pub mod hangups;
pub mod health;
mod import_reload;
pub mod invoke;
pub mod invoke_wire;
pub mod opening_deadline;
pub mod outgoing_tls;
pub mod page_bytes;
pub mod panics;
pub mod provider_client;
pub mod provider_tls;
pub mod raw_message;
pub mod record_wire;
pub mod registration_size;
pub mod reload_stats;
pub mod response_compression;
pub mod restated;
pub mod rpc_metering;
pub mod rpc_stats;
pub mod server;
mod server_options;
pub mod server_tls;
pub mod serving;
pub mod status;
pub mod std_health;
pub mod stream_errors;
pub mod tls_files;
pub mod tls_reload;
pub mod trace_headers;
mod unary_calls;
pub mod unary_client;
mod watch;
pub mod wire_server;

pub use server::{ServeError, ServerOptions, SideListeners, serve, serve_with};
pub use serving::shutdown_signal;
