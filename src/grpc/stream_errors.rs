//! How a call to a provider failed on the wire: the gRPC status of an HTTP/2 error, whether
//! the provider left the stream unprocessed, and whether the call ever reached the provider.

use std::sync::Arc;

use tonic::Status;

/// The source of the `Status` of a call the provider never received: no connection could be
/// made, or it left every stream of the call unprocessed. Such a call may go to another
/// instance of the service whatever the tool does (see `invoke::route`).
#[derive(Debug)]
pub struct NotSent;

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call never reached the provider")
    }
}

impl std::error::Error for NotSent {}

/// `status`, marked as the failure of a call the provider never received.
pub(super) fn not_sent(mut status: Status) -> Status {
    status.set_source(Arc::new(NotSent));
    status
}

/// Whether `status` is the failure of a call the provider never received.
pub fn was_not_sent(status: &Status) -> bool {
    std::error::Error::source(status).is_some_and(|source| source.is::<NotSent>())
}

/// What a TLS alert from a provider, or its closing the TLS connection without one, most
/// likely means, to add to the error that reports it (`error` is that error's text). Under
/// TLS 1.3 a provider checks toolplane's client
/// certificate after the handshake, so its refusal arrives with the first call, where h2 has
/// kept only the text of the I/O error (rustls's "received fatal alert: ...").
pub(super) fn refusal_hint(error: &str) -> &'static str {
    if error.contains("received fatal alert: CertificateRequired") {
        "; the provider asks for a client certificate: set provider_client_cert_file and \
         provider_client_key_file"
    } else if error.contains("received fatal alert") {
        "; the provider ended the TLS connection: if it asks for client certificates, check \
         that a CA it trusts signed provider_client_cert_file"
    } else if error.contains("without sending TLS close_notify") {
        // gRPC C-core (BoringSSL) closes so, with no alert, on a missing or untrusted client
        // certificate.
        "; the provider closed the TLS connection without saying why: if it asks for client \
         certificates, set provider_client_cert_file and provider_client_key_file to a \
         certificate a CA it trusts signed"
    } else {
        ""
    }
}

/// Whether a stream that failed with `error` before its answer began was not processed by the
/// provider, so that it may be sent again whatever the tool does: the provider refused it
/// (`REFUSED_STREAM`), or a GOAWAY it sent named a last stream below it (RFC 9113, 6.8: a
/// server closing a connection at its maximum age, or draining). h2 fails a stream with the
/// GOAWAY's error only then; a stream the provider may have processed and that ends with the
/// connection fails with an I/O error instead.
pub(super) fn unprocessed(error: &h2::Error) -> bool {
    error.reason() == Some(h2::Reason::REFUSED_STREAM) || (error.is_go_away() && error.is_remote())
}

/// The gRPC status of a failed stream or connection (PROTOCOL-HTTP2.md, "Errors").
pub(super) fn transport(error: h2::Error) -> Status {
    match error.reason() {
        Some(h2::Reason::REFUSED_STREAM) | None => {
            let hint = error
                .get_io()
                .map_or("", |io| refusal_hint(&io.to_string()));
            Status::unavailable(format!("provider connection: {error}{hint}"))
        }
        Some(h2::Reason::CANCEL) => Status::cancelled(format!("provider cancelled: {error}")),
        Some(h2::Reason::ENHANCE_YOUR_CALM) => {
            Status::resource_exhausted(format!("provider refused: {error}"))
        }
        Some(_) if error.is_go_away() => {
            Status::unavailable(format!("provider connection: {error}"))
        }
        Some(_) => Status::internal(format!("provider stream: {error}")),
    }
}
