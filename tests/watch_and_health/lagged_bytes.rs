//! A watcher behind by more bytes of changed services than its tenant's channel holds
//! (`watch_event_buffer_bytes`): the oldest changes it has not read are let go (a watcher that
//! stopped reading kept every version registered meanwhile: 300 registrations of a 3 MB
//! service kept 2 GB), and it is ended as lagged when it reaches them.

use super::*;

/// Each of 30 registrations of a service of 20 tools of 10 KB schemas is a new version (about
/// 400 KB counted, 200 KB sent), while a watcher with small flow-control windows reads
/// nothing: past 2 MB of them, the oldest are let go. The watcher reads what was sent to it,
/// in order, then ABORTED, reason RESOURCE_WATCH_LAGGED with `max_buffered_bytes`; a new watch
/// sees the last version.
#[tokio::test(flavor = "multi_thread")]
async fn a_watcher_behind_by_more_bytes_than_are_held_is_ended_as_lagged() {
    const MAX_BYTES: u64 = 2_000_000;
    let server = TestServer::start_with(toolplane::grpc::ServerOptions {
        event_buffer_bytes: MAX_BYTES,
        ..test_options()
    })
    .await;
    let mut stream = slow_watch(&server).await;

    let mut client = server.discovery().await;
    let filler = "x".repeat(10_000);
    let version = |round: usize| {
        let tools = (0..20)
            .map(|index| {
                tool(
                    &format!("t{index}"),
                    json!({"type": "object", "description": filler}),
                )
            })
            .collect();
        pb::ServiceRegistration {
            service_version: format!("1.0.{round}"),
            ..registration("big", tools)
        }
    };
    for round in 0..30 {
        register_ok(&mut client, 0, version(round)).await;
    }

    let mut delivered = Vec::new();
    let ended = loop {
        match tokio::time::timeout(PATIENCE, stream.message())
            .await
            .expect("the watch delivers or ends")
        {
            Ok(Some(message)) => {
                let service = message.event.and_then(|event| event.service);
                delivered.push(service.expect("a service").service_version);
            }
            Ok(None) => panic!("the watch ended without saying it lagged"),
            Err(status) => break status,
        }
    };
    let expected: Vec<String> = (0..delivered.len())
        .map(|round| format!("1.0.{round}"))
        .collect();
    assert_eq!(
        delivered, expected,
        "the versions sent before the end, in order"
    );
    assert!(
        delivered.len() < 30,
        "the watcher was expected to fall behind"
    );
    assert_eq!(ended.code(), Code::Aborted, "{ended:?}");
    assert_eq!(reason(&ended), "RESOURCE_WATCH_LAGGED");
    assert!(
        ended.message().contains("watch_event_buffer_bytes"),
        "{ended:?}"
    );
    let held = {
        use tonic_types::StatusExt;
        ended
            .get_error_details()
            .error_info()
            .and_then(|info| info.metadata.get("max_buffered_bytes").cloned())
    };
    assert_eq!(held, Some(MAX_BYTES.to_string()));

    let mut again = watch(&mut client, 0, "").await;
    let added = next_event(&mut again).await;
    assert_eq!(added.service.expect("a service").service_version, "1.0.29");
}
