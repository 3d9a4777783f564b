//! SearchTools against the real server: ranking, filters and limits through the generated
//! client and the Rust client, results that follow registrations at once, errors that name the
//! field, and `toolplane search` for people and scripts.

use crate::common;

use common::process::{ServerProcess, toolplane_cli};
use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::client::{ToolSelection, ToolplaneClient};
use toolplane::envelope::TenantId;
use toolplane::pb;

fn described(name: &str, description: &str, input: serde_json::Value) -> pb::ToolRegistration {
    let mut tool = tool(name, input);
    tool.description = description.to_owned();
    tool.capabilities = Vec::new();
    tool
}

fn github() -> pb::ServiceRegistration {
    let repo = json!({"type": "object", "properties": {
        "owner": {"type": "string", "description": "The account owning the repository"},
        "repo": {"type": "string"}}});
    let mut cached = described(
        "get_pull_request",
        "Reads one pull request: title, state and reviewers.",
        repo.clone(),
    );
    cached.capabilities = vec![pb::ServiceCapability::Caching as i32];
    registration(
        "github",
        vec![
            described(
                "list_issues",
                "Lists the issues of a repository.",
                repo.clone(),
            ),
            described("create_issue", "Opens a new issue in a repository.", repo),
            cached,
        ],
    )
}

fn weather(forecast: &str) -> pb::ServiceRegistration {
    registration(
        "weather",
        vec![
            described(
                "forecast",
                forecast,
                json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            ),
            described(
                "list_alerts",
                "Lists the weather alerts of a region.",
                json!({}),
            ),
        ],
    )
}

fn found(answer: &pb::SearchToolsResponse) -> Vec<String> {
    answer
        .matches
        .iter()
        .map(|found| {
            let tool = found.tool.as_ref().expect("a match carries its tool");
            format!("{}/{}", tool.service_name, tool.tool_name)
        })
        .collect()
}

async fn search(
    client: &mut pb::discovery_service_client::DiscoveryServiceClient<tonic::transport::Channel>,
    request: pb::SearchToolsRequest,
) -> Result<pb::SearchToolsResponse, tonic::Status> {
    client
        .search_tools(pb::SearchToolsRequest {
            meta: meta(0),
            ..request
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The best match first; filters, limits and tenants; answers that follow registrations.
#[tokio::test(flavor = "multi_thread")]
async fn search_ranks_the_live_tools_and_follows_changes() {
    let server = TestServer::start().await;
    let mut discovery = server.discovery().await;
    let github_lease = register_ok(&mut discovery, 0, github()).await.lease_id;
    register_ok(
        &mut discovery,
        0,
        weather("The weather forecast for a city."),
    )
    .await;
    register_ok(
        &mut discovery,
        5,
        registration(
            "tracker",
            vec![described("list_issues", "Issues.", json!({}))],
        ),
    )
    .await;
    let client = ToolplaneClient::connect(&server.endpoint(), TenantId(0))
        .await
        .expect("connects");

    let answer = client
        .search_tools("open issues", &ToolSelection::default(), 0)
        .await
        .expect("searches");
    assert_eq!(
        found(&answer),
        ["github/create_issue", "github/list_issues"],
        "both name an issue; one opens it; tenant 5's tool is not searched"
    );
    assert_eq!(answer.total_matches, 2);
    assert!(answer.matches[0].score > answer.matches[1].score);
    assert_eq!(answer.meta.expect("meta").tenant_id, 0);
    let first = answer.matches[0].tool.as_ref().expect("tool");
    assert!(first.tool_schema.is_some() && first.definition_sha256.len() == 64);

    let by_parameter = client
        .search_tools("city", &ToolSelection::default(), 0)
        .await
        .expect("searches");
    assert_eq!(found(&by_parameter), ["weather/forecast"]);
    let by_service = client
        .search_tools("GitHub", &ToolSelection::default(), 0)
        .await
        .expect("searches");
    assert_eq!(by_service.total_matches, 3);
    let only_weather = client
        .search_tools(
            "list",
            &ToolSelection {
                service: Some("weather".into()),
                ..Default::default()
            },
            0,
        )
        .await
        .expect("searches");
    assert_eq!(found(&only_weather), ["weather/list_alerts"]);
    let one = client
        .search_tools("list", &ToolSelection::default(), 1)
        .await
        .expect("searches");
    assert_eq!((one.matches.len(), one.total_matches), (1, 2));
    let cached = search(
        &mut discovery,
        pb::SearchToolsRequest {
            query: "repository".into(),
            capability: pb::ServiceCapability::Caching as i32,
            ..Default::default()
        },
    )
    .await
    .expect("searches");
    assert_eq!(found(&cached), ["github/get_pull_request"]);

    // A changed description is searched at once; a deregistered service's tools are gone.
    assert_eq!(
        client
            .search_tools("snow", &ToolSelection::default(), 0)
            .await
            .expect("searches")
            .total_matches,
        0
    );
    register_ok(
        &mut discovery,
        0,
        weather("Rain and snow forecast for a city."),
    )
    .await;
    assert_eq!(
        found(
            &client
                .search_tools("snow", &ToolSelection::default(), 0)
                .await
                .expect("searches")
        ),
        ["weather/forecast"]
    );
    deregister(&mut discovery, 0, "github", github_lease)
        .await
        .expect("deregisters");
    let after = client
        .search_tools("issues", &ToolSelection::default(), 0)
        .await
        .expect("searches");
    assert_eq!(after.total_matches, 0, "{:?}", found(&after));
}

/// Bad requests are INVALID_ARGUMENT naming the field and saying what to change.
#[tokio::test(flavor = "multi_thread")]
async fn bad_searches_name_the_field() {
    let server = TestServer::start().await;
    let mut discovery = server.discovery().await;
    register_ok(&mut discovery, 0, github()).await;
    for (request, field, says) in [
        (pb::SearchToolsRequest::default(), "query", "empty"),
        (
            pb::SearchToolsRequest {
                query: "the and of".into(),
                ..Default::default()
            },
            "query",
            "no words to search for",
        ),
        (
            pb::SearchToolsRequest {
                query: "issue ".repeat(300),
                ..Default::default()
            },
            "query",
            "at most 1024",
        ),
        (
            pb::SearchToolsRequest {
                query: "issue".into(),
                max_results: 500,
                ..Default::default()
            },
            "max_results",
            "1 to 100",
        ),
        (
            pb::SearchToolsRequest {
                query: "issue".into(),
                service_name: "Not A Name".into(),
                ..Default::default()
            },
            "service_name",
            "DNS label",
        ),
    ] {
        let status = search(&mut discovery, request).await.expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        let expected = if field == "service_name" {
            "VALIDATION_NAME"
        } else {
            "VALIDATION_FIELD"
        };
        assert_eq!(reason(&status), expected, "{status:?}");
        let violations = violations(&status);
        assert_eq!(violations[0].0, field, "{violations:?}");
        assert!(violations[0].1.contains(says), "{violations:?}");
    }
}

/// `toolplane search` prints a table for people and JSON for scripts.
#[tokio::test(flavor = "multi_thread")]
async fn the_search_command_prints_the_best_matches() {
    let server = ServerProcess::start(&[]);
    let endpoint = server.endpoint();
    let mut discovery =
        pb::discovery_service_client::DiscoveryServiceClient::connect(endpoint.clone())
            .await
            .expect("connects");
    register_ok(&mut discovery, 0, github()).await;
    register_ok(
        &mut discovery,
        0,
        weather("The weather forecast for a city."),
    )
    .await;

    let (code, table, stderr) = toolplane_cli(&["search", "pull request", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("SCORE") && lines[0].contains("DESCRIPTION"),
        "{table}"
    );
    assert!(
        lines[1].contains("get_pull_request") && lines[1].contains("github"),
        "{table}"
    );
    assert!(table.contains("1 of 1 matching tools shown"), "{table}");

    let (code, json, stderr) = toolplane_cli(&[
        "search",
        "lists",
        "--max-results",
        "1",
        "--json",
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let answer: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(answer["total_matches"], 2, "{answer}");
    assert_eq!(
        answer["matches"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    assert!(
        answer["matches"][0]["score"]
            .as_f64()
            .is_some_and(|s| s > 0.0)
    );
    assert!(
        answer["matches"][0]["tool"]["tool_schema"].is_object(),
        "{answer}"
    );

    let (code, _, stderr) = toolplane_cli(&["search", " ", "--endpoint", &endpoint]);
    assert_eq!(code, 2, "a refused search is a bad argument: {stderr}");
    assert!(stderr.contains("query"), "{stderr}");
}
