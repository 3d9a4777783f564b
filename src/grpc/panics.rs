//! A call whose handler panics is answered `INTERNAL`, not cut off.
//!
//! A panic ends that call only (`grpc::call_scheduling` keeps it from the connection's other
//! calls, wherever they run); but its caller
//! sees the HTTP/2 stream reset (tonic's client says `CANCELLED`, "h2 protocol error"), with
//! nothing to act on, and the panic reaches only stderr. [`catch_panics`] wraps the server so
//! that a panic while a call is answered is logged as an error and the caller gets `INTERNAL`
//! saying toolplane failed, as gRPC servers elsewhere do (grpc-go's recovery interceptor).
//! The panic's message stays in the log: it may name internals the caller has no business
//! seeing. A panic while a streamed answer is already being sent (WatchServices) still ends
//! the stream.

use std::any::Any;

use tonic::Status;
use tower_http::catch_panic::CatchPanicLayer;

/// What turns a panic into an answer.
pub type PanicAnswer = fn(Box<dyn Any + Send + 'static>) -> http::Response<tonic::body::Body>;

/// The layer that answers a panicking call `INTERNAL`.
pub fn catch_panics() -> CatchPanicLayer<PanicAnswer> {
    CatchPanicLayer::custom(answer_panic as PanicAnswer)
}

/// A panic's message: what `panic!` was given, when it was text.
pub fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

fn answer_panic(panic: Box<dyn Any + Send + 'static>) -> http::Response<tonic::body::Body> {
    let message = panic_message(panic.as_ref());
    tracing::error!(
        panic = message,
        "a call's handler panicked; answered INTERNAL"
    );
    Status::internal("toolplane failed while answering this call (a bug; its log has the details)")
        .into_http()
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use futures_util::future::BoxFuture;
    use tonic::Code;
    use tonic::body::Body;
    use tonic::server::NamedService;

    use super::*;
    use crate::grpc::unary_client::UnaryChannel;

    /// A service whose calls panic, unless the path ends in `Fine`.
    #[derive(Clone)]
    struct Panicking;

    impl NamedService for Panicking {
        const NAME: &'static str = "test.Panicking";
    }

    impl tonic::codegen::Service<http::Request<Body>> for Panicking {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            let fine = request.uri().path().ends_with("Fine");
            Box::pin(async move {
                tokio::task::yield_now().await;
                assert!(fine, "a handler bug");
                Ok(Status::failed_precondition("fine").into_http())
            })
        }
    }

    #[tokio::test]
    async fn a_panicking_call_is_answered_internal_and_the_server_goes_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(
            tonic::transport::Server::builder()
                .layer(catch_panics())
                .add_service(Panicking)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel =
            UnaryChannel::new(&format!("http://{addr}"), Duration::from_secs(1)).expect("valid");
        let request = prost_types::Duration::default();
        let call = |path| channel.call::<_, prost_types::Duration>(path, &request, None);

        let panicked = call("/test.Panicking/Call").await.expect_err("it panics");
        assert_eq!(panicked.code(), Code::Internal, "{panicked:?}");
        assert!(
            panicked.message().contains("toolplane failed"),
            "{panicked:?}"
        );
        assert!(
            !panicked.message().contains("handler bug"),
            "kept in the log"
        );

        let after = call("/test.Panicking/Fine")
            .await
            .expect_err("answers an error");
        assert_eq!(
            after.code(),
            Code::FailedPrecondition,
            "still serving: {after:?}"
        );
    }
}
