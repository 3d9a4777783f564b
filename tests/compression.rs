//! Requests compressed with gzip or deflate (as gRPC clients in other languages send them
//! when told to) are accepted by every service, the own paths of `InvokeTool`, `ListTools`
//! and `WatchServices` included; responses
//! are compressed as `response_compression` says: as the request was (`mirror`, the default),
//! with gzip whenever the caller accepts it (`gzip`), or never (`off`).

use crate::common;

use std::sync::atomic::Ordering;

use common::invoke_fixture::*;
use common::*;
use serde_json::json;
use tonic::codec::CompressionEncoding;
use toolplane::grpc::ServerOptions;
use toolplane::grpc::response_compression::ResponseCompression;
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

/// A compressed registration, listing and invocation (a large, compressible input) are
/// served.
#[tokio::test(flavor = "multi_thread")]
async fn compressed_requests_are_accepted() {
    let setup = setup().await;
    for encoding in [CompressionEncoding::Gzip, CompressionEncoding::Deflate] {
        let mut discovery =
            DiscoveryServiceClient::new(setup.server.channel().await).send_compressed(encoding);
        register_ok(&mut discovery, 0, story_generator()).await;
        let listed = discovery
            .list_services(pb::ListServicesRequest {
                meta: meta(0),
                ..Default::default()
            })
            .await
            .expect("a compressed listing request");
        assert_eq!(listed.into_inner().services.len(), 2, "{encoding:?}");

        let mut invoke =
            ToolInvokeServiceClient::new(setup.server.channel().await).send_compressed(encoding);
        let text = "compressible ".repeat(20_000);
        let answer = invoke
            .invoke_tool(request("echo", json!({"n": 1, "text": text})))
            .await
            .expect("a compressed invocation")
            .into_inner();
        let output =
            toolplane::json::value_to_json(answer.output.as_ref().expect("output")).expect("JSON");
        assert_eq!(output["text"], json!(text), "{encoding:?}");
    }
    assert_eq!(setup.probes.echo_calls.load(Ordering::SeqCst), 2);
}

/// A request message over 4 MiB, plain or once decompressed, is refused RESOURCE_EXHAUSTED
/// (as gRPC's status codes have it) with ErrorInfo giving its size and the limit, before any
/// handler runs; nothing is registered and the echo tool is not called.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_over_the_message_limit_is_resource_exhausted() {
    use tonic_types::StatusExt;
    let setup = setup().await;
    let text = "x".repeat(5 * 1024 * 1024);
    for encoding in [None, Some(CompressionEncoding::Gzip)] {
        let mut invoke = ToolInvokeServiceClient::new(setup.server.channel().await);
        if let Some(encoding) = encoding {
            invoke = invoke.send_compressed(encoding);
        }
        let refused = invoke
            .invoke_tool(request("echo", json!({"n": 1, "text": text})))
            .await
            .expect_err("over 4 MiB");
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{encoding:?}: {refused:?}"
        );
        assert!(refused.message().contains("4194304"), "{refused:?}");
        let info = refused.get_error_details().error_info().cloned();
        let info = info.expect("ErrorInfo");
        assert_eq!(info.reason, "RESOURCE_MESSAGE_TOO_LARGE");
        assert_eq!(info.metadata["limit_bytes"], "4194304");
        // Plain, tonic reads the size from the message's prefix; compressed, it stops at
        // the limit while decompressing.
        assert_eq!(
            info.metadata.contains_key("message_bytes"),
            encoding.is_none(),
            "{info:?}"
        );
    }
    assert_eq!(setup.probes.echo_calls.load(Ordering::SeqCst), 0);

    let mut discovery = DiscoveryServiceClient::new(setup.server.channel().await);
    let mut big = story_generator();
    big.service_name = "too-big".into();
    big.tools[0].description = text.clone();
    let refused = register(&mut discovery, 0, big)
        .await
        .expect_err("over 4 MiB");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(get_service(&mut discovery, 0, "too-big").await.is_err());
}

/// The `grpc-encoding` a response came back with (`None`: plain).
fn encoding_of<T>(response: &tonic::Response<T>) -> Option<String> {
    response
        .metadata()
        .get("grpc-encoding")
        .map(|value| value.to_str().expect("ASCII").to_owned())
        .filter(|encoding| encoding != "identity")
}

/// The encodings a ListServices, an InvokeTool, a WatchServices and a ListTools response came
/// back with, each sent compressed with `sent` (or plain) by a caller accepting gzip and
/// deflate.
async fn response_encodings(
    setup: &Setup,
    sent: Option<CompressionEncoding>,
) -> [Option<String>; 4] {
    let channel = setup.server.channel().await;
    let mut discovery = DiscoveryServiceClient::new(channel.clone())
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate);
    let mut invoke = ToolInvokeServiceClient::new(channel)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate);
    if let Some(encoding) = sent {
        discovery = discovery.send_compressed(encoding);
        invoke = invoke.send_compressed(encoding);
    }
    let listed = discovery
        .list_services(pb::ListServicesRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("listed");
    assert_eq!(listed.get_ref().services.len(), 1);
    let text = "compressible ".repeat(1_000);
    let invoked = invoke
        .invoke_tool(request("echo", json!({"n": 1, "text": text})))
        .await
        .expect("invoked");
    let output = invoked.get_ref().output.as_ref().expect("output");
    let output = toolplane::json::value_to_json(output).expect("JSON");
    assert_eq!(output["text"], json!(text));
    let mut watched = discovery
        .watch_services(pb::WatchServicesRequest {
            meta: meta(0),
            service_name: String::new(),
        })
        .await
        .expect("watching");
    let first = watched.get_mut().message().await.expect("a message");
    let event = first.and_then(|message| message.event).expect("an event");
    assert_eq!(event.r#type, pb::ServiceEventType::Added as i32);
    let tools = event.service.expect("the service").available_tools;
    assert!(!tools.is_empty() && tools[0].tool_schema.is_some());
    let tools = discovery
        .list_tools(pb::ListToolsRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("tools listed");
    assert!(
        tools
            .get_ref()
            .tools
            .iter()
            .any(|tool| tool.tool_name == "echo")
    );
    [
        encoding_of(&listed),
        encoding_of(&invoked),
        encoding_of(&watched),
        encoding_of(&tools),
    ]
}

/// By default a response is compressed as its request was, and only then: a caller that
/// sends plain requests gets plain responses although it accepts gzip (most gRPC libraries
/// advertise it unasked).
#[tokio::test(flavor = "multi_thread")]
async fn responses_are_compressed_as_their_requests_were_by_default() {
    let setup = setup().await;
    let both = |encoding: &str| [(); 4].map(|()| Some(encoding.to_owned()));
    assert_eq!(
        response_encodings(&setup, None).await,
        [None, None, None, None]
    );
    assert_eq!(
        response_encodings(&setup, Some(CompressionEncoding::Gzip)).await,
        both("gzip")
    );
    assert_eq!(
        response_encodings(&setup, Some(CompressionEncoding::Deflate)).await,
        both("deflate")
    );
}

/// `response_compression = "gzip"` compresses every response to a caller accepting gzip;
/// `"off"` none, even to a caller compressing its requests.
#[tokio::test(flavor = "multi_thread")]
async fn responses_are_compressed_always_or_never_as_configured() {
    let options = |mode| ServerOptions {
        response_compression: mode,
        ..test_options()
    };
    let setup = setup_with(options(ResponseCompression::Gzip)).await;
    let gzip = [(); 4].map(|()| Some("gzip".to_owned()));
    assert_eq!(response_encodings(&setup, None).await, gzip);
    let setup = setup_with(options(ResponseCompression::Off)).await;
    assert_eq!(
        response_encodings(&setup, Some(CompressionEncoding::Gzip)).await,
        [None, None, None, None]
    );
}
