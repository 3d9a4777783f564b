//! Preflight: what is missing, its bounds, and the typed Rust client's fail-fast check.

use crate::common;

use common::*;
use tonic::Code;
use toolplane::pb;

/// A requirement of `tools` of `service`.
pub(crate) fn requirement(service: &str, tools: &[&str], optional: bool) -> pb::ServiceRequirement {
    pb::ServiceRequirement {
        service_name: service.into(),
        tool_names: tools.iter().map(|t| (*t).to_owned()).collect(),
        optional,
    }
}

/// Preflight reports a missing service, a missing tool, and optional misses separately.
#[tokio::test(flavor = "multi_thread")]
async fn preflight_reports_what_is_missing() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    register_ok(&mut client, 0, story_generator()).await;

    let all_there = client
        .preflight(pb::PreflightRequest {
            meta: meta(0),
            requirements: vec![requirement(
                "story-generator",
                &["generate_structure", "generate_nodes"],
                false,
            )],
        })
        .await
        .expect("preflight")
        .into_inner();
    assert!(all_there.ok);
    assert_eq!(all_there.services.len(), 1);

    let answer = client
        .preflight(pb::PreflightRequest {
            meta: meta(0),
            requirements: vec![
                requirement(
                    "story-generator",
                    &["generate_structure", "validate_paths"],
                    false,
                ),
                requirement("quality-control", &["validate_content"], false),
                requirement("prompt-helper", &["get_model_for_language"], true),
            ],
        })
        .await
        .expect("preflight answers OK even when tools are missing")
        .into_inner();
    assert!(!answer.ok);
    let missing: Vec<_> = answer
        .missing_required
        .iter()
        .map(|m| (m.service_name.as_str(), m.tool_name.as_str(), m.reason))
        .collect();
    assert_eq!(
        missing,
        [
            (
                "story-generator",
                "validate_paths",
                pb::MissingReason::ToolNotOffered as i32
            ),
            (
                "quality-control",
                "validate_content",
                pb::MissingReason::ServiceNotRegistered as i32
            ),
        ]
    );
    assert_eq!(answer.missing_optional.len(), 1);
    assert_eq!(
        answer.missing_optional[0].tool_name,
        "get_model_for_language"
    );
    assert!(answer.missing_required.iter().all(|m| !m.detail.is_empty()));

    let only_optional = client
        .preflight(pb::PreflightRequest {
            meta: meta(0),
            requirements: vec![requirement("prompt-helper", &["x"], true)],
        })
        .await
        .expect("preflight")
        .into_inner();
    assert!(only_optional.ok, "optional misses do not fail the check");

    let empty = client
        .preflight(pb::PreflightRequest {
            meta: meta(0),
            requirements: vec![],
        })
        .await
        .expect_err("empty");
    assert_eq!(empty.code(), Code::InvalidArgument);
    let bad_name = client
        .preflight(pb::PreflightRequest {
            meta: meta(0),
            requirements: vec![requirement("Bad Name", &[], false)],
        })
        .await
        .expect_err("bad name");
    assert_eq!(violations(&bad_name)[0].0, "requirements[0].service_name");
}

/// A pre-flight check takes at most 1,000 requirements naming at most 10,000 tools in all;
/// more is INVALID_ARGUMENT saying so. Without the bound, one 4 MiB request of 330,000
/// requirements across 2,000 registered services held a serving thread for seconds and was
/// answered with 330,000 missing tools.
#[tokio::test(flavor = "multi_thread")]
async fn preflight_takes_at_most_1000_requirements_and_10000_tools() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    register_ok(&mut client, 0, story_generator()).await;
    let needed = |count: usize, tools: &[&str]| pb::PreflightRequest {
        meta: meta(0),
        requirements: (0..count)
            .map(|_| requirement("story-generator", tools, false))
            .collect(),
    };

    let most = client
        .preflight(needed(1_000, &["generate_structure"; 10]))
        .await
        .expect("1,000 requirements naming 10,000 tools")
        .into_inner();
    assert!(most.ok);
    assert_eq!(most.services.len(), 1, "each service found once");

    for (request, said) in [
        (needed(1_001, &[]), "1001 requirements, more than the 1000"),
        (
            needed(1_000, &["generate_structure"; 11]),
            "11000 tool names across the requirements, more than the 10000",
        ),
    ] {
        let refused = client.preflight(request).await.expect_err("too many");
        assert_eq!(refused.code(), Code::InvalidArgument);
        let violations = violations(&refused);
        assert_eq!(violations[0].0, "requirements");
        assert!(violations[0].1.contains(said), "{violations:?}");
    }
}

/// The typed Rust client turns missing required tools into a typed error listing them.
#[tokio::test(flavor = "multi_thread")]
async fn rust_client_preflight_fails_fast() {
    use toolplane::client::{ClientError, ToolRequirement, ToolplaneClient};
    let server = TestServer::start().await;
    let mut raw = server.discovery().await;
    let lease = register_ok(
        &mut raw,
        3,
        registration("story-generator", vec![simple_tool("generate_structure")]),
    )
    .await
    .lease_id;
    let client = ToolplaneClient::connect(&server.endpoint(), toolplane::envelope::TenantId(3))
        .await
        .expect("connect");
    let ok = client
        .preflight(&[ToolRequirement::required(
            "story-generator",
            &["generate_structure"],
        )])
        .await
        .expect("all there");
    assert!(ok.ok);
    match client
        .preflight(&[ToolRequirement::required(
            "story-generator",
            &["generate_nodes"],
        )])
        .await
    {
        Err(ClientError::MissingTools(missing)) => {
            assert_eq!(missing.missing().len(), 1);
            assert!(missing.to_string().contains("generate_nodes"));
        }
        other => panic!("expected MissingTools, got {other:?}"),
    }
    // The discovery cache answers from memory until its TTL or an invalidation.
    let first = client.service("story-generator").await.expect("found");
    deregister(&mut raw, 3, "story-generator", lease)
        .await
        .expect("deregistered");
    assert_eq!(
        client
            .service("story-generator")
            .await
            .expect("cached")
            .service_name,
        first.service_name
    );
    client.invalidate_cache();
    assert!(
        client.service("story-generator").await.is_err(),
        "after invalidation the server is asked again"
    );
}
