//! AgentService's bounds through the real server: oversized requests, pages within what
//! clients read, the per-tenant agent quota, and a conversation's bytes.

use crate::common;

use common::agent_fixture::*;
use common::*;
use tonic::Code;
use toolplane::pb;

/// An oversized name, agent id, system prompt or list of allowed tools is refused
/// INVALID_ARGUMENT naming the field, in a message that gives its size rather than repeating it
/// (a status's message travels in a trailer, which gRPC clients bound to a few KB); an agent at
/// the limits is created, and an agent id of the longest name is looked up as ever.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_agent_requests_are_refused_without_being_repeated() {
    use toolplane::grpc::agent::{MAX_ALLOWED_TOOLS, MAX_SYSTEM_PROMPT_BYTES};

    let server = TestServer::start().await;
    let mut client = agents(&server).await;
    let huge = "x".repeat(100_000);
    let create =
        |name: &str, system_prompt: String, allowed_tools: Vec<String>| pb::CreateAgentRequest {
            meta: meta(0),
            name: name.to_owned(),
            system_prompt,
            allowed_tools,
            ..Default::default()
        };
    let refusals = [
        ("name", create(&huge, String::new(), Vec::new())),
        (
            "system_prompt",
            create("p", "p".repeat(MAX_SYSTEM_PROMPT_BYTES + 1), Vec::new()),
        ),
        (
            "allowed_tools",
            create(
                "t",
                String::new(),
                vec!["tool".to_owned(); MAX_ALLOWED_TOOLS + 1],
            ),
        ),
    ];
    for (field, request) in refusals {
        let refused = client.create_agent(request).await.expect_err(field);
        assert_eq!(refused.code(), Code::InvalidArgument, "{field}");
        assert_eq!(violations(&refused)[0].0, field);
        assert!(
            refused.message().len() < 300,
            "{field}: {}",
            refused.message()
        );
    }
    let by_id = client
        .get_agent(pb::GetAgentRequest {
            meta: meta(0),
            agent_id: huge.clone(),
        })
        .await
        .expect_err("no agent has such an id");
    assert_eq!(by_id.code(), Code::InvalidArgument);
    assert_eq!(violations(&by_id)[0].0, "agent_id");
    assert!(
        by_id.message().contains("100000 bytes"),
        "{}",
        by_id.message()
    );
    let listed = client
        .list_agents(pb::ListAgentsRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("listed");
    assert!(listed.into_inner().agents.is_empty(), "nothing was created");

    let longest = "n".repeat(64);
    client
        .create_agent(create(
            &longest,
            "p".repeat(MAX_SYSTEM_PROMPT_BYTES),
            vec!["tool".to_owned(); MAX_ALLOWED_TOOLS],
        ))
        .await
        .expect("an agent at the limits");
    assert_eq!(get(&mut client, &longest).await.name, longest);
}

/// A page of agents is cut short to stay within the 4 MiB a gRPC client reads by default, the
/// next page going on from there: four agents at the limits (a 256 KiB prompt and 10,000
/// allowed tools of 128 characters, 1.5 MB each) are listed over more than one page. Answered
/// whole, the page was 6 MB, which a default client refused (OUT_OF_RANGE).
#[tokio::test(flavor = "multi_thread")]
async fn pages_of_agents_stay_within_what_clients_read_by_default() {
    use toolplane::grpc::agent::{MAX_ALLOWED_TOOLS, MAX_SYSTEM_PROMPT_BYTES};

    let server = TestServer::start().await;
    let mut client = agents(&server).await;
    let tools: Vec<String> = (0..MAX_ALLOWED_TOOLS)
        .map(|index| format!("{index:0>128}"))
        .collect();
    for index in 0..4 {
        client
            .create_agent(pb::CreateAgentRequest {
                meta: meta(0),
                name: format!("large-{index}"),
                system_prompt: "p".repeat(MAX_SYSTEM_PROMPT_BYTES),
                allowed_tools: tools.clone(),
                ..Default::default()
            })
            .await
            .expect("an agent at the limits");
    }
    let mut names = Vec::new();
    let mut page_token = String::new();
    let mut pages = 0;
    loop {
        let page = client
            .list_agents(pb::ListAgentsRequest {
                meta: meta(0),
                page_token,
                ..Default::default()
            })
            .await
            .expect("a page a default client reads")
            .into_inner();
        pages += 1;
        names.extend(page.agents.into_iter().map(|agent| agent.name));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(names, ["large-0", "large-1", "large-2", "large-3"]);
    assert!(pages > 1, "{pages} page");
}

/// A tenant at its `max_agents_per_tenant` is refused RESOURCE_EXHAUSTED with QuotaFailure,
/// keeps the agents it has, and gets room back by deleting one; other tenants are not held
/// to its count.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_agent_quota_is_refused() {
    let mut options = test_options();
    options.max_agents_per_tenant = 2;
    let server = TestServer::start_with(options).await;
    let mut client = agents(&server).await;
    create(&mut client, "first", &[]).await;
    create(&mut client, "second", &[]).await;
    let create_in = |tenant: u64, name: &str| pb::CreateAgentRequest {
        meta: meta(tenant),
        name: name.into(),
        ..Default::default()
    };
    let error = client
        .create_agent(create_in(0, "third"))
        .await
        .expect_err("over the quota");
    assert_eq!(error.code(), Code::ResourceExhausted);
    assert_eq!(reason(&error), "RESOURCE_QUOTA_EXCEEDED");
    assert!(
        error.message().contains("max_agents_per_tenant"),
        "the message names the setting: {}",
        error.message()
    );
    use tonic_types::StatusExt;
    let details = error.get_error_details();
    let quota = details.quota_failure().expect("QuotaFailure");
    assert_eq!(quota.violations[0].subject, "tenants/0/agents");
    assert_eq!(
        details.error_info().expect("ErrorInfo").metadata["max_agents_per_tenant"],
        "2"
    );

    let listed = client
        .list_agents(pb::ListAgentsRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner()
        .agents;
    let names: Vec<_> = listed.iter().map(|agent| agent.name.as_str()).collect();
    assert_eq!(names, ["first", "second"], "nothing stored, nothing lost");

    client
        .create_agent(create_in(4, "third"))
        .await
        .expect("another tenant has its own count");
    client
        .delete_agent(pb::DeleteAgentRequest {
            meta: meta(0),
            agent_id: "first".into(),
        })
        .await
        .expect("delete");
    client
        .create_agent(create_in(0, "third"))
        .await
        .expect("deleting made room");
}

/// A conversation keeps at most `max_conversation_bytes` of messages: older whole turns go
/// first, and a request whose own messages are larger is refused INVALID_ARGUMENT with the
/// conversation left as it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_keeps_its_newest_turns_within_its_bytes() {
    let mut options = test_options();
    options.max_conversation_bytes = 600;
    let server = TestServer::start_with(options).await;
    let mut client = agents(&server).await;
    create(&mut client, "talker", &[]).await;
    for turn in 0..8 {
        let text = format!("turn {turn}: {}", "x".repeat(60));
        client
            .complete(complete_request("talker", &text, &format!("c{turn}")))
            .await
            .expect("a turn");
    }
    let kept = messages(&mut client, "talker").await;
    let bytes: usize = kept.iter().map(|message| message.content.len()).sum();
    assert!(bytes <= 600, "{bytes} bytes kept");
    assert_eq!(kept[0].role, pb::Role::User as i32, "whole turns: {kept:?}");
    assert!(kept[0].content.starts_with("turn "), "{kept:?}");
    assert!(
        !kept
            .iter()
            .any(|message| message.content.starts_with("turn 0:")),
        "the oldest turn went: {kept:?}"
    );
    assert!(
        kept.iter()
            .any(|message| message.content.starts_with("turn 7:")),
        "the newest turn stays: {kept:?}"
    );

    let error = client
        .complete(complete_request("talker", &"y".repeat(601), "too-big"))
        .await
        .expect_err("larger than a conversation keeps");
    assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
    assert!(
        error.message().contains("max_conversation_bytes"),
        "{}",
        error.message()
    );
    assert_eq!(
        messages(&mut client, "talker").await,
        kept,
        "nothing changed"
    );
}
