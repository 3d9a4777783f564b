//! An MCP server built with the official MCP Python SDK (`tests/peers/python_mcp_server.py`)
//! as a child process, for toolplane to import and call.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use serde_json::json;
use toolplane::pb;

use super::TestServer;
use super::process::{Runtime, peer_script};

/// The MCP server, stopped when dropped.
pub struct PythonMcpServer {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    /// `https` when it serves TLS, else `http`.
    scheme: &'static str,
}

impl Drop for PythonMcpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PythonMcpServer {
    /// Starts the server on `port` (0 picks a free one) once it says it is listening; `None`
    /// when the Python peers are not installed (the test is skipped).
    pub fn start(port: u16) -> Option<Self> {
        Self::start_with(port, &[])
    }

    /// As [`Self::start`], with the script's further arguments: a bearer token to ask for,
    /// `--tls-cert FILE --tls-key FILE` to serve TLS, `--tls-client-ca FILE` to ask callers
    /// for a certificate that CA signed.
    pub fn start_with(port: u16, args: &[&str]) -> Option<Self> {
        let mut command = peer_script(Runtime::Python, "python_mcp_server.py")?;
        let mut child = command
            .arg(port.to_string())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the Python MCP server");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let scheme = if args.contains(&"--tls-cert") {
            "https"
        } else {
            "http"
        };
        let marker = format!("Uvicorn running on {scheme}://127.0.0.1:");
        let port = loop {
            let line = lines
                .next()
                .expect("the server says where it listens")
                .expect("a line of its log");
            if let Some(rest) = line.split(marker.as_str()).nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                break digits.parse().expect("a port");
            }
        };
        // Its log is drained on, so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Some(Self {
            child,
            port,
            scheme,
        })
    }

    /// Its Streamable HTTP URL.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}/mcp", self.scheme, self.port)
    }
}

/// Registers, as `service` of tenant 0, the server at `url` (an MCP server's URL, registered
/// after `mcp+`) offering its tool `add`.
pub async fn register_add_at(server: &TestServer, service: &str, url: &str) {
    let mut registration = super::registration(
        service,
        vec![super::tool(
            "add",
            json!({"type": "object", "required": ["a", "b"],
                   "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
        )],
    );
    registration.endpoint = format!("mcp+{url}");
    server
        .discovery()
        .await
        .register_service(pb::RegisterServiceRequest {
            meta: super::meta(0),
            registration: Some(registration),
        })
        .await
        .expect("registered");
}
