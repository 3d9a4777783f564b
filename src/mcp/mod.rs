//! MCP (the Model Context Protocol): toolplane serves its registered tools to MCP clients.
//!
//! - [`http`]: the endpoint, MCP's Streamable HTTP transport at `/mcp` on `mcp_listen`.
//! - [`handler`]: `tools/list` over the caller's tenant's tools and `tools/call` through the
//!   invocation engine (validated, bounded and recorded as `InvokeTool` calls are).
//! - [`tools`]: how a registered tool is listed, and which tool a called name stands for.
//! - [`answer`]: a call's outcome as an MCP result, tool error or protocol error.
//! - [`list_changed`]: `notifications/tools/list_changed` when the tenant's tools change.

pub mod answer;
pub mod handler;
pub mod http;
pub mod list_changed;
pub mod tools;

pub use handler::McpTools;
pub use http::{MCP_PATH, McpEndpoint};
