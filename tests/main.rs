//! Every integration test, in one binary: each `tests/NAME.rs` is a module of it. One binary
//! links the dependency tree once, where a binary per file linked it 44 times, which took
//! most of the test script's time. Run one file's tests with
//! `cargo test --test integration NAME::`.

mod common;

mod agent;
mod agent_bounds;
mod agent_control;
mod agent_stream_backlog;
mod agents_kept;
mod bad_registrations;
mod bearer_tokens;
mod bench_harness;
mod cli;
mod cli_agent;
mod compression;
mod deploy;
mod descriptor_limit;
mod forwarded_certificates;
mod grpcurl;
mod instances;
mod invoke;
mod invoke_failures;
mod invoke_in_flight;
mod invoke_wire;
mod json_log;
mod large_inputs;
mod large_registrations;
mod listing;
mod long_answers;
mod mcp;
mod mcp_conformance;
mod mcp_gateway;
mod mcp_import;
mod mcp_import_approval;
mod mcp_import_oauth;
mod mcp_import_reload;
mod mcp_import_tls;
mod metrics;
mod model_failures;
mod openai;
mod polyglot;
mod polyglot_providers;
mod preflight;
mod provider_connections;
mod provider_error_reasons;
mod provider_tls;
mod rate_limit_reload;
mod record_file_reads;
mod records_and_restart;
mod registration_quotas;
mod registry_lifecycle;
mod seed_types;
mod service_size;
mod serving_tls;
mod span_export;
mod spans;
mod tenant_access;
mod tenant_access_reload;
mod tenant_isolation;
mod tool_annotations;
mod tool_search;
mod tool_taxonomy;
mod unique_items;
mod unread_log;
mod watch_and_health;
