//! What the failures of sessions with MCP servers say: why a session could not be opened, and
//! why a request on one failed, in words naming the server and the cause (rather than the
//! SDK's, which name its transport's Rust type).

use rmcp::service::ClientInitializeError;
use rmcp::transport::DynamicTransportError;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use super::client::{CONNECT_TIMEOUT, McpSession, STDIO_START_TIMEOUT};
use super::server_logs;
use crate::grpc::provider_tls::{ProviderTls, causes};

/// How a session is opened, as far as what its failure says is concerned.
#[derive(Clone, Copy)]
pub(super) enum Via<'a> {
    /// Over HTTP, with the TLS to providers.
    Http(&'a ProviderTls),
    /// Over the standard input and output of a server toolplane started for `endpoint`.
    Stdio { endpoint: &'a str },
}

/// The session `opening` opens with `server` (`via` HTTP or stdio), or why it could not be
/// opened.
pub(super) async fn initialized(
    server: &str,
    opening: impl std::future::Future<Output = Result<McpSession, ClientInitializeError>>,
    via: Via<'_>,
) -> Result<McpSession, String> {
    let (limit, awaited) = match via {
        Via::Http(_) => (CONNECT_TIMEOUT, "complete the initialize handshake"),
        Via::Stdio { .. } => (
            STDIO_START_TIMEOUT,
            "answer the initialize request (its start included)",
        ),
    };
    match tokio::time::timeout(limit, opening).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(error)) => Err(opening_failure(server, &error, via)),
        Err(_) => Err(format!(
            "MCP server {server} did not {awaited} within {limit:?}"
        )),
    }
}

/// Why a session with `server` could not be opened: for a failure to reach it, the errors
/// that made it, innermost last (the SDK's own wording names its transport's Rust type), and
/// what the TLS to providers adds (see [`ProviderTls::failure_hint`]); for a server started
/// over stdio whose pipes failed, where to look.
fn opening_failure(server: &str, error: &ClientInitializeError, via: Via<'_>) -> String {
    // Over stdio, the pipes failing (closed, or broken as the request is written) means the
    // process has ended or shut them.
    if let Via::Stdio { endpoint } = via
        && matches!(
            error,
            ClientInitializeError::ConnectionClosed(_)
                | ClientInitializeError::TransportError { .. }
        )
    {
        return format!(
            "MCP server {server} ended before answering the initialize request ({error}): it \
             exited, or does not speak MCP over stdio ({})",
            server_logs::where_its_stderr_is(endpoint)
        );
    }
    let ClientInitializeError::TransportError { error, .. } = error else {
        return format!("cannot open an MCP session with {server}: {error}");
    };
    let failed = inner_failure(error);
    let text = failure_text(failed);
    let hint = match via {
        Via::Http(tls) => match tls.failure_hint(failed) {
            hint if hint.is_empty() && ended_after_tls(server, &text) => ENDED_HINT.to_owned(),
            hint => hint,
        },
        Via::Stdio { .. } => String::new(),
    };
    format!("cannot reach MCP server {server}: {text}{hint}")
}

/// What an `https://` connection the server ended after the handshake adds to its failure.
const ENDED_HINT: &str = "; the server ended the connection after the TLS handshake: if it \
                          asks for client certificates, set provider_client_cert_file and \
                          provider_client_key_file to a certificate a CA it trusts signed";

/// Whether the connection to `server` that failed saying `text` was an `https://` one the
/// server ended without saying why. Under TLS 1.3 a server refusing the client's certificate
/// (or its lack of one) does so after the client has finished its handshake, and the client
/// often sees the connection end before it reads the server's alert saying why: reset as
/// the request is sent, or closed before it could be ("connection was not ready", which the
/// HTTP client reports only for a new connection: a pooled one it tries again).
fn ended_after_tls(server: &str, text: &str) -> bool {
    server.starts_with("https://")
        && (text.contains("Connection reset by peer") || text.contains("connection was not ready"))
}

/// The error inside a transport's: the HTTP client's own, which the SDK's error holds without
/// naming as its source, else the SDK's (whose own wording names its transport's Rust type).
pub(super) fn inner_failure(error: &DynamicTransportError) -> &(dyn std::error::Error + 'static) {
    match error.error.downcast_ref() {
        Some(StreamableHttpError::<reqwest::Error>::Client(http)) => http,
        _ => error.error.as_ref(),
    }
}

/// What made a server refuse a request for want of a scope that could not be had, when that
/// is what `error` is: its 403 `insufficient_scope` (after the step-up, when one was tried),
/// or the authorization server's refusal of the scope (see [`super::authorized_http`]).
pub(super) fn scope_refusal(error: &DynamicTransportError) -> Option<String> {
    match error.error.downcast_ref() {
        Some(StreamableHttpError::<reqwest::Error>::InsufficientScope(challenge)) => Some(format!(
            "it answered 403 (WWW-Authenticate: {})",
            challenge.www_authenticate_header
        )),
        Some(StreamableHttpError::<reqwest::Error>::Auth(AuthError::InvalidScope(why))) => {
            Some(why.clone())
        }
        _ => None,
    }
}

/// `failed` and the errors that made it, innermost last.
pub(super) fn failure_text(failed: &(dyn std::error::Error + 'static)) -> String {
    let mut texts: Vec<String> = Vec::new();
    for cause in causes(failed) {
        let text = cause.to_string();
        // Wrappers repeat what they wrap.
        if !texts.last().is_some_and(|last| last.contains(&text)) {
            texts.push(text);
        }
    }
    texts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an `https://` connection reset, or closed before the request could be sent, is
    /// said to be one a client certificate may explain.
    #[test]
    fn a_tls_connection_ended_after_the_handshake_gets_the_client_certificate_hint() {
        let reset = "client error (SendRequest): connection error: Connection reset by peer \
                     (os error 104)";
        let closed = "client error (Canceled): operation was canceled: connection was not ready";
        for ended in [reset, closed] {
            assert!(ended_after_tls("https://127.0.0.1:9/mcp", ended));
            assert!(!ended_after_tls("http://127.0.0.1:9/mcp", ended));
        }
        assert!(!ended_after_tls(
            "https://127.0.0.1:9/mcp",
            "Connection refused (os error 111)"
        ));
    }
}
