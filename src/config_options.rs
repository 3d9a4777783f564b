//! What a loaded configuration gives the server: its TLS settings and [`ServerOptions`].

use std::path::PathBuf;

use super::ServerConfig;
use crate::agent::openai::OpenAiConfig;
use crate::grpc::ServerOptions;
use crate::grpc::outgoing_tls::{ClientIdentityFiles, OutgoingTlsFiles};
use crate::grpc::server_tls::ServerTlsFiles;
use crate::invoke::limits::{Bucket, RateLimitConfig};
use crate::otlp::OtlpExport;
use crate::registry::validate::RegistrationLimits;

impl ServerConfig {
    /// The call limits these settings give.
    pub fn rate_limit_config(&self) -> RateLimitConfig {
        RateLimitConfig {
            per_service: Some(Bucket {
                per_second: self.rate_limit_per_second,
                burst: self.rate_limit_burst,
            }),
            per_tool: self
                .tool_rate_limits
                .iter()
                .map(|(key, bucket)| (key.clone(), *bucket))
                .collect(),
            max_in_flight_per_service: self.max_in_flight_per_service,
        }
    }

    /// The TLS served on the gRPC port, by this configuration; `None` for plain text.
    pub fn served_tls(&self) -> Option<ServerTlsFiles> {
        (!self.tls_cert_file.is_empty()).then(|| ServerTlsFiles {
            cert_file: PathBuf::from(&self.tls_cert_file),
            key_file: PathBuf::from(&self.tls_key_file),
            client_ca_file: Some(PathBuf::from(&self.tls_client_ca_file))
                .filter(|_| !self.tls_client_ca_file.is_empty()),
        })
    }

    /// How toolplane connects to `https://` providers, by this configuration.
    pub fn provider_tls(&self) -> OutgoingTlsFiles {
        outgoing_tls(
            &self.provider_ca_file,
            &self.provider_client_cert_file,
            &self.provider_client_key_file,
        )
    }

    /// A warning for each `TOOLPLANE_*` variable set that no setting reads (nor another of
    /// toolplane's programs, nor the configuration by name): a misspelt setting, most likely,
    /// which would otherwise be ignored unnoticed.
    pub fn unread_variables(&self) -> &[String] {
        &self.unread_variables
    }

    /// The server options this configuration describes.
    pub fn server_options(&self) -> ServerOptions {
        let reloaded = self.reloaded_parts();
        ServerOptions {
            otlp: (!self.otlp_endpoint.is_empty()).then(|| OtlpExport {
                endpoint: self.otlp_endpoint.clone(),
                protocol: self.otlp_protocol,
                tls: outgoing_tls(
                    &self.otlp_ca_file,
                    &self.otlp_client_cert_file,
                    &self.otlp_client_key_file,
                ),
            }),
            provider_tls: self.provider_tls(),
            tls: self.served_tls(),
            mcp: self.mcp_endpoint(),
            mcp_imports: self.checked_mcp_imports.clone(),
            tenant_access: self.checked_tenant_access.clone(),
            tenant_access_source: reloaded.tenant_access,
            mcp_imports_source: reloaded.mcp_imports,
            rate_limits_source: reloaded.rate_limits,
            tls_reload_interval: self.tls_reload_interval,
            response_compression: self.response_compression,
            limits: RegistrationLimits {
                default_ttl: self.default_ttl,
                min_ttl: self.min_ttl,
                max_ttl: self.max_ttl,
                max_tools: self.max_tools_per_service,
                max_description_bytes: self.max_description_bytes,
                max_schema_bytes: self.max_schema_bytes,
                max_schema_depth: self.max_schema_depth,
                max_services_per_tenant: self.max_services_per_tenant,
                max_tools_per_tenant: self.max_tools_per_tenant,
                max_tool_bytes_per_tenant: self.max_tool_bytes_per_tenant,
                max_instances_per_service: self.max_instances_per_service,
            },
            event_buffer: self.watch_event_buffer,
            event_buffer_bytes: self.watch_event_buffer_bytes,
            gone_services_remembered: self.gone_services_remembered,
            validator_cache_size: self.validator_cache_size,
            drain_grace: self.drain_grace,
            records_path: Some(PathBuf::from(&self.records_path))
                .filter(|path| !path.as_os_str().is_empty()),
            records_in_memory: self.records_in_memory,
            records_rotate_bytes: self.records_rotate_bytes,
            rate_limits: self.rate_limit_config(),
            max_invoke_timeout: self.max_invoke_timeout,
            provider_health_interval: self.provider_health_interval,
            keepalive_interval: self.keepalive_interval,
            max_concurrent_streams: self.max_concurrent_streams,
            max_connections: self.max_connections,
            keepalive_timeout: self.keepalive_timeout,
            call_scheduling: self.call_scheduling,
            model: (!self.model_base_url.is_empty()).then(|| OpenAiConfig {
                base_url: self.model_base_url.clone(),
                model: self.model_name.clone(),
                api_key: Some(self.model_api_key.clone()).filter(|key| !key.is_empty()),
                timeout: self.model_timeout,
                max_retries: self.model_max_retries,
                max_tokens_field: self.model_max_tokens_field,
            }),
            max_conversation_messages: self.max_conversation_messages,
            max_conversation_bytes: self.max_conversation_bytes,
            max_agents_per_tenant: self.max_agents_per_tenant,
            max_concurrent_tool_calls: self.max_concurrent_tool_calls,
            agents_path: Some(PathBuf::from(&self.agents_path))
                .filter(|path| !path.as_os_str().is_empty()),
        }
    }
}

/// TLS files for outgoing connections from three settings' values (empty: not named).
fn outgoing_tls(ca_file: &str, cert_file: &str, key_file: &str) -> OutgoingTlsFiles {
    let path = |value: &str| Some(PathBuf::from(value)).filter(|_| !value.is_empty());
    OutgoingTlsFiles {
        ca_file: path(ca_file),
        client_identity: path(cert_file)
            .zip(path(key_file))
            .map(|(cert_file, key_file)| ClientIdentityFiles {
                cert_file,
                key_file,
            }),
    }
}
