//! The readers of what a caller writes around its calls rather than in them: request headers
//! and the MCP endpoint's refused bodies.

use serde_json::Value;

use crate::access::{ForwardedIdentityHeader, bearer_token, certificate_identities};
use crate::envelope::TenantId;
use crate::mcp::request_bodies::{INVALID_REQUEST, PARSE_ERROR, what_is_wrong};
use crate::trace_context::{MAX_TRACESTATE_BYTES, TraceContext, is_trace_id};

/// What toolplane reads out of a caller's headers, and out of an MCP request body the SDK
/// refused: the bytes are `TRACEPARENT\0TRACESTATE\0TENANT\0AUTHORIZATION\0FORWARDED\0BODY\0DER`
/// (missing fields are absent headers; the last takes the rest, NULs and all). None of the
/// readers panics, and:
/// - a trace context read is one whose trace id is an id, whose `tracestate` fits, and which
///   reads back the same from the headers it is passed on with;
/// - a tenant read is written back as a header naming the same tenant;
/// - a bearer token read is not empty and has no surrounding white space;
/// - a Linkerd identity read is one printable name;
/// - a refused MCP body is answered with JSON-RPC's parse or invalid-request error, an `id`
///   JSON-RPC allows, and a message naming which of the two it is.
pub fn request_headers(data: &[u8]) {
    let mut fields = data.splitn(7, |&byte| byte == 0);
    let mut next = || fields.next();
    let (traceparent, tracestate, tenant, authorization, forwarded, body, der) =
        (next(), next(), next(), next(), next(), next(), next());

    trace_context(traceparent, tracestate);
    if let Some(value) = tenant
        && let Some(read) = TenantId::from_header(Some(value))
    {
        let written = read.to_string();
        assert_eq!(
            TenantId::from_header(Some(written.as_bytes())),
            Some(read),
            "{value:?}"
        );
    }
    if let Some(token) = authorization.and_then(bearer_token) {
        assert!(
            !token.is_empty() && token.trim_ascii() == token,
            "{authorization:?}: {token:?}"
        );
    }
    if let Some(value) = forwarded {
        let _ = ForwardedIdentityHeader::XForwardedClientCert.identities(value);
        if let Ok(names) = ForwardedIdentityHeader::L5dClientId.identities(value) {
            assert!(
                matches!(&names[..], [name] if !name.is_empty()
                    && name.bytes().all(|byte| byte.is_ascii_graphic())),
                "{value:?}: {names:?}"
            );
        }
    }
    if let Some(body) = body {
        refused_body(body);
    }
    if let Some(der) = der {
        let _ = certificate_identities(der);
    }
}

/// The trace context of `traceparent` and `tracestate`, checked as [`request_headers`] says.
fn trace_context(traceparent: Option<&[u8]>, tracestate: Option<&[u8]>) {
    let Some(context) = TraceContext::from_headers(traceparent, tracestate) else {
        return;
    };
    assert!(is_trace_id(context.trace_id()), "{context:?}");
    assert!(
        context
            .tracestate()
            .is_none_or(|state| state.len() <= MAX_TRACESTATE_BYTES),
        "{context:?}"
    );
    let passed_on = TraceContext::from_headers(
        Some(context.traceparent().as_bytes()),
        context.tracestate().map(str::as_bytes),
    );
    assert_eq!(passed_on.as_ref(), Some(&context));
}

/// The JSON-RPC error answering a body the MCP SDK refused, checked as [`request_headers`]
/// says.
fn refused_body(body: &[u8]) {
    let (code, id, message) = what_is_wrong(body);
    let named = match code {
        PARSE_ERROR => "Parse error: ",
        INVALID_REQUEST => "Invalid Request: ",
        other => panic!("{body:?}: JSON-RPC code {other}"),
    };
    assert!(message.starts_with(named), "{body:?}: {message}");
    assert!(
        matches!(id, Value::Null | Value::String(_) | Value::Number(_)),
        "{body:?}: id {id}"
    );
}
