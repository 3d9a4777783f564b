//! ListTools/ListServices filters and paging (stable under churn, within what clients read).

use crate::common;

use std::collections::{BTreeSet, HashMap};

use crate::preflight::requirement;
use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::pb;

async fn list_page(
    client: &mut pb::discovery_service_client::DiscoveryServiceClient<tonic::transport::Channel>,
    request: pb::ListToolsRequest,
) -> pb::ListToolsResponse {
    client
        .list_tools(request)
        .await
        .expect("list tools")
        .into_inner()
}

/// Filters by service, capability and name prefix combine with AND.
#[tokio::test(flavor = "multi_thread")]
async fn list_tools_filters() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut cached = simple_tool("get_model_for_language");
    cached.capabilities = vec![pb::ServiceCapability::Caching as i32];
    register_ok(
        &mut client,
        0,
        registration(
            "prompt-helper",
            vec![cached, simple_tool("generate_story_prompt")],
        ),
    )
    .await;
    register_ok(&mut client, 0, story_generator()).await;

    let by_service = list_page(
        &mut client,
        pb::ListToolsRequest {
            meta: meta(0),
            service_name: "story-generator".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        by_service
            .tools
            .iter()
            .map(|t| t.tool_name.as_str())
            .collect::<Vec<_>>(),
        ["generate_nodes", "generate_structure"]
    );

    let by_capability = list_page(
        &mut client,
        pb::ListToolsRequest {
            meta: meta(0),
            capability: pb::ServiceCapability::Caching as i32,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(by_capability.tools.len(), 1);
    assert_eq!(by_capability.tools[0].tool_name, "get_model_for_language");

    let by_prefix = list_page(
        &mut client,
        pb::ListToolsRequest {
            meta: meta(0),
            name_prefix: "generate_".into(),
            ..Default::default()
        },
    )
    .await;
    let names: Vec<_> = by_prefix
        .tools
        .iter()
        .map(|t| t.tool_name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "generate_nodes",
            "generate_story_prompt",
            "generate_structure"
        ]
    );

    let combined = list_page(
        &mut client,
        pb::ListToolsRequest {
            meta: meta(0),
            name_prefix: "generate_s".into(),
            service_name: "prompt-helper".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(combined.tools.len(), 1);

    let bad = client
        .list_tools(pb::ListToolsRequest {
            meta: meta(0),
            page_size: -1,
            ..Default::default()
        })
        .await
        .expect_err("negative page size");
    assert_eq!(bad.code(), Code::InvalidArgument);
}

/// A page token is bound to its filters, and garbage tokens are refused.
#[tokio::test(flavor = "multi_thread")]
async fn page_tokens_are_checked() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    register_ok(
        &mut client,
        0,
        registration(
            "svc",
            (0..5).map(|i| simple_tool(&format!("t{i}"))).collect(),
        ),
    )
    .await;
    let first = list_page(
        &mut client,
        pb::ListToolsRequest {
            meta: meta(0),
            page_size: 2,
            ..Default::default()
        },
    )
    .await;
    assert!(!first.next_page_token.is_empty());
    let other_filter = client
        .list_tools(pb::ListToolsRequest {
            meta: meta(0),
            page_size: 2,
            name_prefix: "t".into(),
            page_token: first.next_page_token.clone(),
            ..Default::default()
        })
        .await
        .expect_err("token of another query");
    assert_eq!(other_filter.code(), Code::InvalidArgument);
    assert_eq!(violations(&other_filter)[0].0, "page_token");
    let garbage = client
        .list_tools(pb::ListToolsRequest {
            meta: meta(0),
            page_token: "%%%".into(),
            ..Default::default()
        })
        .await
        .expect_err("garbage token");
    assert_eq!(garbage.code(), Code::InvalidArgument);
}

/// While services come and go between pages, no tool present throughout is skipped or repeated,
/// and pages stay sorted.
#[tokio::test(flavor = "multi_thread")]
async fn paging_is_stable_under_churn() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut leases = HashMap::new();
    for index in 0..30 {
        let service = format!("svc-{index:02}");
        let tools = vec![
            simple_tool(&format!("tool-{index:02}-a")),
            simple_tool(&format!("tool-{index:02}-b")),
        ];
        leases.insert(
            service.clone(),
            register_ok(&mut client, 0, registration(&service, tools))
                .await
                .lease_id,
        );
    }
    // Services 0-29 exist at the start; the even ones among 10..30 are removed during the listing.
    let removed: BTreeSet<usize> = (10..30).step_by(2).collect();
    let stable: BTreeSet<String> = (0..30)
        .filter(|index| !removed.contains(index))
        .flat_map(|index| [format!("tool-{index:02}-a"), format!("tool-{index:02}-b")])
        .collect();

    let mut seen = Vec::new();
    let mut token = String::new();
    let mut round = 0;
    loop {
        let page = list_page(
            &mut client,
            pb::ListToolsRequest {
                meta: meta(0),
                page_size: 7,
                page_token: token,
                ..Default::default()
            },
        )
        .await;
        seen.extend(page.tools.iter().map(|t| t.tool_name.clone()));
        // Churn: remove one service, add two new ones (one sorting before, one after the cursor).
        if let Some(index) = removed.iter().nth(round) {
            let service = format!("svc-{index:02}");
            deregister(&mut client, 0, &service, leases[&service].clone())
                .await
                .expect("deregister");
        }
        register_ok(
            &mut client,
            0,
            registration(
                &format!("new-early-{round}"),
                vec![simple_tool(&format!("aaa-{round}"))],
            ),
        )
        .await;
        register_ok(
            &mut client,
            0,
            registration(
                &format!("new-late-{round}"),
                vec![simple_tool(&format!("zzz-{round}"))],
            ),
        )
        .await;
        round += 1;
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no tool repeated: {seen:?}");
    assert!(
        seen.windows(2).all(|pair| pair[0] < pair[1]),
        "sorted: {seen:?}"
    );
    for tool in &stable {
        assert!(
            unique.contains(tool),
            "{tool} present throughout but skipped"
        );
    }
}

/// ListServices pages through every live service, sorted.
#[tokio::test(flavor = "multi_thread")]
async fn list_services_pages() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    for index in 0..5 {
        register_ok(
            &mut client,
            0,
            registration(&format!("svc-{index}"), vec![simple_tool("t")]),
        )
        .await;
    }
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_services(pb::ListServicesRequest {
                meta: meta(0),
                page_size: 2,
                page_token: token,
            })
            .await
            .expect("list")
            .into_inner();
        assert!(page.services.len() <= 2);
        names.extend(page.services.into_iter().map(|s| s.service_name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(names, ["svc-0", "svc-1", "svc-2", "svc-3", "svc-4"]);
}

/// Registers `count.0` services named `prefix` and a number in `tenant`, each of `count.1`
/// tools whose schemas describe themselves with `filler`.
async fn register_filled(
    client: &mut pb::discovery_service_client::DiscoveryServiceClient<tonic::transport::Channel>,
    tenant: u64,
    prefix: &str,
    count: (usize, usize),
    filler: &str,
) {
    for service in 0..count.0 {
        let tools = (0..count.1)
            .map(|index| {
                let schema = json!({"type": "object", "description": filler});
                tool(&format!("t{index}"), schema)
            })
            .collect();
        let named = registration(&format!("{prefix}{service}"), tools);
        register_ok(client, tenant, named).await;
    }
}

/// A page is cut short to stay within the 4 MiB a gRPC client reads by default, and the next
/// page goes on from where it stopped (a pre-flight check's services are cut short too): 100 services of 10 tools with 5 KB schemas (5 MB) are
/// listed over more than one page, each read by clients at their defaults, and every service
/// and tool is gathered once. Answered whole, the first page of services was 5 MB, which
/// every default client refused (OUT_OF_RANGE), `toolplane services` with it.
#[tokio::test(flavor = "multi_thread")]
async fn pages_stay_within_what_clients_read_by_default() {
    use toolplane::client::ToolplaneClient;
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    register_filled(&mut client, 0, "s", (100, 10), &"lorem ".repeat(850)).await;
    let first = client
        .list_services(pb::ListServicesRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("a page a default client reads")
        .into_inner();
    assert!(first.services.len() < 100, "{}", first.services.len());
    assert!(!first.next_page_token.is_empty());
    let tools = list_page(
        &mut client,
        pb::ListToolsRequest {
            meta: meta(0),
            page_size: 1000,
            ..Default::default()
        },
    )
    .await;
    assert!(tools.tools.len() < 1000, "{}", tools.tools.len());
    assert!(!tools.next_page_token.is_empty());
    let checked = client
        .preflight(pb::PreflightRequest {
            meta: meta(0),
            requirements: (0..100)
                .map(|service| requirement(&format!("s{service}"), &[], false))
                .collect(),
        })
        .await
        .expect("an answer a default client reads")
        .into_inner();
    assert!(checked.ok);
    assert!(!checked.services.is_empty() && checked.services.len() < 100);

    let rust = ToolplaneClient::connect(&server.endpoint(), toolplane::envelope::TenantId(0))
        .await
        .expect("connect");
    let services = rust.all_services().await.expect("every page");
    let names: BTreeSet<_> = services.iter().map(|s| s.service_name.clone()).collect();
    assert_eq!((services.len(), names.len()), (100, 100));
    let tools = rust.all_tools(None).await.expect("every page");
    let keys: BTreeSet<_> = (tools.iter())
        .map(|t| (t.service_name.clone(), t.tool_name.clone()))
        .collect();
    assert_eq!((tools.len(), keys.len()), (1000, 1000));

    // Search answers the best matches that fit: of 102 tools with 60 KB schemas (6 MB), fewer
    // than the 100 asked for.
    register_filled(&mut client, 1, "l", (3, 34), &"ipsum ".repeat(10_000)).await;
    let rust = ToolplaneClient::connect(&server.endpoint(), toolplane::envelope::TenantId(1))
        .await
        .expect("connect");
    let found = rust
        .search_tools("ipsum", &Default::default(), 100)
        .await
        .expect("the matches that fit");
    assert!(!found.matches.is_empty() && found.matches.len() < 100);
    assert_eq!(found.total_matches, 102);
}
