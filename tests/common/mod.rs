//! Starts the real toolplane server on 127.0.0.1:0 for integration tests, and helpers to talk
//! to it with the generated client.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use toolplane::envelope::{TenantId, request_meta};
use toolplane::grpc::ServerOptions;
use toolplane::json::json_to_struct;
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::registry::RegistrationLimits;

/// A server running in this test process; stopped when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// Options for tests: short TTLs allowed, short drain, and providers' health checked only by
/// tests that ask for it (most register endpoints nobody serves, such as 127.0.0.1:7001, and
/// expect them to count as healthy however long a busy machine makes the test take).
pub fn test_options() -> ServerOptions {
    ServerOptions {
        limits: RegistrationLimits {
            min_ttl: Duration::from_millis(100),
            ..RegistrationLimits::default()
        },
        drain_grace: Duration::from_secs(2),
        provider_health_interval: Duration::from_secs(24 * 3600),
        ..ServerOptions::default()
    }
}

/// A listener on a free loopback port, and its address.
async fn side_listener() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    (listener, addr)
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(test_options()).await
    }

    pub async fn start_with(options: ServerOptions) -> Self {
        Self::start_at("127.0.0.1:0".parse().expect("loopback"), options).await
    }

    /// Starts a server on a given address (used to restart one on the same port). Between the
    /// first server's stop and this bind, a concurrent test's connection may briefly hold that
    /// port as its own local port (ports for port-0 listeners and outgoing connections come
    /// from the same range), so the bind is retried for a while.
    pub async fn start_at(addr: SocketAddr, options: ServerOptions) -> Self {
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => {
                    return Self::serve_on(listener, Default::default(), options);
                }
                Err(error) if std::time::Instant::now() < give_up => {
                    eprintln!("binding {addr} again: {error}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!("cannot bind {addr} again: {error}"),
            }
        }
    }

    /// Starts a server that serves metrics too; answers it and the metrics address.
    pub async fn start_with_metrics(options: ServerOptions) -> (Self, SocketAddr) {
        let (metrics, metrics_addr) = side_listener().await;
        let side = toolplane::grpc::SideListeners {
            metrics: Some(metrics),
            mcp: None,
        };
        (Self::start_serving(side, options).await, metrics_addr)
    }

    /// Starts a server that serves MCP too; answers it and the MCP endpoint's address.
    pub async fn start_with_mcp(options: ServerOptions) -> (Self, SocketAddr) {
        let (mcp, mcp_addr) = side_listener().await;
        let side = toolplane::grpc::SideListeners {
            metrics: None,
            mcp: Some(mcp),
        };
        (Self::start_serving(side, options).await, mcp_addr)
    }

    /// Starts a server that serves MCP and metrics too; answers it and the MCP endpoint's and
    /// the metrics endpoint's addresses.
    pub async fn start_with_mcp_and_metrics(
        options: ServerOptions,
    ) -> (Self, SocketAddr, SocketAddr) {
        let (mcp, mcp_addr) = side_listener().await;
        let (metrics, metrics_addr) = side_listener().await;
        let side = toolplane::grpc::SideListeners {
            metrics: Some(metrics),
            mcp: Some(mcp),
        };
        (
            Self::start_serving(side, options).await,
            mcp_addr,
            metrics_addr,
        )
    }

    async fn start_serving(side: toolplane::grpc::SideListeners, options: ServerOptions) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        Self::serve_on(listener, side, options)
    }

    fn serve_on(
        listener: tokio::net::TcpListener,
        side: toolplane::grpc::SideListeners,
        options: ServerOptions,
    ) -> Self {
        let addr = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            toolplane::grpc::serve_with(listener, side, options, async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
        });
        Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.endpoint())
            .expect("valid uri")
            .connect()
            .await
            .expect("connect to test server")
    }

    /// A connection of its own with small flow-control windows (64 KB): a stream on it that
    /// is not read takes no more than that before the server must wait to send more.
    pub async fn slow_channel(&self) -> Channel {
        Channel::from_shared(self.endpoint())
            .expect("valid uri")
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect()
            .await
            .expect("connect to test server")
    }

    pub async fn discovery(&self) -> DiscoveryServiceClient<Channel> {
        DiscoveryServiceClient::new(self.channel().await)
    }

    /// Stops the server and waits for it to finish draining.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task ends cleanly");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A plain HTTP client (reqwest, which toolplane builds without a crypto provider of its own,
/// given toolplane's ring-based TLS configuration).
#[allow(dead_code)]
pub fn http_client() -> reqwest::Client {
    toolplane::grpc::outgoing_tls::http_client_builder(None)
        .build()
        .expect("an HTTP client")
}

pub fn meta(tenant: u64) -> Option<pb::Meta> {
    Some(request_meta(TenantId(tenant), "test-correlation"))
}

pub fn schema(value: Value) -> Option<prost_types::Struct> {
    json_to_struct(&value)
}

pub fn tool(name: &str, input: Value) -> pb::ToolRegistration {
    pb::ToolRegistration {
        tool_name: name.to_owned(),
        description: format!("{name} does things"),
        tool_schema: schema(input),
        capabilities: vec![pb::ServiceCapability::Retry as i32],
        ..Default::default()
    }
}

pub fn simple_tool(name: &str) -> pb::ToolRegistration {
    tool(
        name,
        json!({"type": "object", "properties": {"theme": {"type": "string"}}}),
    )
}

pub fn registration(service: &str, tools: Vec<pb::ToolRegistration>) -> pb::ServiceRegistration {
    pb::ServiceRegistration {
        service_name: service.to_owned(),
        service_version: "0.0.1".to_owned(),
        endpoint: "http://127.0.0.1:7001".to_owned(),
        tools,
        ttl: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        instance_id: String::new(),
    }
}

/// The seed 000 story generator with its two required tools.
pub fn story_generator() -> pb::ServiceRegistration {
    registration(
        "story-generator",
        vec![
            simple_tool("generate_structure"),
            simple_tool("generate_nodes"),
        ],
    )
}

pub fn with_ttl(
    mut registration: pb::ServiceRegistration,
    ttl: Duration,
) -> pb::ServiceRegistration {
    registration.ttl = Some(ttl.try_into().expect("ttl fits"));
    registration
}

pub async fn register(
    client: &mut DiscoveryServiceClient<Channel>,
    tenant: u64,
    registration: pb::ServiceRegistration,
) -> Result<pb::RegisterServiceResponse, tonic::Status> {
    client
        .register_service(pb::RegisterServiceRequest {
            meta: meta(tenant),
            registration: Some(registration),
        })
        .await
        .map(tonic::Response::into_inner)
}

pub async fn register_ok(
    client: &mut DiscoveryServiceClient<Channel>,
    tenant: u64,
    registration: pb::ServiceRegistration,
) -> pb::RegisterServiceResponse {
    register(client, tenant, registration)
        .await
        .expect("registration accepted")
}

pub async fn deregister(
    client: &mut DiscoveryServiceClient<Channel>,
    tenant: u64,
    service: &str,
    lease_id: String,
) -> Result<(), tonic::Status> {
    client
        .deregister_service(pb::DeregisterServiceRequest {
            meta: meta(tenant),
            service_name: service.to_owned(),
            lease_id,
        })
        .await
        .map(drop)
}

pub async fn get_service(
    client: &mut DiscoveryServiceClient<Channel>,
    tenant: u64,
    service: &str,
) -> Result<pb::DiscoveryInfo, tonic::Status> {
    client
        .get_service(pb::GetServiceRequest {
            meta: meta(tenant),
            service_name: service.to_owned(),
        })
        .await
        .map(|response| response.into_inner().service.expect("service set"))
}

/// Whether `error` is the client's own deadline rather than the server's answer to it: tonic's
/// channel keeps a request's deadline (`grpc-timeout`) too, and toolplane answers 50 ms ahead
/// of it (DEADLINE_EXCEEDED), so on a busy machine the client's timer may fire first
/// (CANCELLED, "Timeout expired"); the call is then one its caller left.
pub fn client_timed_out(error: &tonic::Status) -> bool {
    error.code() == tonic::Code::Cancelled && error.message() == "Timeout expired"
}

/// The ErrorInfo reason of a status.
pub fn reason(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_default()
}

/// The BadRequest (field, description) pairs of a status.
pub fn violations(status: &tonic::Status) -> Vec<(String, String)> {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .bad_request()
        .map(|bad| {
            bad.field_violations
                .iter()
                .map(|v| (v.field.clone(), v.description.clone()))
                .collect()
        })
        .unwrap_or_default()
}
pub mod agent_fixture;
pub mod collector;
pub mod invoke_fixture;
pub mod mcp_server;
pub mod model_server;
pub mod peer_run;
pub mod process;
pub mod provider;
pub mod proxy;
pub mod tls;

/// Polls `check` every 20 ms until it holds; panics after 10 s (a bound on "eventually", never
/// a performance assertion).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            std::time::Instant::now() < give_up,
            "gave up waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `service` is registered in tenant 0.
pub async fn wait_registered(server: &TestServer, service: &str) {
    let discovery = server.discovery().await;
    eventually(&format!("{service} registers"), || {
        let mut discovery = discovery.clone();
        let service = service.to_owned();
        async move { get_service(&mut discovery, 0, &service).await.is_ok() }
    })
    .await;
}

/// The next event of a WatchServices stream; panics after 10 s (a bound on "eventually").
pub async fn next_event(
    stream: &mut tonic::Streaming<pb::WatchServicesResponse>,
) -> pb::ServiceEvent {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an event arrives")
        .expect("stream healthy")
        .expect("stream open")
        .event
        .expect("event set")
}

/// Starts a WatchServices stream of `tenant`, of `service` only unless it is empty.
pub async fn watch(
    client: &mut DiscoveryServiceClient<Channel>,
    tenant: u64,
    service: &str,
) -> tonic::Streaming<pb::WatchServicesResponse> {
    client
        .watch_services(pb::WatchServicesRequest {
            meta: meta(tenant),
            service_name: service.into(),
        })
        .await
        .expect("watch starts")
        .into_inner()
}

/// An MCP `tools/list` request of protocol 2026-07-28 (no session) for `tenant`.
pub fn tools_list(client: &reqwest::Client, url: &str, tenant: &str) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .header("toolplane-tenant-id", tenant)
        .body(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
                "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{}}}}"#,
        )
}

/// The value of the sample `sample` (name and labels) in a scrape of `url`.
pub async fn scraped(http: &reqwest::Client, url: &str, sample: &str) -> f64 {
    let text = http
        .get(url)
        .send()
        .await
        .expect("scraped")
        .text()
        .await
        .expect("a text answer");
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("{sample} in\n{text}"))
}
