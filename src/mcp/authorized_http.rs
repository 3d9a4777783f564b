//! The HTTP client of a session with an MCP server whose token may change while the session
//! lasts: OAuth access tokens got with client credentials ([`super::access_tokens`]), or a
//! bearer token file (`bearer_token_file`, [`TokenFile`]). The SDK's reqwest client, with the
//! current token put on each request.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::access_tokens::AccessTokens;
use crate::client::TokenFile;

/// Where a session's tokens come from.
#[derive(Debug, Clone)]
pub enum SessionTokens {
    /// OAuth access tokens, got with client credentials.
    OAuth(Arc<AccessTokens>),
    /// A bearer token file.
    File(Arc<TokenFile>),
}

impl SessionTokens {
    /// The token to send now; the error says why there is none.
    async fn current(&self) -> Result<String, String> {
        match self {
            Self::OAuth(tokens) => tokens.current().await,
            Self::File(file) => Ok(file.token().secret().to_owned()),
        }
    }

    /// A token to send in place of `refused`, which the server answered 401: a new access
    /// token, or the file's token read again at once; `None` when the file holds `refused`
    /// still (the server's 401 stands).
    async fn renewed(&self, refused: &str) -> Result<Option<String>, String> {
        match self {
            Self::OAuth(tokens) => tokens.renewed(refused).await.map(Some),
            Self::File(file) => {
                let read = file.token_read_now();
                Ok((read.secret() != refused).then(|| read.secret().to_owned()))
            }
        }
    }

    /// A token with the scopes `challenged` names, for `refused`, which the server answered
    /// 403 `insufficient_scope`: only an access token can be asked for with them.
    async fn widened(&self, refused: &str, challenged: &str) -> Result<Option<String>, String> {
        match self {
            Self::OAuth(tokens) => tokens.widened(refused, challenged).await,
            Self::File(_) => Ok(None),
        }
    }
}

/// The HTTP client of a session whose token may change: each request carries the current
/// token, and one the server refuses is sent again once: with a new token after a 401 (an
/// access token renewed, or the token file read again if it holds another token now), or
/// with an access token asked for with more scopes after a 403 `insufficient_scope` naming
/// them.
#[derive(Debug, Clone)]
pub struct WithAccessTokens {
    /// The HTTP client (with the TLS to providers).
    pub http: reqwest::Client,
    /// The session's tokens.
    pub tokens: SessionTokens,
}

type HttpError = StreamableHttpError<reqwest::Error>;

impl WithAccessTokens {
    /// Runs `request` with the current token, and once again with a new one if the server
    /// answers 401 (unless there is no other: that 401 stands), or with one with the scopes it
    /// names if it answers 403 `insufficient_scope` (unless the token was asked for with them
    /// already, or is a file's: that 403 stands).
    async fn authorized<T, F, Fut>(&self, request: F) -> Result<T, HttpError>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        // Only a renewal fails here: the session's first token was got as it opened.
        let no_token = |message: String| HttpError::Auth(AuthError::TokenRefreshFailed(message));
        let token = self.tokens.current().await.map_err(no_token)?;
        match request(Some(token.clone())).await {
            Err(HttpError::AuthRequired(challenge)) => {
                match self.tokens.renewed(&token).await.map_err(no_token)? {
                    Some(renewed) => request(Some(renewed)).await,
                    None => Err(HttpError::AuthRequired(challenge)),
                }
            }
            Err(HttpError::InsufficientScope(challenge)) => {
                let Some(challenged) = challenge.get_required_scope() else {
                    return Err(HttpError::InsufficientScope(challenge));
                };
                match self.tokens.widened(&token, challenged).await {
                    Ok(Some(widened)) => request(Some(widened)).await,
                    Ok(None) => Err(HttpError::InsufficientScope(challenge)),
                    Err(failed) => Err(HttpError::Auth(AuthError::InvalidScope(failed))),
                }
            }
            answered => answered,
        }
    }
}

// Each request the SDK's transport makes goes to the reqwest client with the token put in its
// `auth_header` (sent as `Authorization: Bearer ...`); none is set in the transport's own config.
impl StreamableHttpClient for WithAccessTokens {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
            self.http.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
            self.http.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
            self.http.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.authorized(|token| {
            self.http.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.authorized(|token| {
            self.http.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.authorized(|token| {
            self.http.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
