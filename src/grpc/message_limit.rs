//! A request message over the size limit is answered `RESOURCE_EXHAUSTED`, as gRPC's status
//! codes document it and grpc-go, grpc-java and gRPC core answer it, with ErrorInfo saying
//! how large the message was and what the limit is.
//!
//! tonic refuses such a message before the handler runs, `OUT_OF_RANGE` ("Error, decoded
//! message length too large: found N bytes, the limit is: L bytes"), or `RESOURCE_EXHAUSTED`
//! without details when the limit is passed while decompressing. Its codec offers no hook for
//! the status, so [`restate_size_refusal`] rewrites those two trailers-only answers on their
//! way out, recognised by code and message; every other answer passes untouched (a successful
//! unary answer carries no `grpc-status` header at all, so most answers are passed after one
//! header lookup).

use std::collections::HashMap;

use tonic::body::Body;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::status::ERROR_DOMAIN;

/// The largest request message toolplane takes, decompressed: tonic's default.
pub const MAX_REQUEST_MESSAGE: usize = 4 * 1024 * 1024;

/// The ErrorInfo reason of a request message over [`MAX_REQUEST_MESSAGE`].
pub const REASON: &str = "RESOURCE_MESSAGE_TOO_LARGE";

const DECODED_TOO_LARGE: &str = "Error, decoded message length too large: found ";
const DECOMPRESSED_TOO_LARGE: &str = "Error decompressing: size limit";

/// `answer`, or, when it is tonic's refusal of a request message over the limit, the same
/// refusal as `RESOURCE_EXHAUSTED` with ErrorInfo (`message_bytes` when tonic said it,
/// `limit_bytes`).
pub fn restate_size_refusal(answer: http::Response<Body>) -> http::Response<Body> {
    let refused = match answer
        .headers()
        .get("grpc-status")
        .map(|code| code.as_bytes())
    {
        Some(b"11" | b"8") => Status::from_header_map(answer.headers()),
        _ => None,
    };
    let message_bytes = refused.as_ref().and_then(|status| match status.code() {
        Code::OutOfRange => status
            .message()
            .strip_prefix(DECODED_TOO_LARGE)
            .map(|rest| rest.split(' ').next().unwrap_or_default().to_owned()),
        Code::ResourceExhausted if status.message().starts_with(DECOMPRESSED_TOO_LARGE) => {
            Some(String::new())
        }
        _ => None,
    });
    match message_bytes {
        Some(message_bytes) => too_large(&message_bytes).into_http(),
        None => answer,
    }
}

/// The refusal of a request message of `message_bytes` (empty when not known).
fn too_large(message_bytes: &str) -> Status {
    let mut metadata = HashMap::from([("limit_bytes".to_owned(), MAX_REQUEST_MESSAGE.to_string())]);
    let size = if message_bytes.is_empty() {
        "decompressed, the request message is larger".to_owned()
    } else {
        metadata.insert("message_bytes".to_owned(), message_bytes.to_owned());
        format!("the request message is {message_bytes} bytes,")
    };
    Status::with_error_details(
        Code::ResourceExhausted,
        format!(
            "{size} over the {MAX_REQUEST_MESSAGE} bytes (4 MiB) toolplane takes in one \
             message; send less in one call"
        ),
        ErrorDetails::with_error_info(REASON, ERROR_DOMAIN, metadata),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restated(status: Status) -> Status {
        let answer = restate_size_refusal(status.into_http());
        Status::from_header_map(answer.headers()).expect("a status")
    }

    #[test]
    fn tonics_refusals_of_a_large_message_are_restated() {
        let status = restated(Status::out_of_range(
            "Error, decoded message length too large: found 7688988 bytes, the limit is: \
             4194304 bytes",
        ));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.message().contains("7688988 bytes"), "{status:?}");
        let info = status
            .get_error_details()
            .error_info()
            .cloned()
            .expect("info");
        assert_eq!(info.reason, REASON);
        assert_eq!(info.metadata["message_bytes"], "7688988");
        assert_eq!(info.metadata["limit_bytes"], "4194304");

        let status = restated(Status::resource_exhausted(
            "Error decompressing: size limit, of 4194304 bytes, exceeded while decompressing \
             message",
        ));
        assert_eq!(status.code(), Code::ResourceExhausted);
        let info = status
            .get_error_details()
            .error_info()
            .cloned()
            .expect("info");
        assert_eq!(info.reason, REASON);
        assert!(!info.metadata.contains_key("message_bytes"));
    }

    #[test]
    fn other_answers_pass_untouched() {
        for status in [
            Status::out_of_range("page 9 of 3"),
            Status::resource_exhausted("over the rate limit"),
            Status::invalid_argument("bad"),
        ] {
            let passed = restated(status.clone());
            assert_eq!(passed.code(), status.code());
            assert_eq!(passed.message(), status.message());
        }
        let ok = restate_size_refusal(http::Response::new(Body::empty()));
        assert!(ok.headers().get("grpc-status").is_none());
    }
}
