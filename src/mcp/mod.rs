//! MCP (the Model Context Protocol): toolplane serves its registered tools to MCP clients, and
//! imports the tools of MCP servers as services.
//!
//! - [`http`]: the endpoint, MCP's Streamable HTTP transport at `/mcp` on `mcp_listen`.
//! - [`handler`]: `tools/list` over the caller's tenant's tools and `tools/call` through the
//!   invocation engine (validated, bounded and recorded as `InvokeTool` calls are).
//! - [`tools`]: how a registered tool is listed, and which tool a called name stands for.
//! - [`answer`]: a call's outcome as an MCP result, tool error or protocol error.
//! - [`approval`]: which imported tools are registered when an import asks for approval.
//! - [`client`]: calling the tools of MCP servers (services whose endpoint is an MCP URL).
//! - [`client_credentials`]: an import's OAuth client credentials, checked;
//!   [`access_tokens`]: the access tokens got with them; [`authorized_http`]: the HTTP client
//!   that sends them; [`token_requests`]: how many tokens were asked for.
//! - `session_failures`: what a failed session, or a failed request on one, says.
//! - [`session_keys`]: which session a use of an MCP server goes over (an import's own, or
//!   one shared per URL).
//! - `session_opening`: opening a session (connecting to a server, or starting one), and
//!   stopping the openings of a session closed; `server_group`: ending what a started
//!   server left running in its process group.
//! - [`import`]: the tools of configured MCP servers, registered as services.
//! - [`import_config`]: the `[[mcp_imports]]` entries, checked; [`import_auth`]: how toolplane
//!   authenticates to their servers.
//! - [`live_imports`]: the imports running, kept as the configuration file says.
//! - [`list_changed`]: `notifications/tools/list_changed` when the tenant's tools change.
//! - [`server_logs`]: what MCP servers log, in toolplane's log; [`log_budget`]: how much of
//!   it, per server.
//! - [`rtfs`]: tools as RTFS capability definitions (`toolplane export-rtfs`).
//! - [`sessions`]: the MCP endpoint's sessions, counted in all and by tenant.

pub mod access_tokens;
pub mod answer;
pub mod approval;
pub mod authorized_http;
pub mod client;
pub mod client_credentials;
pub mod handler;
pub mod http;
pub mod import;
pub mod import_auth;
pub mod import_config;
mod import_listing;
mod import_states;
pub mod list_changed;
pub mod live_imports;
pub mod log_budget;
pub mod orphans;
pub mod progress_routes;
pub(crate) mod request_bodies;
pub mod rtfs;
mod server_group;
pub mod server_logs;
mod session_failures;
pub mod session_keys;
mod session_opening;
pub mod sessions;
pub mod token_requests;
pub mod tool_call;
pub mod tools;

pub use handler::McpTools;
pub use http::{MCP_PATH, McpEndpoint, McpRefusals, McpTransport};
pub use sessions::McpSessions;
