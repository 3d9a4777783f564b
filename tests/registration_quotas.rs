//! A tenant's quotas of services, tools and tool bytes: a registration over them is refused
//! RESOURCE_EXHAUSTED (ErrorInfo and QuotaFailure) with nothing stored, and room comes back as
//! registrations go.

use crate::common;

use common::*;
use tonic::Code;
use toolplane::pb;

/// A tenant at its quota of services cannot add another (RESOURCE_EXHAUSTED with ErrorInfo and
/// QuotaFailure, nothing stored), but can re-register the ones it has; other tenants are not
/// held to its count; deregistering one makes room.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_service_quota_is_refused() {
    use tonic_types::StatusExt;
    let mut options = test_options();
    options.limits.max_services_per_tenant = 2;
    let server = TestServer::start_with(options).await;
    let mut client = server.discovery().await;
    register_ok(&mut client, 0, registration("one", vec![simple_tool("a")])).await;
    let two = register_ok(&mut client, 0, registration("two", vec![simple_tool("b")])).await;

    let error = register(
        &mut client,
        0,
        registration("three", vec![simple_tool("c")]),
    )
    .await
    .expect_err("over the quota");
    assert_eq!(error.code(), Code::ResourceExhausted, "{error:?}");
    assert_eq!(reason(&error), "RESOURCE_QUOTA_EXCEEDED");
    assert!(
        error.message().contains("max_services_per_tenant") && error.message().contains("three"),
        "the message names the limit and the service: {}",
        error.message()
    );
    let quota = error
        .get_error_details()
        .quota_failure()
        .cloned()
        .expect("QuotaFailure details");
    assert_eq!(quota.violations.len(), 1);
    assert_eq!(quota.violations[0].subject, "tenants/0/services");
    assert!(
        get_service(&mut client, 0, "three").await.is_err(),
        "nothing stored"
    );
    for kept in ["one", "two"] {
        assert!(
            get_service(&mut client, 0, kept).await.is_ok(),
            "{kept} kept"
        );
    }

    register_ok(&mut client, 0, registration("one", vec![simple_tool("a2")])).await;
    register_ok(
        &mut client,
        7,
        registration("three", vec![simple_tool("c")]),
    )
    .await;

    deregister(&mut client, 0, "two", two.lease_id)
        .await
        .expect("deregistered");
    register_ok(
        &mut client,
        0,
        registration("three", vec![simple_tool("c")]),
    )
    .await;
}

/// A tenant may hold at most `max_tools_per_tenant` tools and `max_tool_bytes_per_tenant`
/// bytes of tool definitions across its services: a registration that would take it over is
/// refused RESOURCE_EXHAUSTED with ErrorInfo and QuotaFailure naming the quota, and nothing is
/// stored; a re-registration counts in place of the old one, and deregistering makes room.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_tool_quotas_is_refused() {
    use tonic_types::StatusExt;
    // Tools of about 1,000 bytes each: three fit either quota, four do not.
    let big_tool = |name: &str| pb::ToolRegistration {
        description: "d".repeat(1000),
        ..simple_tool(name)
    };
    for (setting, subject) in [
        ("max_tools_per_tenant", "tenants/0/tools"),
        ("max_tool_bytes_per_tenant", "tenants/0/tool_bytes"),
    ] {
        let mut options = test_options();
        if setting == "max_tools_per_tenant" {
            options.limits.max_tools_per_tenant = 3;
        } else {
            options.limits.max_tool_bytes_per_tenant = 3500;
        }
        let server = TestServer::start_with(options).await;
        let mut client = server.discovery().await;
        register_ok(&mut client, 0, registration("one", vec![big_tool("a")])).await;
        let two = registration("two", vec![big_tool("b"), big_tool("c")]);
        register_ok(&mut client, 0, two).await;

        let error = register(&mut client, 0, registration("three", vec![big_tool("d")]))
            .await
            .expect_err("over the quota");
        assert_eq!(
            error.code(),
            Code::ResourceExhausted,
            "{setting}: {error:?}"
        );
        assert_eq!(reason(&error), "RESOURCE_QUOTA_EXCEEDED");
        assert!(
            error.message().contains(setting) && error.message().contains("three"),
            "the message names the setting and the service: {}",
            error.message()
        );
        let details = error.get_error_details();
        let quota = details.quota_failure().expect("QuotaFailure details");
        assert_eq!(quota.violations[0].subject, subject);
        let info = details.error_info().expect("ErrorInfo");
        assert!(info.metadata.contains_key(setting), "{info:?}");
        assert!(info.metadata.contains_key("would_have"), "{info:?}");
        assert!(
            get_service(&mut client, 0, "three").await.is_err(),
            "nothing stored"
        );
        assert_eq!(
            get_service(&mut client, 0, "two")
                .await
                .expect("kept")
                .available_tools
                .len(),
            2
        );

        // Adding a tool to a service it has is over the quota too; swapping one is not.
        let grown = registration("two", vec![big_tool("b"), big_tool("c"), big_tool("d")]);
        let error = register(&mut client, 0, grown)
            .await
            .expect_err("growing over the quota");
        assert_eq!(error.code(), Code::ResourceExhausted, "{setting}");
        let swapped = register_ok(
            &mut client,
            0,
            registration("two", vec![big_tool("b"), big_tool("e")]),
        )
        .await;
        register_ok(&mut client, 7, registration("three", vec![big_tool("d")])).await;

        deregister(&mut client, 0, "two", swapped.lease_id)
            .await
            .expect("deregistered");
        register_ok(&mut client, 0, registration("three", vec![big_tool("d")])).await;
    }
}
