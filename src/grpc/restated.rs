//! Refusals tonic answers before any handler runs, restated with a code, a message and
//! details a caller can act on ([`Restated`] wraps the services).
//!
//! - A request message over the size limit is answered `RESOURCE_EXHAUSTED`, as gRPC's status
//!   codes document it and grpc-go, grpc-java and gRPC core answer it, with ErrorInfo saying
//!   how large the message was and what the limit is. tonic answers `OUT_OF_RANGE` ("Error,
//!   decoded message length too large: found N bytes, the limit is: L bytes"), or
//!   `RESOURCE_EXHAUSTED` without details when the limit is passed while decompressing.
//! - A request message nested deeper than protobuf decoding goes (100 messages; a
//!   `google.protobuf.Struct` takes three for each level of JSON, so about 30 levels of it) is
//!   answered `INVALID_ARGUMENT` with a BadRequest violation naming the field, as `InvokeTool`,
//!   which decodes its input itself, answers it. tonic answers `INTERNAL` ("failed to decode
//!   Protobuf message: " then every message and field on the way down, thirty times over),
//!   which reads as toolplane's fault, not the caller's.
//! - A call to a method toolplane does not serve is answered `UNIMPLEMENTED` naming it, in
//!   grpc-go's words (`unknown service S`, `unknown method M for service S`); tonic says
//!   nothing, which a Python or Node client built from another version of the protos shows
//!   as an empty message.
//!
//! tonic's codec and router offer no hook for these statuses, so they are rewritten on their
//! way out, recognised by code and message. Every other answer passes untouched: a successful
//! unary answer carries no `grpc-status` header at all, so most answers pass after one header
//! lookup.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tonic::body::Body;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::status::ERROR_DOMAIN;
use crate::registry::{RegistryError, ViolationKind};

/// The services wrapped, restating their refusals as the module docs say.
#[derive(Debug, Clone)]
pub struct Restated<S> {
    inner: S,
    /// The names of the services served (`toolplane.v1.DiscoveryService`, ...).
    services: &'static [&'static str],
}

impl<S> Restated<S> {
    /// Wraps `inner`, which serves the services named `services`.
    pub fn new(inner: S, services: &'static [&'static str]) -> Self {
        Self { inner, services }
    }
}

impl<S, B> tower::Service<http::Request<B>> for Restated<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<Body>>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = RestatedCall<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        RestatedCall {
            // A reference count: the path's bytes are shared with the request's.
            path: request.uri().path_and_query().cloned(),
            services: self.services,
            answer: self.inner.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// A call's answer being awaited, to be restated when it is one of the refusals.
    #[derive(Debug)]
    pub struct RestatedCall<F> {
        #[pin]
        answer: F,
        path: Option<http::uri::PathAndQuery>,
        services: &'static [&'static str],
    }
}

impl<F, E> Future for RestatedCall<F>
where
    F: Future<Output = Result<http::Response<Body>, E>>,
{
    type Output = Result<http::Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = ready!(this.answer.poll(cx))?;
        let answer = match answer
            .headers()
            .get(GRPC_STATUS)
            .map(|code| code.as_bytes())
        {
            Some(b"12") if !answer.headers().contains_key("grpc-message") => unknown_method(
                this.path.as_ref().map_or("", |path| path.path()),
                this.services,
            )
            .into_http(),
            Some(b"11" | b"8") => restate_size_refusal(answer),
            Some(b"13") => restate_nesting_refusal(answer),
            _ => answer,
        };
        Poll::Ready(Ok(answer))
    }
}

/// The refusal of a call to `path`, which no service served answers, in grpc-go's words.
fn unknown_method(path: &str, services: &[&str]) -> Status {
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""));
    let message = if services.contains(&service) {
        format!("unknown method {method} for service {service}")
    } else {
        format!(
            "unknown service {service}; this server serves {} (grpcurl list shows them)",
            services.join(", ")
        )
    };
    Status::unimplemented(message)
}

/// The largest request message toolplane takes, decompressed: tonic's default.
pub const MAX_REQUEST_MESSAGE: usize = 4 * 1024 * 1024;

/// The ErrorInfo reason of a request message over [`MAX_REQUEST_MESSAGE`].
pub const REASON: &str = "RESOURCE_MESSAGE_TOO_LARGE";

/// Looked up by a name made once: a `&str` name is parsed and hashed on each lookup.
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

const DECODED_TOO_LARGE: &str = "Error, decoded message length too large: found ";
const DECOMPRESSED_TOO_LARGE: &str = "Error decompressing: size limit";

/// `answer`, or, when it is tonic's refusal of a request message over the limit, the same
/// refusal as `RESOURCE_EXHAUSTED` with ErrorInfo (`message_bytes` when tonic said it,
/// `limit_bytes`).
fn restate_size_refusal(answer: http::Response<Body>) -> http::Response<Body> {
    let refused = Status::from_header_map(answer.headers());
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

const DECODE_FAILED: &str = "failed to decode Protobuf message: ";
const RECURSION_LIMIT: &str = "recursion limit reached";

/// `answer`, or, when it is tonic's refusal of a request message nested deeper than prost
/// decodes, the refusal `InvokeTool` gives its own input: `INVALID_ARGUMENT` with a BadRequest
/// violation naming the field.
fn restate_nesting_refusal(answer: http::Response<Body>) -> http::Response<Body> {
    let Some(refused) = Status::from_header_map(answer.headers()) else {
        return answer;
    };
    let Some(path) = refused
        .message()
        .strip_prefix(DECODE_FAILED)
        .and_then(|rest| rest.strip_suffix(RECURSION_LIMIT))
    else {
        return answer;
    };
    // prost names each message and field on the way, the innermost first
    // ("Struct.fields: Value.kind: ... ValidateToolInputRequest.input: "): the field is the
    // request's own fields down to the first `google.protobuf` value.
    let field: Vec<&str> = path
        .rsplit(": ")
        .filter(|segment| !segment.is_empty())
        .map(|segment| segment.split_once('.').unwrap_or(("", segment)))
        .take_while(|(message, _)| !matches!(*message, "Struct" | "Value" | "ListValue"))
        .map(|(_, field)| field)
        .collect();
    too_deep(&field.join(".")).into_http()
}

/// The refusal of a request whose `field` nests deeper than protobuf decoding goes: a field
/// violation, through the one mapping of registry errors to statuses.
fn too_deep(field: &str) -> Status {
    let field = if field.is_empty() { "message" } else { field };
    RegistryError::invalid(
        field,
        ViolationKind::Field,
        "nests deeper than protobuf decoding goes (100 messages; a google.protobuf.Struct \
         takes three for each level of JSON, so about 30 levels of it): send a flatter value",
    )
    .into()
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

    fn error_info(status: &Status) -> tonic_types::ErrorInfo {
        (status.get_error_details().error_info().cloned()).expect("ErrorInfo")
    }

    fn restated(status: Status) -> Status {
        let answer = restate_size_refusal(status.into_http());
        Status::from_header_map(answer.headers()).expect("a status")
    }

    /// tonic's refusal of a message nested too deep is restated naming the request's field;
    /// other decoding failures and other INTERNAL answers pass as they are.
    #[test]
    fn tonics_refusal_of_a_deep_message_names_the_field() {
        let restate = |status: Status| {
            let answer = restate_nesting_refusal(status.into_http());
            Status::from_header_map(answer.headers()).expect("a status")
        };
        let inner = "Struct.fields: Value.kind: ".repeat(30);
        let status = restate(Status::internal(format!(
            "failed to decode Protobuf message: {inner}ToolRegistration.tool_schema: \
             ServiceRegistration.tools: RegisterServiceRequest.registration: recursion limit \
             reached"
        )));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status.message().starts_with(
                "invalid request: registration.tools.tool_schema: nests deeper than protobuf"
            ),
            "{status:?}"
        );
        assert_eq!(error_info(&status).reason, "VALIDATION_FIELD");
        let details = status.get_error_details();
        let violations = &details.bad_request().expect("BadRequest").field_violations;
        assert_eq!(violations[0].field, "registration.tools.tool_schema");

        let status = restate(Status::internal(
            "failed to decode Protobuf message: Struct.fields: Value.kind: ListValue.values: \
             Value.kind: ValidateToolInputRequest.input: recursion limit reached",
        ));
        assert!(
            status.message().starts_with("invalid request: input: "),
            "{status:?}"
        );

        let other = "failed to decode Protobuf message: Meta.tenant_id: invalid varint";
        let status = restate(Status::internal(other));
        assert_eq!((status.code(), status.message()), (Code::Internal, other));
        let status = restate(Status::internal("the record log cannot be written"));
        assert_eq!(status.code(), Code::Internal);
    }

    #[test]
    fn tonics_refusals_of_a_large_message_are_restated() {
        let status = restated(Status::out_of_range(
            "Error, decoded message length too large: found 7688988 bytes, the limit is: \
             4194304 bytes",
        ));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.message().contains("7688988 bytes"), "{status:?}");
        let info = error_info(&status);
        assert_eq!(info.reason, REASON);
        assert_eq!(info.metadata["message_bytes"], "7688988");
        assert_eq!(info.metadata["limit_bytes"], "4194304");

        let status = restated(Status::resource_exhausted(
            "Error decompressing: size limit, of 4194304 bytes, exceeded while decompressing \
             message",
        ));
        assert_eq!(status.code(), Code::ResourceExhausted);
        let info = error_info(&status);
        assert_eq!(info.reason, REASON);
        assert!(!info.metadata.contains_key("message_bytes"));
    }

    #[test]
    fn an_unknown_service_or_method_is_named() {
        let services = ["toolplane.v1.DiscoveryService"];
        let status = unknown_method("/toolplane.v1.DiscoveryService/Nope", &services);
        assert_eq!(status.code(), Code::Unimplemented);
        assert_eq!(
            status.message(),
            "unknown method Nope for service toolplane.v1.DiscoveryService"
        );
        let status = unknown_method("/toolplane.v2.DiscoveryService/ListTools", &services);
        assert!(
            status
                .message()
                .starts_with("unknown service toolplane.v2.DiscoveryService; this server serves toolplane.v1.DiscoveryService"),
            "{status:?}"
        );
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
