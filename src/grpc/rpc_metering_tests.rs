use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, poll_fn};
use tower::ServiceExt;

use super::*;
use crate::grpc::rpc_stats::MethodSnapshot;

const GET_TOOL: &str = "/toolplane.v1.DiscoveryService/GetTool";

/// A body of the frames it was given.
struct Frames(VecDeque<Frame<Bytes>>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

fn trailers(code: Code) -> Frame<Bytes> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", (code as i32).into());
    Frame::trailers(trailers)
}

/// A service answering with [`Frames`].
type Answering =
    tower::util::BoxCloneService<http::Request<()>, http::Response<Frames>, Infallible>;

/// Answers with `frames`, after `delay`, and with a `grpc-status` header when `status` is set.
fn answering(
    status: Option<Code>,
    frames: fn() -> Vec<Frame<Bytes>>,
    delay: Duration,
) -> RpcMetering<Answering> {
    let stats = RpcStats::for_services(
        &[crate::pb::FILE_DESCRIPTOR_SET],
        &["toolplane.v1.DiscoveryService"],
    )
    .expect("descriptors decode");
    let service = Answering::new(tower::service_fn(move |_: http::Request<()>| {
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let mut answer = http::Response::new(Frames(frames().into()));
            if let Some(code) = status {
                answer
                    .headers_mut()
                    .insert("grpc-status", (code as i32).into());
            }
            Ok::<_, Infallible>(answer)
        }) as BoxFuture<'static, _>
    }));
    RpcMeteringLayer::new(Some(Arc::new(stats)), Spans::off()).layer(service)
}

fn request(path: &str, deadline: Option<Instant>) -> http::Request<()> {
    let mut request = http::Request::builder()
        .uri(path)
        .body(())
        .expect("a valid request");
    if let Some(at) = deadline {
        request.extensions_mut().insert(CallDeadline(at));
    }
    request
}

/// One message, then trailers saying OK.
fn message_then_ok() -> Vec<Frame<Bytes>> {
    vec![
        Frame::data(Bytes::from_static(b"message")),
        trailers(Code::Ok),
    ]
}

/// The answer to a call to `path` (its body not yet read).
async fn answer_of(
    metering: &RpcMetering<Answering>,
    path: &str,
) -> http::Response<MeteredBody<Frames>> {
    metering
        .clone()
        .oneshot(request(path, None))
        .await
        .expect("answered")
}

fn snapshot<S>(metering: &RpcMetering<S>, path: &str) -> MethodSnapshot {
    let stats = metering.stats.as_ref().expect("counting");
    stats.methods()[stats.method_of(path)].snapshot()
}

async fn read_to_end<B: http_body::Body + Unpin>(mut body: B) {
    while poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))
        .await
        .is_some()
    {}
}

#[tokio::test]
async fn a_call_is_counted_by_the_status_its_trailers_carry() {
    let metering = answering(None, message_then_ok, Duration::ZERO);
    let answer = answer_of(&metering, GET_TOOL).await;
    let before_trailers = snapshot(&metering, GET_TOOL);
    assert_eq!(before_trailers.started, 1);
    assert_eq!(before_trailers.handled.iter().sum::<u64>(), 0, "not yet");
    read_to_end(answer.into_body()).await;
    let counted = snapshot(&metering, GET_TOOL);
    assert_eq!(counted.handled[Code::Ok as usize], 1);
    assert_eq!(counted.buckets.iter().sum::<u64>(), 1);
}

#[tokio::test]
async fn a_trailers_only_answer_is_counted_by_its_header() {
    let metering = answering(Some(Code::NotFound), Vec::new, Duration::ZERO);
    let answer = answer_of(&metering, GET_TOOL).await;
    assert_eq!(
        snapshot(&metering, GET_TOOL).handled[Code::NotFound as usize],
        1
    );
    read_to_end(answer.into_body()).await;
    let counted = snapshot(&metering, GET_TOOL);
    assert_eq!(counted.handled.iter().sum::<u64>(), 1, "counted once");
}

#[tokio::test]
async fn a_call_dropped_before_its_answer_counts_as_its_caller_saw_it() {
    let metering = answering(None, Vec::new, Duration::from_secs(60));
    let gone = tokio::time::timeout(
        Duration::from_millis(20),
        metering.clone().oneshot(request(GET_TOOL, None)),
    )
    .await;
    assert!(gone.is_err(), "still waiting");
    assert_eq!(
        snapshot(&metering, GET_TOOL).handled[Code::Cancelled as usize],
        1
    );

    let deadline = Instant::now() + Duration::from_millis(20);
    let late = tokio::time::timeout(
        Duration::from_millis(40),
        metering.clone().oneshot(request(GET_TOOL, Some(deadline))),
    )
    .await;
    assert!(late.is_err(), "still waiting");
    let counted = snapshot(&metering, GET_TOOL);
    assert_eq!(counted.handled[Code::DeadlineExceeded as usize], 1);
    assert_eq!(counted.started, 2);
}

#[tokio::test]
async fn an_answer_dropped_before_its_trailers_counts_as_canceled_and_others_as_unknown() {
    let metering = answering(None, message_then_ok, Duration::ZERO);
    let answer = answer_of(&metering, GET_TOOL).await;
    drop(answer);
    assert_eq!(
        snapshot(&metering, GET_TOOL).handled[Code::Cancelled as usize],
        1
    );

    let path = "/not.a.Service/Method";
    let no_trailers = answering(None, Vec::new, Duration::ZERO);
    let answer = answer_of(&no_trailers, path).await;
    read_to_end(answer.into_body()).await;
    let unknown = snapshot(&no_trailers, path);
    assert_eq!(
        (unknown.started, unknown.handled[Code::Unknown as usize]),
        (1, 1)
    );
}

#[tokio::test]
async fn without_stats_calls_pass_through() {
    let service = tower::service_fn(|_: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(Frames(VecDeque::from([trailers(
            Code::Ok,
        )]))))
    });
    let answer = RpcMeteringLayer::new(None, Spans::off())
        .layer(service)
        .oneshot(request(GET_TOOL, None))
        .await
        .expect("answered");
    read_to_end(answer.into_body()).await;
}
