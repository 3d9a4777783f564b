//! Domains and categories against the real server: inferred from names or declared at
//! registration, returned by every read, filtering ListTools and SearchTools (pages bound to
//! them), refused with the field named when malformed (nothing stored changes), shown by
//! `toolplane tools`, and written by `toolplane export-rtfs` into RTFS capabilities.

use crate::common;

use common::process::{ServerProcess, toolplane_cli};
use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::client::{ToolSelection, ToolplaneClient};
use toolplane::envelope::TenantId;
use toolplane::pb;

type Discovery = pb::discovery_service_client::DiscoveryServiceClient<tonic::transport::Channel>;

fn github() -> pb::ServiceRegistration {
    registration(
        "github-mcp",
        [
            "list_issues",
            "createIssue",
            "get_pull_request",
            "search_code",
        ]
        .into_iter()
        .map(|name| tool(name, json!({})))
        .collect(),
    )
}

fn billing(categories: &[&str]) -> pb::ServiceRegistration {
    let mut declared = tool("ledger", json!({}));
    declared.domains = vec!["finance".into(), "finance.invoices".into()];
    declared.categories = categories.iter().map(|c| (*c).to_owned()).collect();
    registration(
        "billing",
        vec![declared, tool("aws_s3_delete_bucket", json!({}))],
    )
}

fn labelled(tools: &[pb::ToolRegistration]) -> Vec<(String, Vec<String>, Vec<String>)> {
    tools
        .iter()
        .map(|tool| {
            (
                tool.tool_name.clone(),
                tool.domains.clone(),
                tool.categories.clone(),
            )
        })
        .collect()
}

fn strings(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|label| (*label).to_owned()).collect()
}

async fn list(discovery: &mut Discovery, request: pb::ListToolsRequest) -> pb::ListToolsResponse {
    try_list(discovery, request).await.expect("lists")
}

async fn try_list(
    discovery: &mut Discovery,
    request: pb::ListToolsRequest,
) -> Result<pb::ListToolsResponse, tonic::Status> {
    discovery
        .list_tools(pb::ListToolsRequest {
            meta: meta(0),
            ..request
        })
        .await
        .map(tonic::Response::into_inner)
}

fn names(tools: &[pb::ToolRegistration]) -> Vec<&str> {
    tools.iter().map(|tool| tool.tool_name.as_str()).collect()
}

/// Inferred and declared labels come back on every read, and ListTools and SearchTools take
/// a domain or category and everything under it.
#[tokio::test(flavor = "multi_thread")]
async fn tools_carry_domains_and_categories_and_are_filtered_by_them() {
    let server = TestServer::start().await;
    let mut discovery = server.discovery().await;
    let registered = register_ok(&mut discovery, 0, github()).await;
    assert_eq!(
        labelled(&registered.tools),
        [
            (
                "createIssue".into(),
                strings(&["github", "github.issues"]),
                strings(&["crud.create"])
            ),
            (
                "get_pull_request".into(),
                strings(&["github", "github.pull_requests"]),
                strings(&["crud.read"])
            ),
            (
                "list_issues".into(),
                strings(&["github", "github.issues"]),
                strings(&["crud.read"])
            ),
            (
                "search_code".into(),
                strings(&["github", "github.codes"]),
                strings(&["crud.read", "search"])
            ),
        ]
    );
    register_ok(&mut discovery, 0, billing(&["crud.read"])).await;
    let all = list(&mut discovery, pb::ListToolsRequest::default()).await;
    let bucket = all
        .tools
        .iter()
        .find(|tool| tool.tool_name == "aws_s3_delete_bucket")
        .expect("listed");
    assert_eq!(
        (&bucket.domains, &bucket.categories),
        (
            &strings(&["billing", "billing.buckets"]),
            &strings(&["crud.delete"])
        ),
        "the words after a service's words are read: aws_s3 is not billing's"
    );

    for (domain, category, expected) in [
        (
            "github",
            "",
            vec![
                "createIssue",
                "get_pull_request",
                "list_issues",
                "search_code",
            ],
        ),
        ("github.issues", "", vec!["createIssue", "list_issues"]),
        ("github.iss", "", vec![]),
        ("finance", "", vec!["ledger"]),
        (
            "",
            "crud.read",
            vec!["get_pull_request", "ledger", "list_issues", "search_code"],
        ),
        (
            "",
            "crud",
            vec![
                "aws_s3_delete_bucket",
                "createIssue",
                "get_pull_request",
                "ledger",
                "list_issues",
                "search_code",
            ],
        ),
        ("", "search", vec!["search_code"]),
        (
            "github",
            "crud.read",
            vec!["get_pull_request", "list_issues", "search_code"],
        ),
    ] {
        let page = list(
            &mut discovery,
            pb::ListToolsRequest {
                domain: domain.into(),
                category: category.into(),
                ..Default::default()
            },
        )
        .await;
        assert_eq!(
            names(&page.tools),
            expected,
            "domain {domain:?} category {category:?}"
        );
    }

    let first = list(
        &mut discovery,
        pb::ListToolsRequest {
            domain: "github".into(),
            page_size: 1,
            ..Default::default()
        },
    )
    .await;
    let replayed = try_list(
        &mut discovery,
        pb::ListToolsRequest {
            domain: "finance".into(),
            page_size: 1,
            page_token: first.next_page_token.clone(),
            ..Default::default()
        },
    )
    .await
    .expect_err("a page token is bound to its filters");
    assert_eq!(replayed.code(), Code::InvalidArgument, "{replayed:?}");

    let client = ToolplaneClient::connect(&server.endpoint(), TenantId(0))
        .await
        .expect("connects");
    let read_issues = ToolSelection {
        domain: Some("github.issues".into()),
        category: Some("crud.read".into()),
        ..Default::default()
    };
    let found = client
        .search_tools("issues", &read_issues, 0)
        .await
        .expect("searches");
    let found: Vec<&str> = found
        .matches
        .iter()
        .filter_map(|found| found.tool.as_ref())
        .map(|tool| tool.tool_name.as_str())
        .collect();
    assert_eq!(found, ["list_issues"]);
    let deleting = client
        .tools_selected(&ToolSelection {
            category: Some("crud.delete".into()),
            ..Default::default()
        })
        .await
        .expect("lists");
    assert_eq!(names(&deleting), ["aws_s3_delete_bucket"]);
}

/// Declared labels that change are a new registration of the same definition: reads follow
/// at once, and the definition hash does not change.
#[tokio::test(flavor = "multi_thread")]
async fn declared_labels_can_change_without_changing_the_definition() {
    let server = TestServer::start().await;
    let mut discovery = server.discovery().await;
    let before = register_ok(&mut discovery, 0, billing(&["crud.read"])).await;
    let after = register_ok(&mut discovery, 0, billing(&["crud.update"])).await;
    let ledger = |tools: &[pb::ToolRegistration]| {
        tools
            .iter()
            .find(|tool| tool.tool_name == "ledger")
            .cloned()
            .expect("registered")
    };
    assert_eq!(
        ledger(&before.tools).definition_sha256,
        ledger(&after.tools).definition_sha256
    );
    let page = list(
        &mut discovery,
        pb::ListToolsRequest {
            category: "crud.update".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(names(&page.tools), ["ledger"]);
    let service = get_service(&mut discovery, 0, "billing")
        .await
        .expect("found");
    assert_eq!(ledger(&service.available_tools).categories, ["crud.update"]);
}

/// Malformed declarations and filters are INVALID_ARGUMENT naming the field; a refused
/// registration leaves the one stored before it as it was.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_labels_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    let mut discovery = server.discovery().await;
    register_ok(&mut discovery, 0, billing(&["crud.read"])).await;
    for (categories, says) in [
        (vec!["Crud.Read"], "lowercase"),
        (vec!["crud..read"], "dot-separated"),
        (vec!["x"; 17], "at most 16"),
    ] {
        let status = register(&mut discovery, 0, billing(&categories))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(reason(&status), "VALIDATION_FIELD", "{status:?}");
        let violations = violations(&status);
        assert_eq!(
            violations[0].0, "registration.tools[0].categories",
            "{violations:?}"
        );
        assert!(violations[0].1.contains(says), "{violations:?}");
    }
    let stored = get_service(&mut discovery, 0, "billing")
        .await
        .expect("still registered");
    assert_eq!(stored.available_tools[1].categories, ["crud.read"]);

    for (request, field) in [
        (
            pb::ListToolsRequest {
                domain: "GitHub".into(),
                ..Default::default()
            },
            "domain",
        ),
        (
            pb::ListToolsRequest {
                category: "crud.".into(),
                ..Default::default()
            },
            "category",
        ),
    ] {
        let status = try_list(&mut discovery, request)
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(reason(&status), "VALIDATION_FIELD", "{status:?}");
        assert_eq!(violations(&status)[0].0, field, "{status:?}");
    }
    let status = discovery
        .search_tools(pb::SearchToolsRequest {
            meta: meta(0),
            query: "ledger".into(),
            domain: "a b".into(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(violations(&status)[0].0, "domain", "{status:?}");
}

/// `toolplane tools` shows the labels and takes `--domain` and `--category`.
#[tokio::test(flavor = "multi_thread")]
async fn the_tools_command_shows_and_filters_by_labels() {
    let server = ServerProcess::start(&[]);
    let endpoint = server.endpoint();
    let mut discovery = Discovery::connect(endpoint.clone())
        .await
        .expect("connects");
    register_ok(&mut discovery, 0, github()).await;

    let (code, table, stderr) = toolplane_cli(&["tools", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.contains("CATEGORIES") && header.contains("DOMAINS"),
        "{table}"
    );
    assert!(
        table.lines().any(|line| line.contains("search_code")
            && line.contains("crud.read,search")
            && line.contains("github,github.codes")),
        "{table}"
    );

    let (code, json_text, stderr) = toolplane_cli(&[
        "tools",
        "--domain",
        "github.issues",
        "--category",
        "crud.create",
        "--json",
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let tools: serde_json::Value = serde_json::from_str(&json_text).expect("JSON");
    assert_eq!(
        tools,
        json!([{
            "tool_name": "createIssue",
            "service_name": "github-mcp",
            "service_version": "0.0.1",
            "description": "createIssue does things",
            "capabilities": tools[0]["capabilities"],
            "timeout_ms": null,
            "definition_sha256": tools[0]["definition_sha256"],
            "domains": ["github", "github.issues"],
            "categories": ["crud.create"],
            "tool_schema": {},
            "output_schema": null,
        }])
    );

    let (code, _, stderr) = toolplane_cli(&["tools", "--domain", "Bad", "--endpoint", &endpoint]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("domain"), "{stderr}");
}

/// `toolplane export-rtfs` writes each live tool as the seed's RTFS capability definition,
/// with its schema converted, its provider, domains and categories.
#[tokio::test(flavor = "multi_thread")]
async fn export_rtfs_writes_a_capability_per_tool() {
    let server = ServerProcess::start(&[]);
    let endpoint = server.endpoint();
    let mut discovery = Discovery::connect(endpoint.clone())
        .await
        .expect("connects");
    let schema = json!({
        "type": "object", "required": ["owner", "repo"],
        "properties": {
            "owner": {"type": "string"}, "repo": {"type": "string"},
            "state": {"type": "string", "enum": ["open", "closed", "all"]}
        }
    });
    let mut list_issues = tool("list_issues", schema);
    list_issues.description = "List issues in a GitHub repository".into();
    register_ok(
        &mut discovery,
        0,
        registration("github-mcp", vec![list_issues]),
    )
    .await;
    register_ok(&mut discovery, 0, billing(&["crud.read"])).await;
    let dir = tempfile::tempdir().expect("a directory");
    let target = dir.path().join("pending");
    let target = target.to_str().expect("UTF-8");

    let (code, stdout, stderr) = toolplane_cli(&[
        "export-rtfs",
        target,
        "--service",
        "github-mcp",
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let file = format!("{target}/github-mcp/list_issues.rtfs");
    assert_eq!(stdout.trim(), file);
    let written = std::fs::read_to_string(&file).expect("written");
    assert_eq!(
        written,
        "(capability :grpc.github-mcp.list_issues\n  :version \"0.0.1\"\n  \
         :description \"List issues in a GitHub repository\"\n  \
         :input-schema [:map\n                  [:owner :string]\n                  \
         [:repo :string]\n                  [:state {:optional true} :string]]\n  \
         :provider {:type :grpc\n             :endpoint \"http://127.0.0.1:7001\"\n             \
         :service \"github-mcp\"\n             :tool-name \"list_issues\"}\n  \
         :domains [\"github\" \"github.issues\"]\n  :categories [\"crud.read\"])\n"
    );

    let (code, stdout, stderr) =
        toolplane_cli(&["export-rtfs", target, "--json", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    let files: Vec<String> = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(files.len(), 3, "{files:?}");
    let ledger = std::fs::read_to_string(format!("{target}/billing/ledger.rtfs")).expect("written");
    assert!(
        ledger.contains(":domains [\"finance\" \"finance.invoices\"]"),
        "{ledger}"
    );

    let (code, _, stderr) = toolplane_cli(&[
        "export-rtfs",
        target,
        "--service",
        "nobody",
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no live service nobody"), "{stderr}");
}
