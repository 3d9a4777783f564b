//! The provider SDK (seed 001, Rust side): describe tools, register them with handlers in a
//! [`ToolRegistry`], freeze it, and serve it with a [`ProviderServer`], which implements
//! ToolProviderService and keeps the service registered with the control plane.
//!
//! ```no_run
//! use serde_json::json;
//! use toolplane::provider::{ProviderConfig, ProviderServer, ToolDescriptor, ToolOutput, ToolRegistry, handler};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let tools = ToolRegistry::new()
//!     .register(
//!         ToolDescriptor::new("echo", "Returns its input", json!({"type": "object"})),
//!         handler(|call| async move { Ok(ToolOutput::new(call.input)) }),
//!     )?
//!     .freeze();
//! let config = ProviderConfig::new("echo-provider", "1.0.0", "http://127.0.0.1:50051");
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! ProviderServer::new(tools, config).serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

mod control_plane;
mod lease;
mod server;
pub mod structs;
mod tools;

pub use server::{
    DEFAULT_PROVIDER_TTL, PROVIDER_ERROR_DOMAIN, PROVIDER_TLS_SETTINGS, ProviderConfig,
    ProviderError, ProviderHealth, ProviderServer, tool_error_status,
};
pub use tools::{
    RegisteredTool, RegisteredTools, RegistrationError, ToolContext, ToolDescriptor, ToolError,
    ToolFuture, ToolHandler, ToolInvocation, ToolOutput, ToolRegistry, handler,
};
