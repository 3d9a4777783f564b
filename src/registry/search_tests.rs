//! Unit tests of tool search over a real in-memory registry.

use serde_json::json;

use super::*;
use crate::envelope::TenantId;
use crate::registry::memory::MemoryStore;
use crate::registry::{
    Capability, RegistrationLimits, Registry, ServiceSpec, ToolFilter, ToolSpec,
};

fn tool(name: &str, description: &str, schema: serde_json::Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: Some(schema),
        output_schema: None,
        capabilities: Vec::new(),
        timeout_ms: None,
        domains: Vec::new(),
        categories: Vec::new(),
        annotations: Default::default(),
    }
}

/// A registry with nothing registered.
fn empty_registry() -> Registry {
    Registry::new(
        MemoryStore::start(16, 16),
        RegistrationLimits::default(),
        16,
    )
}

fn registry() -> Registry {
    let registry = empty_registry();
    let object = json!({"type": "object"});
    let services = [
        (
            "github",
            vec![
                tool(
                    "list_issues",
                    "Lists the issues of a repository.",
                    json!({
                        "type": "object",
                        "properties": {"owner": {"type": "string", "description": "Account name"},
                                       "repo": {"type": "string"}}
                    }),
                ),
                tool(
                    "create_issue",
                    "Opens an issue in a repository.",
                    object.clone(),
                ),
                tool(
                    "get_pull_request",
                    "Reads one pull request.",
                    object.clone(),
                ),
            ],
        ),
        (
            "weather",
            vec![
                tool(
                    "forecast",
                    "The weather forecast for a city.",
                    json!({
                        "type": "object",
                        "properties": {"city": {"type": "string"}}
                    }),
                ),
                tool("list_alerts", "Lists weather alerts.", object.clone()),
            ],
        ),
    ];
    for (name, tools) in services {
        register(&registry, name, tools);
    }
    registry
}

/// Registers `tools` as the service `name` of tenant 1.
fn register(registry: &Registry, name: &str, tools: Vec<ToolSpec>) {
    registry
        .register(
            TenantId(1),
            &ServiceSpec {
                name: name.into(),
                version: "1.0.0".into(),
                endpoint: "http://127.0.0.1:9".into(),
                tools,
                ttl: None,
                instance_id: String::new(),
            },
        )
        .expect("registers");
}

fn names(results: &SearchResults) -> Vec<String> {
    results
        .hits
        .iter()
        .map(|hit| format!("{}/{}", hit.tool.service.name, hit.tool.tool.name))
        .collect()
}

fn search(registry: &Registry, query: &str) -> SearchResults {
    registry
        .search_tools(TenantId(1), &ToolFilter::default(), query, 0)
        .expect("a valid search")
}

#[tokio::test]
async fn the_best_matches_come_first() {
    let registry = registry();
    let found = search(&registry, "list issues");
    assert_eq!(found.total_matches, 3, "{:?}", names(&found));
    assert_eq!(names(&found)[0], "github/list_issues");
    assert!(found.hits[0].score > found.hits[1].score);
    assert_eq!(
        names(&search(&registry, "pull requests"))[0],
        "github/get_pull_request",
        "plural finds singular, words inside a name are found"
    );
    assert_eq!(
        names(&search(&registry, "city"))[0],
        "weather/forecast",
        "a parameter"
    );
    assert_eq!(
        names(&search(&registry, "account"))[0],
        "github/list_issues",
        "a parameter's description"
    );
}

#[tokio::test]
async fn a_service_name_finds_its_tools() {
    let found = search(&registry(), "GitHub");
    assert_eq!(found.total_matches, 3);
    assert!(names(&found).iter().all(|name| name.starts_with("github/")));
    // Equal scores go in tool name order.
    assert_eq!(
        names(&found),
        [
            "github/create_issue",
            "github/get_pull_request",
            "github/list_issues"
        ]
    );
}

#[tokio::test]
async fn filters_limits_and_no_matches() {
    let registry = registry();
    let weather_only = ToolFilter {
        service: Some(crate::registry::ServiceName::parse("weather").expect("valid")),
        ..ToolFilter::default()
    };
    let found = registry
        .search_tools(TenantId(1), &weather_only, "list", 0)
        .expect("valid");
    assert_eq!(names(&found), ["weather/list_alerts"]);

    let one = registry
        .search_tools(TenantId(1), &ToolFilter::default(), "list issue weather", 1)
        .expect("valid");
    assert_eq!(one.hits.len(), 1);
    assert_eq!(
        one.total_matches, 4,
        "get_pull_request holds none of the words"
    );

    let retry = ToolFilter {
        capability: Some(Capability::Retry),
        ..ToolFilter::default()
    };
    assert_eq!(
        registry
            .search_tools(TenantId(1), &retry, "list", 0)
            .expect("valid")
            .total_matches,
        0
    );
    assert_eq!(search(&registry, "kubernetes").total_matches, 0);
    assert_eq!(
        registry
            .search_tools(TenantId(2), &ToolFilter::default(), "list", 0)
            .expect("valid")
            .total_matches,
        0,
        "another tenant's tools are not searched"
    );
}

#[tokio::test]
async fn bad_queries_and_limits_name_the_field() {
    let registry = registry();
    for (query, max_results, field, says) in [
        ("", 0, "query", "empty"),
        ("   ", 0, "query", "empty"),
        ("the of with", 0, "query", "no words to search for"),
        (&"x".repeat(MAX_QUERY_BYTES + 1), 0, "query", "at most 1024"),
        ("list", -1, "max_results", "1 to 100"),
        ("list", 101, "max_results", "1 to 100"),
    ] {
        let error = registry
            .search_tools(TenantId(1), &ToolFilter::default(), query, max_results)
            .expect_err("refused");
        let RegistryError::InvalidArgument(violations) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(violations[0].field, field);
        assert!(violations[0].description.contains(says), "{error}");
    }
    let many: String = (0..40).map(|n| format!("word{n} ")).collect();
    assert!(
        SearchQuery::parse(&many).is_err(),
        "more than 32 distinct words"
    );
}

/// Tools whose documents tie are ordered by tool name, then service name, wherever the limit
/// cuts through them: every limited answer is the start of the full one.
#[tokio::test]
async fn ties_are_cut_by_name_at_any_limit() {
    let registry = empty_registry();
    for service in ["south", "east", "north"] {
        let mut tools: Vec<ToolSpec> = ["t_5", "t_2", "t_4", "t_1", "t_3"]
            .map(|name| tool(name, "Shared words here.", json!({"type": "object"})))
            .into();
        if service == "north" {
            tools.push(tool(
                "t_9",
                "Shared shared words words.",
                json!({"type": "object"}),
            ));
        }
        register(&registry, service, tools);
    }
    let ranked = |limit: i32| {
        registry
            .search_tools(TenantId(1), &ToolFilter::default(), "shared words", limit)
            .expect("valid")
    };
    let all = ranked(100);
    assert_eq!(all.total_matches, 16);
    assert_eq!(
        names(&all)[..5],
        [
            "north/t_9",
            "east/t_1",
            "north/t_1",
            "south/t_1",
            "east/t_2"
        ]
    );
    for limit in 1..=17 {
        let found = ranked(limit);
        assert_eq!(found.total_matches, 16);
        assert_eq!(
            names(&found),
            names(&all)[..(limit as usize).min(16)],
            "limit {limit}"
        );
    }
}
