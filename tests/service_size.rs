//! A service is described whole in every answer naming it (`GetService`, its registration's
//! answer, a watch event), and gRPC clients read at most 4 MiB in one message by default: a
//! registration that would make its service's description larger is refused INVALID_ARGUMENT
//! before anything is stored, rather than stored and then unreadable by every client and
//! watcher of the tenant.

use crate::common;

use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::pb;

const SERVICE: &str = "big";

/// 1,000 tools named `prefix` and a number, each with a schema describing itself in `filler`
/// bytes.
fn tools(prefix: &str, filler: usize) -> Vec<pb::ToolRegistration> {
    let filler = "x".repeat(filler);
    (0..1000)
        .map(|index| {
            tool(
                &format!("{prefix}{index}"),
                json!({"type": "object", "description": filler}),
            )
        })
        .collect()
}

/// Asserts `status` is INVALID_ARGUMENT whose first violation is on `field` and says `said`.
fn assert_refused_on(status: &tonic::Status, field: &str, said: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let violations = violations(status);
    assert_eq!(violations[0].0, field, "{violations:?}");
    assert!(violations[0].1.contains(said), "{violations:?}");
}

/// Tools of 4,000-byte schemas take 4.27 MB described (4.07 MB sent): refused, naming the
/// field and the sizes, and nothing is stored. Without the bound the registration was taken,
/// and its own answer, `GetService` and the watchers' event all failed OUT_OF_RANGE in a
/// default client ("decoded message length too large").
#[tokio::test(flavor = "multi_thread")]
async fn a_registration_too_large_to_be_described_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let refused = register(&mut client, 0, registration(SERVICE, tools("t", 4000)))
        .await
        .expect_err("refused");
    assert_refused_on(
        &refused,
        "registration.tools",
        "bytes in a discovery answer",
    );
    let gone = get_service(&mut client, 0, SERVICE)
        .await
        .expect_err("not stored");
    assert_eq!(gone.code(), Code::NotFound);
}

/// A service just within the bound is read whole by default clients: its registration's
/// answer, `GetService`, the watchers' event. Registering it again with every tool renamed
/// would announce 2,000 tool changes beside it, past what a watcher reads: refused, naming
/// the registration, and the service stays as it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_service_within_the_bound_is_read_whole_and_a_change_past_it_is_refused() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut watcher = watch(&mut client, 0, "").await;
    let synced = next_event(&mut watcher).await;
    assert_eq!(synced.r#type, pb::ServiceEventType::Synced as i32);
    let answer = register_ok(&mut client, 0, registration(SERVICE, tools("t", 3850))).await;
    assert_eq!(answer.tools.len(), 1000);
    let added = next_event(&mut watcher).await;
    assert_eq!(added.service.expect("service").available_tools.len(), 1000);
    let renamed = register(
        &mut client,
        0,
        registration(SERVICE, tools("renamed", 3850)),
    )
    .await
    .expect_err("refused");
    assert_refused_on(&renamed, "registration", "changes announced");
    let kept = get_service(&mut client, 0, SERVICE).await.expect("kept");
    assert_eq!(kept.available_tools[0].tool_name, "t0");
    assert_eq!(kept.available_tools.len(), 1000);
}
