//! A server whose log is not read goes on serving: a log shipper that stalls (its pipe full)
//! costs log lines, not the server.

use std::time::Duration;

use crate::common::process::ServerProcess;
use crate::common::{deregister, register_ok, registration, simple_tool};
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;

/// Each registration and deregistration logs a line at INFO (about 200 bytes); 600 of them
/// are more than a pipe holds (64 KiB). Before, the server's threads waited on the full pipe
/// to write their line (one of them holding the registry's lock to log a lease's expiry), so
/// registrations, heartbeats and at last every call waited with them.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_whose_log_is_not_read_goes_on_serving() {
    let server =
        ServerProcess::start_with_unread_log(&[("TOOLPLANE_METRICS_LISTEN", "127.0.0.1:0")]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .expect("valid uri")
        .connect()
        .await
        .expect("connect");
    let mut client = DiscoveryServiceClient::new(channel);
    for round in 0..300 {
        let name = format!("logged{round}");
        let answered = tokio::time::timeout(Duration::from_secs(10), async {
            let lease = register_ok(&mut client, 0, registration(&name, vec![simple_tool("t")]))
                .await
                .lease_id;
            deregister(&mut client, 0, &name, lease).await
        })
        .await;
        let deregistered = answered.unwrap_or_else(|_| panic!("round {round}: unanswered"));
        deregistered.expect("deregistered");
    }
    // The lines wait to be written (128,000 may): none is dropped yet.
    let metrics = server.logged_address("metrics served at /metrics");
    let http = crate::common::http_client();
    let dropped = crate::common::scraped(
        &http,
        &format!("http://{metrics}/metrics"),
        "toolplane_log_lines_dropped_total",
    )
    .await;
    assert_eq!(dropped, 0.0);
}
