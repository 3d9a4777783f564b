//! The Prometheus metrics endpoint of the real server on loopback, scraped over HTTP/1.1 as
//! Prometheus does, after real invocations through a real provider.

mod common;

use std::net::SocketAddr;

use common::invoke_fixture::request;
use common::provider::start_structs_provider;
use common::*;
use serde_json::json;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

async fn scrape(client: &reqwest::Client, metrics: SocketAddr, path: &str) -> reqwest::Response {
    client
        .get(format!("http://{metrics}{path}"))
        .send()
        .await
        .expect("the metrics endpoint answers")
}

/// The value of the sample named exactly `sample` (name and labels), if the text has it.
fn sample(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .map(|value| value.parse().expect("a number"))
}

/// A scrape reports the invocations by how they ended, with their durations, the registry's
/// size and whether the server is serving; other paths and methods are refused; the endpoint
/// closes with the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_reports_invocations_and_the_registry() {
    let (server, metrics) = TestServer::start_with_metrics(test_options()).await;
    let provider = start_structs_provider(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let power = |grams: i64| {
        request(
            "structs_calculate_power",
            json!({"alpha_matter": grams, "generator_type": "reactor"}),
        )
    };
    client.invoke_tool(power(100)).await.expect("succeeds");
    client.invoke_tool(power(7)).await.expect("succeeds");
    client
        .invoke_tool(power(-5))
        .await
        .expect_err("invalid input");
    client
        .invoke_tool(request("no_such_tool", json!({})))
        .await
        .expect_err("rejected");

    let http = reqwest::Client::new();
    let answer = scrape(&http, metrics, "/metrics").await;
    assert_eq!(answer.status(), 200);
    let content_type = answer.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = answer.text().await.expect("body");
    let expected = [
        ("toolplane_invocations_total{status=\"succeeded\"}", 2.0),
        ("toolplane_invocations_total{status=\"invalid_input\"}", 1.0),
        ("toolplane_invocations_total{status=\"rejected\"}", 1.0),
        ("toolplane_invocations_total{status=\"failed\"}", 0.0),
        (
            "toolplane_invocation_duration_seconds_count{status=\"succeeded\"}",
            2.0,
        ),
        (
            "toolplane_invocation_duration_seconds_bucket{le=\"+Inf\",status=\"succeeded\"}",
            2.0,
        ),
        ("toolplane_registered_services", 1.0),
        ("toolplane_tenants", 1.0),
        ("toolplane_unhealthy_provider_endpoints", 0.0),
        ("toolplane_serving", 1.0),
        ("toolplane_invocation_record_write_failures_total", 0.0),
    ];
    for (name, value) in expected {
        assert_eq!(sample(&text, name), Some(value), "{name} in\n{text}");
    }
    let tools = sample(&text, "toolplane_registered_tools").expect("tools");
    let structs_tools = toolplane::provider::structs::structs_tools()
        .expect("valid")
        .iter()
        .count();
    assert_eq!(tools, structs_tools as f64);
    let duration = sample(
        &text,
        "toolplane_invocation_duration_seconds_sum{status=\"succeeded\"}",
    )
    .expect("sum");
    assert!(duration > 0.0, "{duration}");
    assert!(text.ends_with("# EOF\n"), "{text}");

    let elsewhere = scrape(&http, metrics, "/").await;
    assert_eq!(elsewhere.status(), 404);
    let posted = http
        .post(format!("http://{metrics}/metrics"))
        .send()
        .await
        .expect("answered");
    assert_eq!(posted.status(), 405);
    assert_eq!(posted.headers()["allow"], "GET, HEAD");

    provider.stop().await;
    server.stop().await;
    // The endpoint's task is aborted as the server returns, and dropped soon after.
    let short = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(1))
        .build()
        .expect("client");
    eventually("the endpoint closes with the server", || {
        let short = short.clone();
        async move {
            short
                .get(format!("http://{metrics}/metrics"))
                .send()
                .await
                .is_err()
        }
    })
    .await;
}
