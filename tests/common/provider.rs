//! Real provider servers (the SDK's `ProviderServer`) on 127.0.0.1:0 for tests.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use toolplane::provider::structs::structs_tools;
use toolplane::provider::{
    ProviderConfig, ProviderHealth, ProviderServer, RegisteredTools, ToolDescriptor, ToolHandler,
    ToolRegistry,
};

use super::{TestServer, wait_registered};

/// A provider running in the test process; stopped (and deregistered) when dropped.
pub struct TestProvider {
    pub addr: SocketAddr,
    pub health: ProviderHealth,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestProvider {
    /// Starts a provider of `tools` registering as `service` with `control_plane`.
    pub async fn start(
        tools: RegisteredTools,
        control_plane: &str,
        service: &str,
        ttl: Duration,
    ) -> Self {
        let mut config = ProviderConfig::new(service, "1.0.0", control_plane);
        config.ttl = ttl;
        Self::start_with(tools, config).await
    }

    /// Starts a provider of `tools` configured as `config` says.
    pub async fn start_with(tools: RegisteredTools, config: ProviderConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        Self::start_on(listener, tools, config)
    }

    /// Starts a provider of `tools` on `listener`, configured as `config` says.
    pub fn start_on(
        listener: tokio::net::TcpListener,
        tools: RegisteredTools,
        config: ProviderConfig,
    ) -> Self {
        let addr = listener.local_addr().expect("address");
        let server = ProviderServer::new(tools, config);
        let health = server.health();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await
                .expect("provider runs");
        });
        Self {
            addr,
            health,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the provider and waits for it to deregister.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("provider stops cleanly");
        }
    }
}

impl Drop for TestProvider {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts a provider of one tool, `tool` answered by `handle`, registering as `service` with
/// `server` (30 s TTL), and waits until it is registered.
pub async fn start_one_tool_provider(
    server: &TestServer,
    service: &str,
    tool: ToolDescriptor,
    handle: ToolHandler,
) -> TestProvider {
    let tools = ToolRegistry::new()
        .register(tool, handle)
        .expect("a valid tool")
        .freeze();
    let provider =
        TestProvider::start(tools, &server.endpoint(), service, Duration::from_secs(30)).await;
    wait_registered(server, service).await;
    provider
}

/// Starts the example Structs provider against `server` and waits until it is registered.
pub async fn start_structs_provider(server: &TestServer) -> TestProvider {
    let provider = TestProvider::start(
        structs_tools().expect("the example tools are valid"),
        &server.endpoint(),
        "structs",
        Duration::from_secs(5),
    )
    .await;
    wait_registered(server, "structs").await;
    provider
}
