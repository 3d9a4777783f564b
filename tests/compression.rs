//! Requests compressed with gzip or deflate (as gRPC clients in other languages send them
//! when told to) are accepted by every service, `InvokeTool`'s own path included.

mod common;

use std::sync::atomic::Ordering;

use common::invoke_fixture::*;
use common::*;
use serde_json::json;
use tonic::codec::CompressionEncoding;
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

/// A compressed registration, listing and invocation (a large, compressible input) are
/// served; their answers come back uncompressed.
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
