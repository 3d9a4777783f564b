//! MCP servers as child processes, for toolplane to import and call: one built with the
//! official MCP Python SDK (`tests/peers/python_mcp_server.py`), and the TypeScript SDK's
//! reference server at a URL.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tonic::transport::Channel;
use toolplane::envelope::TenantId;
use toolplane::grpc::ServerOptions;
use toolplane::json::{json_to_struct, value_to_json};
use toolplane::mcp::import::{McpImport, McpSource, Secret, ServerAuth, StdioServer};
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::registry::ServiceName;

use super::TestServer;
use super::process::{KeptLog, Runtime, peer_script};

/// The MCP server, stopped when dropped.
pub struct PythonMcpServer {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    /// `https` when it serves TLS, else `http`.
    scheme: &'static str,
    /// The lines of its log (its standard error: Uvicorn's and the MCP SDK's) after it listens.
    log: KeptLog,
}

impl Drop for PythonMcpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PythonMcpServer {
    /// The command that starts the server over stdio (for toolplane to start it); `None` when
    /// the Python peers are not installed (the test is skipped).
    pub fn stdio_command() -> Option<Vec<String>> {
        let python = super::process::peer("venv/bin/python")?;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/peers/python_mcp_server.py");
        Some(vec![
            python.display().to_string(),
            script.display().to_string(),
            "stdio".into(),
        ])
    }

    /// [`Self::stdio_command`] run by the shell `script`, which starts it as `"$@"` (a
    /// launcher, as `npx` or `uvx` are).
    pub fn stdio_command_launched_by(script: &str) -> Option<Vec<String>> {
        let mut command: Vec<String> = ["sh", "-c", script, "sh"].map(str::to_owned).into();
        command.extend(Self::stdio_command()?);
        Some(command)
    }

    /// As [`Self::stdio_command`], wrapped to write `marker` once the server has ended by
    /// itself: a server killed (SIGKILL, or SIGTERM, which ends the wrapper) writes nothing.
    pub fn stdio_command_noting_its_end(marker: &std::path::Path) -> Option<Vec<String>> {
        Self::stdio_command_launched_by(&format!("\"$@\"; echo ended > {}", marker.display()))
    }

    /// As [`Self::stdio_command`], made to take 12 s to start (a server started with `npx` or
    /// `uvx`, which may fetch packages first, can take that long).
    pub fn slow_stdio_command() -> Option<Vec<String>> {
        Self::stdio_command_launched_by("sleep 12; exec \"$@\"")
    }

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
        // Its log is read on, so it never blocks on a full pipe.
        let log = KeptLog::default();
        let kept = log.clone();
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|line| kept.push(line)));
        Some(Self {
            child,
            port,
            scheme,
            log,
        })
    }

    /// The lines of its log holding `needle`.
    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        self.log.lines_with(needle)
    }

    /// Its Streamable HTTP URL.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}/mcp", self.scheme, self.port)
    }
}

/// The TypeScript SDK's reference server (`@modelcontextprotocol/server-everything`) serving
/// MCP's Streamable HTTP, stopped when dropped.
pub struct NodeEverythingServer {
    child: Child,
    port: u16,
    /// The lines of its standard output (each request and session it sees) and error.
    log: KeptLog,
}

impl Drop for NodeEverythingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NodeEverythingServer {
    /// Starts the server once it says it listens; `None` when the Node peers are not installed
    /// (the test is skipped).
    pub fn start() -> Option<Self> {
        let command = node_reference_server("server-everything", &["streamableHttp"])?;
        // It takes its port from PORT and does not say which one 0 picked: a free one is found
        // first, and another if something took it meanwhile (the server then exits).
        for _ in 0..3 {
            if let Some(server) = Self::start_on_a_free_port(&command) {
                return Some(server);
            }
        }
        panic!("the TypeScript reference server found no free port in 3 tries");
    }

    /// The server started on a port free a moment before; `None` when it exited first.
    fn start_on_a_free_port(command: &[String]) -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut child = std::process::Command::new(&command[0])
            .args(&command[1..])
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the TypeScript reference server");
        let log = KeptLog::default();
        let stdout = child
            .stdout
            .take()
            .map(|out| Box::new(out) as Box<dyn std::io::Read + Send>);
        let stderr = child
            .stderr
            .take()
            .map(|err| Box::new(err) as Box<dyn std::io::Read + Send>);
        for output in [stdout, stderr].into_iter().flatten() {
            let kept = log.clone();
            std::thread::spawn(move || {
                (BufReader::new(output).lines())
                    .map_while(Result::ok)
                    .for_each(|line| kept.push(line));
            });
        }
        let mut server = Self { child, port, log };
        let give_up = Instant::now() + Duration::from_secs(20);
        while server.log_lines_with("listening on port").is_empty() {
            if server.child.try_wait().expect("polled").is_some() {
                return None;
            }
            assert!(
                Instant::now() < give_up,
                "the TypeScript reference server never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // It says it listens also when the port was taken, then says it failed and exits.
        std::thread::sleep(Duration::from_millis(200));
        if server.child.try_wait().expect("polled").is_some() {
            return None;
        }
        Some(server)
    }

    /// The lines of its log holding `needle`.
    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        self.log.lines_with(needle)
    }

    /// Its Streamable HTTP URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
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

/// The command that starts the Node reference MCP server `package` of the official TypeScript
/// SDK's project (`server-everything`, `server-filesystem`) over stdio, with `args` after it;
/// `None` when the Node peers are not installed (the test is skipped).
pub fn node_reference_server(package: &str, args: &[&str]) -> Option<Vec<String>> {
    let script = super::process::peer(&format!(
        "node_modules/@modelcontextprotocol/{package}/dist/index.js"
    ))?;
    let mut command = vec!["node".to_owned(), script.display().to_string()];
    command.extend(args.iter().map(|arg| (*arg).to_owned()));
    Some(command)
}

/// Server options importing `source`'s tools as `service` of tenant 0, sending `token` as a
/// bearer token when given.
pub fn importing(
    service: &str,
    source: McpSource,
    refresh_interval: Duration,
    token: Option<&str>,
) -> ServerOptions {
    let auth = token.map(|token| ServerAuth::Bearer(Secret(token.to_owned())));
    importing_with(service, source, refresh_interval, auth)
}

/// Server options importing `source`'s tools as `service` of tenant 0, authenticating as
/// `auth` says. Providers' health is checked once a day, as `TestServer::start` has it: a test
/// about health checks sets its own interval.
pub fn importing_with(
    service: &str,
    source: McpSource,
    refresh_interval: Duration,
    auth: Option<ServerAuth>,
) -> ServerOptions {
    ServerOptions {
        mcp_imports: vec![McpImport {
            service: ServiceName::parse(service).expect("a service name"),
            source,
            tenant: TenantId(0),
            refresh_interval,
            auth,
            approved_tools: None,
        }],
        provider_health_interval: Duration::from_secs(24 * 3600),
        ..ServerOptions::default()
    }
}

/// The `[[mcp_imports]]` entry of a configuration file importing, as `service`, the MCP server
/// toolplane starts with `command`.
pub fn stdio_entry(service: &str, command: &[String]) -> String {
    let command: Vec<String> = command.iter().map(|part| format!("{part:?}")).collect();
    format!(
        "[[mcp_imports]]\nservice = \"{service}\"\ncommand = [{}]\n",
        command.join(", ")
    )
}

/// Options importing, as `service`, the MCP server toolplane starts with `command` and the
/// variables `env` (its list read every minute).
pub fn importing_command(service: &str, command: &[String], env: &[(&str, &str)]) -> ServerOptions {
    let source = McpSource::Stdio(StdioServer {
        command: command.to_vec(),
        env: (env.iter())
            .map(|(name, value)| ((*name).to_owned(), Secret((*value).to_owned())))
            .collect(),
    });
    importing(service, source, Duration::from_secs(60), None)
}

/// Service `name`, once `ready` says it is as expected (within 30 s).
pub async fn wait_for(
    server: &TestServer,
    name: &str,
    ready: impl Fn(Option<&pb::DiscoveryInfo>) -> bool,
) -> Option<pb::DiscoveryInfo> {
    wait_for_at(&mut server.discovery().await, name, ready).await
}

/// Service `name` of tenant 0 as `discovery` reads it, once `ready` says it is as expected
/// (within 30 s).
pub async fn wait_for_at(
    discovery: &mut DiscoveryServiceClient<Channel>,
    name: &str,
    ready: impl Fn(Option<&pb::DiscoveryInfo>) -> bool,
) -> Option<pb::DiscoveryInfo> {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let found = discovery
            .get_service(pb::GetServiceRequest {
                meta: super::meta(0),
                service_name: name.into(),
            })
            .await
            .ok()
            .and_then(|answer| answer.into_inner().service);
        if ready(found.as_ref()) {
            return found;
        }
        assert!(
            Instant::now() < give_up,
            "the import never got there: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Invokes `tool` of tenant 0 with `input` through toolplane.
pub async fn invoke(
    server: &TestServer,
    tool: &str,
    input: Value,
) -> Result<pb::InvokeToolResponse, tonic::Status> {
    super::invoke_fixture::invoker(server)
        .await
        .invoke_tool(pb::InvokeToolRequest {
            meta: super::meta(0),
            tool_name: tool.into(),
            input: json_to_struct(&input),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The output of an invocation, as JSON (null when none).
pub fn output(answer: &pb::InvokeToolResponse) -> Value {
    answer
        .output
        .as_ref()
        .map(|value| value_to_json(value).expect("JSON"))
        .unwrap_or(Value::Null)
}
