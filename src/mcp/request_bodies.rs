//! An MCP request's body, read before the SDK reads it, so that a body the SDK cannot take as a
//! JSON-RPC message is answered in JSON-RPC's words: HTTP 400 with a JSON-RPC error, `-32700`
//! (Parse error) for a body that is not JSON, `-32600` (Invalid Request) for JSON that is not a
//! JSON-RPC 2.0 message (or one whose `params` are not an object, as MCP's always are), each
//! saying what is wrong and echoing the message's `id` when it has one.
//!
//! The SDK (rmcp 3.11) answers all of these HTTP 415 (Unsupported Media Type) with a line of
//! plain text, which names the wrong cause and gives a client no JSON-RPC error to report. It
//! answers a JSON body's failure to parse with nothing else, so its 415 to a request whose
//! `Content-Type` is `application/json` is restated here from the body this module kept.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

/// A request's body as the SDK is handed it: read whole (a POST's) or as it arrives.
pub(super) type McpRequestBody = Either<Full<Bytes>, Incoming>;

/// An answer from the endpoint.
pub(super) type McpResponse = Response<BoxBody<Bytes, Infallible>>;

/// JSON-RPC's error code for a body that is not JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's error code for JSON that is not a request, notification or response.
pub(crate) const INVALID_REQUEST: i64 = -32600;

/// A POST's body, read whole (at most `max_bytes`), kept to restate the SDK's refusal of it.
#[derive(Debug)]
pub(super) struct SentBody(Option<Bytes>);

/// `request` with its body read whole when it is a POST of JSON, and that body; an answer
/// refusing it when the body is over `max_bytes` or cannot be read.
pub(super) async fn read(
    request: Request<Incoming>,
    max_bytes: usize,
) -> Result<(Request<McpRequestBody>, SentBody), McpResponse> {
    if request.method() != hyper::Method::POST || !sends_json(&request) {
        return Ok((request.map(Either::Right), SentBody(None)));
    }
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, max_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            return Err(json_rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                INVALID_REQUEST,
                Value::Null,
                &format!("Invalid Request: the body is over the {max_bytes} bytes accepted"),
            ));
        }
        Err(error) => {
            return Err(json_rpc_error(
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                Value::Null,
                &format!("Parse error: the body could not be read: {error}"),
            ));
        }
    };
    let sent = SentBody(Some(body.clone()));
    Ok((
        Request::from_parts(parts, Either::Left(Full::new(body))),
        sent,
    ))
}

/// The SDK's `answer` to a request that sent `sent`, or the JSON-RPC error it stands for.
pub(super) fn restated(answer: McpResponse, sent: &SentBody) -> McpResponse {
    match &sent.0 {
        Some(body) if answer.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            tracing::debug!("an MCP request whose body is not a JSON-RPC message was refused");
            let (code, id, message) = what_is_wrong(body);
            json_rpc_error(StatusCode::BAD_REQUEST, code, id, &message)
        }
        _ => answer,
    }
}

/// Whether `request` says its body is JSON, as the SDK checks before reading it.
fn sends_json<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The JSON-RPC error code, the `id` to answer with and the message for `body`, which the
/// SDK could not take as a JSON-RPC message.
pub(crate) fn what_is_wrong(body: &[u8]) -> (i64, Value, String) {
    let message = match serde_json::from_slice::<Value>(body) {
        Err(error) => return (PARSE_ERROR, Value::Null, format!("Parse error: {error}")),
        Ok(Value::Object(message)) => message,
        Ok(Value::Array(_)) => {
            return invalid(
                Value::Null,
                "a batch (a JSON array) is not accepted: send each message in a request of its own",
            );
        }
        Ok(_) => return invalid(Value::Null, "a JSON-RPC message is a JSON object"),
    };
    let id = match message.get("id") {
        None | Some(Value::Null) => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        Some(_) => return invalid(Value::Null, "\"id\" must be a string or a number"),
    };
    if message.get("jsonrpc") != Some(&Value::from("2.0")) {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    match (
        message.get("method"),
        message.get("params"),
        message.get("error"),
    ) {
        (Some(Value::String(method)), Some(params), _) if !params.is_object() => invalid(
            id,
            &format!("the \"params\" of \"{method}\" must be an object"),
        ),
        (Some(Value::String(_)), ..) => invalid(id, "not a request or notification MCP reads"),
        (Some(_), ..) => invalid(id, "\"method\" must be a string"),
        (None, _, Some(_)) => invalid(
            id,
            "an \"error\" must be an object with an integer \"code\" and a string \"message\"",
        ),
        (None, ..) => invalid(
            id,
            "a JSON-RPC message has a \"method\" (a request or notification), or a \"result\" \
             or an \"error\" (a response)",
        ),
    }
}

fn invalid(id: Value, why: &str) -> (i64, Value, String) {
    (INVALID_REQUEST, id, format!("Invalid Request: {why}"))
}

/// An HTTP answer of `status` whose body is a JSON-RPC error of `code`, answering `id`, with
/// `message`.
pub(super) fn json_rpc_error(
    status: StatusCode,
    code: i64,
    id: Value,
    message: &str,
) -> McpResponse {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrong(body: &str) -> (i64, Value, String) {
        what_is_wrong(body.as_bytes())
    }

    #[test]
    fn a_body_that_is_not_json_is_a_parse_error() {
        let (code, id, message) = wrong("{bad json");
        assert_eq!((code, id), (PARSE_ERROR, Value::Null));
        assert_eq!(
            message,
            "Parse error: key must be a string at line 1 column 2"
        );
        assert_eq!(wrong("").0, PARSE_ERROR);
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request_naming_why() {
        for (body, id, why) in [
            ("[]", Value::Null, "a batch"),
            ("5", Value::Null, "a JSON object"),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                Value::Null,
                "\"id\"",
            ),
            (
                r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
                Value::from(7),
                "\"jsonrpc\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":"x","method":3}"#,
                Value::from("x"),
                "\"method\"",
            ),
            (r#"{"jsonrpc":"2.0","id":1}"#, Value::from(1), "\"result\""),
            (
                r#"{"jsonrpc":"2.0","id":2,"error":5}"#,
                Value::from(2),
                "integer \"code\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":5}"#,
                Value::from(1),
                "\"params\" of \"tools/call\" must be an object",
            ),
        ] {
            let (code, answered, message) = wrong(body);
            assert_eq!((code, answered), (INVALID_REQUEST, id), "{body}");
            assert!(message.starts_with("Invalid Request: "), "{message}");
            assert!(message.contains(why), "{body}: {message}");
        }
    }

    #[test]
    fn only_a_post_of_json_is_read_and_only_the_sdk_415_to_it_restated() {
        let json = Request::post("/mcp")
            .header("content-type", "Application/JSON; charset=utf-8")
            .body(())
            .expect("request");
        assert!(sends_json(&json));
        let text = Request::post("/mcp")
            .header("content-type", "text/plain")
            .body(())
            .expect("request");
        assert!(!sends_json(&text));

        let refusal = || {
            let mut answer = Response::new(Full::new(Bytes::from_static(b"no")).boxed());
            *answer.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            answer
        };
        let kept = SentBody(Some(Bytes::from_static(b"{")));
        assert_eq!(restated(refusal(), &kept).status(), StatusCode::BAD_REQUEST);
        let unread = SentBody(None);
        assert_eq!(
            restated(refusal(), &unread).status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
    }
}
