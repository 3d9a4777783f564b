//! Access tokens for an imported MCP server, got with OAuth client credentials
//! ([`super::client_credentials`]); [`super::authorized_http`] sends them.
//!
//! When a session is opened, toolplane finds the server's authorization server as MCP's
//! authorization says (the server's protected resource metadata, RFC 9728, where the server's
//! 401 challenge names it or at the well-known locations; then the authorization server's
//! metadata, RFC 8414 or OpenID Connect discovery) and asks its token endpoint for a token (the
//! client credentials grant, with the server's URL as the `resource`, RFC 8707). The official
//! Rust MCP SDK does the discovery and the exchange; it renews tokens only with refresh tokens,
//! which the client credentials grant does not give, so renewing is done here: a token is
//! exchanged again before it expires (once less than a minute, or half its lifetime, is left),
//! and at once when the server answers 401 to it (revoked, or the authorization server's keys
//! rotated), the request then sent again once with the new token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oauth2::TokenResponse;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadataSource,
    ClientCredentialsConfig as SdkCredentials, OAuthHttpClient, OAuthHttpClientError,
    OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
};
use tokio::sync::Mutex;

use super::client_credentials::{ClientCredentials, ClientProof, read_key};
use super::token_requests::{TokenReason, TokenRequests};
use crate::grpc::outgoing_tls::http_client_builder;
use crate::grpc::provider_tls::ProviderTls;

/// The most of a token's lifetime left unused: it is renewed once less than this (or half its
/// lifetime) is left.
const RENEWAL_MARGIN: Duration = Duration::from_secs(60);

/// The tokens of one session with one server.
pub struct AccessTokens {
    manager: Arc<AuthorizationManager>,
    /// The server's URL, the `resource` tokens are asked for.
    url: String,
    /// The client id.
    client_id: String,
    /// The token endpoint, as failures name it.
    token_endpoint: String,
    /// The token in use and how the next is asked for; locked while a new one is got, so one
    /// exchange runs at a time.
    held: Mutex<Held>,
    /// Where each token request is counted.
    requests: Arc<TokenRequests>,
}

impl std::fmt::Debug for AccessTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessTokens")
            .field("token_endpoint", &self.token_endpoint)
            .finish_non_exhaustive()
    }
}

/// What a session holds to get its tokens.
struct Held {
    /// The token in use, once one is got.
    token: Option<Token>,
    /// The scopes asked for: those configured (else selected as the server names them), and
    /// those its `insufficient_scope` challenges have added since.
    scopes: Vec<String>,
    /// How the client authenticates; a private key as last read from its file.
    proof: ClientProof,
}

/// A token got, and when it is to be renewed (never, when the authorization server did not
/// say when it expires).
struct Token {
    secret: String,
    renew_at: Option<Instant>,
}

/// When a token received at `received` that lives `lifetime` is renewed; `None` (never) past
/// what the clock counts: the authorization server's `expires_in` is any number of seconds.
fn renewal_time(received: Instant, lifetime: Duration) -> Option<Instant> {
    received.checked_add(lifetime - RENEWAL_MARGIN.min(lifetime / 2))
}

/// `held` with the scopes of an `insufficient_scope` challenge (`challenged`, separated by
/// spaces) added, in order; `None` when it holds them all already.
fn with_challenged(held: &[String], challenged: &str) -> Option<Vec<String>> {
    let mut scopes = held.to_vec();
    for scope in challenged.split_whitespace() {
        if !scopes.iter().any(|known| known == scope) {
            scopes.push(scope.to_owned());
        }
    }
    (scopes.len() > held.len()).then_some(scopes)
}

impl AccessTokens {
    /// Finds the authorization server of the MCP server at `url` (reached over the TLS to
    /// providers, `tls`) and gets a first token from it with `credentials`, counting each
    /// token request in `requests`. The error says what failed, naming the server or the
    /// token endpoint.
    pub async fn obtain(
        url: &str,
        credentials: &ClientCredentials,
        tls: &ProviderTls,
        requests: Arc<TokenRequests>,
    ) -> Result<Self, String> {
        let failed = |what: &str, error: AuthError| {
            format!("cannot get an OAuth access token for MCP server {url}: {what}: {error}")
        };
        let http = OAuthHttp::new(tls)
            .map_err(|error| format!("cannot make an HTTP client for {url}: {error}"))?;
        let mut manager = AuthorizationManager::new_with_oauth_http_client(url, Arc::new(http))
            .await
            .map_err(|error| failed("not a URL", error))?;
        let resolution = manager
            .resolve_metadata()
            .await
            .map_err(|error| failed("discovering its authorization server failed", error))?;
        if resolution.source == AuthorizationMetadataSource::LegacyEndpointFallback {
            return Err(format!(
                "cannot get an OAuth access token for MCP server {url}: it publishes no OAuth \
                 metadata (no protected resource metadata, RFC 9728, and no authorization \
                 server metadata at its origin), so toolplane does not know where to send its \
                 client credentials"
            ));
        }
        let metadata = resolution.metadata;
        if let Some(pinned) = &credentials.authorization_server {
            let issuer = metadata.issuer.as_deref().unwrap_or("");
            if issuer.trim_end_matches('/') != pinned.trim_end_matches('/') {
                return Err(format!(
                    "cannot get an OAuth access token for MCP server {url}: its authorization \
                     server is {issuer:?}, not the authorization_server configured ({pinned}), \
                     so toolplane does not send it its client credentials"
                ));
            }
        }
        let token_endpoint = metadata.token_endpoint.clone();
        if !may_send_credentials(url, &token_endpoint) {
            return Err(format!(
                "cannot get an OAuth access token for MCP server {url}: its authorization \
                 server's token endpoint {token_endpoint} is not https://, so toolplane does \
                 not send it its client credentials (plain http:// only when both it and the \
                 server are on the loopback address)"
            ));
        }
        manager.set_metadata(metadata);
        let scopes = if credentials.scopes.is_empty() {
            // MCP's scope selection: the challenge's scopes, else the resource's. Not
            // `offline_access`, which asks for refresh tokens the grant does not give.
            let selected = manager.select_initial_scopes(&[]).await;
            selected
                .into_iter()
                .filter(|scope| scope != "offline_access")
                .collect()
        } else {
            credentials.scopes.clone()
        };
        let held = Held {
            token: None,
            scopes,
            proof: credentials.proof.clone(),
        };
        manager
            .configure_client_credentials(&sdk_credentials(
                url,
                &credentials.client_id,
                &held.proof,
                held.scopes.clone(),
            ))
            .map_err(|error| failed("the authorization server's metadata is unusable", error))?;
        let tokens = Self {
            manager: Arc::new(manager),
            url: url.to_owned(),
            client_id: credentials.client_id.clone(),
            token_endpoint,
            held: Mutex::new(held),
            requests,
        };
        tokens.current().await?;
        Ok(tokens)
    }

    /// The token to send now: the one in use, or a new one when it is due for renewal (got
    /// once, however many requests find it due together).
    pub async fn current(&self) -> Result<String, String> {
        let mut held = self.held.lock().await;
        let reason = match &held.token {
            Some(token) if token.renew_at.is_none_or(|due| Instant::now() < due) => {
                return Ok(token.secret.clone());
            }
            Some(_) => TokenReason::Expiring,
            None => TokenReason::Session,
        };
        let scopes = held.scopes.clone();
        self.replace(&mut held, reason, scopes).await
    }

    /// A token to send instead of `rejected`, which the server refused (401): a new one,
    /// unless another was got meanwhile.
    pub async fn renewed(&self, rejected: &str) -> Result<String, String> {
        let mut held = self.held.lock().await;
        match &held.token {
            Some(token) if token.secret != rejected => Ok(token.secret.clone()),
            _ => {
                let scopes = held.scopes.clone();
                self.replace(&mut held, TokenReason::Rejected, scopes).await
            }
        }
    }

    /// A token to send instead of `refused`, which the server refused for want of the scopes
    /// `challenged` (403 `insufficient_scope`, MCP's step-up authorization): a new one asked
    /// for with those scopes added to the ones asked for so far (which later tokens keep),
    /// or one another request got meanwhile. `None` when neither is at hand: the token in use
    /// was asked for with those scopes already, so asking again would only loop.
    pub async fn widened(&self, refused: &str, challenged: &str) -> Result<Option<String>, String> {
        let mut held = self.held.lock().await;
        let Some(scopes) = with_challenged(&held.scopes, challenged) else {
            return Ok(held
                .token
                .as_ref()
                .filter(|token| token.secret != refused)
                .map(|token| token.secret.clone()));
        };
        let token = self
            .replace(&mut held, TokenReason::InsufficientScope, scopes)
            .await
            .map_err(|error| {
                format!("the server asked for scope {challenged} (403 insufficient_scope): {error}")
            })?;
        Ok(Some(token))
    }

    /// Gets a new token asking for `scopes`, and puts it and them in `held` (locked); on a
    /// failure `held` is left as it was. The key of a private key JWT is read from its file
    /// first, so a rotated key is used.
    async fn replace(
        &self,
        held: &mut Held,
        reason: TokenReason,
        scopes: Vec<String>,
    ) -> Result<String, String> {
        held.read_key_again(&self.url);
        let received = Instant::now();
        let asked = sdk_credentials(&self.url, &self.client_id, &held.proof, scopes.clone());
        let exchanged = self.exchange(asked).await;
        self.requests.count(reason, exchanged.is_ok());
        let response = exchanged.map_err(|error| {
            let scopes = match scopes.as_slice() {
                [] => String::new(),
                scopes => format!(" (scopes {})", scopes.join(" ")),
            };
            format!(
                "cannot get an access token{scopes} from the authorization server's token \
                 endpoint {}: {error}",
                self.token_endpoint
            )
        })?;
        let secret = response.access_token().secret().clone();
        held.scopes = scopes;
        held.token = Some(Token {
            secret: secret.clone(),
            renew_at: response
                .expires_in()
                .and_then(|lifetime| renewal_time(received, lifetime)),
        });
        Ok(secret)
    }

    /// The SDK's token request. Its future is not `Send` (rmcp 3.11 holds a form serializer
    /// across an await in it), while a session's HTTP client must be; so it runs to its end on
    /// a blocking thread of its own, its I/O still driven by the runtime.
    async fn exchange(
        &self,
        credentials: SdkCredentials,
    ) -> Result<rmcp::transport::auth::OAuthTokenResponse, AuthError> {
        let manager = Arc::clone(&self.manager);
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            runtime.block_on(manager.exchange_client_credentials(&credentials))
        })
        .await
        .map_err(|error| AuthError::InternalError(format!("the token request failed: {error}")))?
    }
}

impl Held {
    /// Reads a private key from its file again: a key that signs replaces the one held; one
    /// that cannot be read or cannot sign is logged (for the server at `url`), and the one
    /// held is kept.
    fn read_key_again(&mut self, url: &str) {
        let ClientProof::PrivateKey {
            pem,
            file,
            algorithm,
        } = &mut self.proof
        else {
            return;
        };
        match read_key(file, *algorithm) {
            Ok(read) if read != *pem => {
                tracing::info!(server = url, "using the new key in {}", file.display());
                *pem = read;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(
                server = url,
                "{error}; signing with the key read from it before"
            ),
        }
    }
}

/// What the SDK is given: the credentials of client `client_id`, proven with `proof`, asking
/// for `scopes`, with the server's URL (`url`) as the resource.
fn sdk_credentials(
    url: &str,
    client_id: &str,
    proof: &ClientProof,
    scopes: Vec<String>,
) -> SdkCredentials {
    let client_id = client_id.to_owned();
    let resource = Some(url.to_owned());
    match proof {
        ClientProof::Secret(secret) => SdkCredentials::ClientSecret {
            client_id,
            client_secret: secret.0.clone(),
            scopes,
            resource,
        },
        ClientProof::PrivateKey { pem, algorithm, .. } => SdkCredentials::PrivateKeyJwt {
            client_id,
            signing_key: pem.0.clone().into_bytes(),
            signing_algorithm: algorithm.for_rmcp(),
            token_endpoint_audience: None,
            scopes,
            resource,
        },
    }
}

/// The longest an OAuth request (discovery, token) may take.
const OAUTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest OAuth answer read (metadata, token), as the SDK's own client bounds them.
const MAX_OAUTH_ANSWER: usize = 1024 * 1024;

/// The HTTP client of the SDK's OAuth requests: reqwest with toolplane's TLS to providers (the
/// SDK's own client would use reqwest's TLS, which toolplane does not build), following
/// redirects or not as each request asks.
struct OAuthHttp {
    following: reqwest::Client,
    stopping: reqwest::Client,
}

impl OAuthHttp {
    fn new(tls: &ProviderTls) -> Result<Self, reqwest::Error> {
        let config = tls.http_config();
        let builder = || http_client_builder(Some(&config)).timeout(OAUTH_REQUEST_TIMEOUT);
        Ok(Self {
            following: builder().build()?,
            stopping: builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        })
    }
}

impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let boxed = |error: reqwest::Error| Box::new(error) as OAuthHttpClientError;
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stopping,
                _ => &self.following,
            };
            let mut response = client
                .execute(reqwest::Request::try_from(request.request).map_err(boxed)?)
                .await
                .map_err(boxed)?;
            let mut answer = http::Response::builder()
                .status(response.status())
                .version(response.version());
            for (name, value) in response.headers() {
                answer = answer.header(name, value);
            }
            let body = crate::http_answers::body_within(&mut response, MAX_OAUTH_ANSWER)
                .await
                .map_err(boxed)?
                .ok_or_else(|| format!("an OAuth answer over {MAX_OAUTH_ANSWER} bytes"))?;
            Ok(answer.body(body)?)
        })
    }
}

/// Whether client credentials may be sent to `token_endpoint` for the server at `url`: over
/// HTTPS, or over plain HTTP when both are on the loopback address. (The SDK asks this of its
/// JWT assertions only; toolplane asks it of secrets too.)
fn may_send_credentials(url: &str, token_endpoint: &str) -> bool {
    let parsed = |text: &str| text.parse::<http::Uri>().ok();
    let on_loopback = |uri: &http::Uri| {
        uri.host().is_some_and(|host| {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|address| address.is_loopback())
        })
    };
    match (parsed(url), parsed(token_endpoint)) {
        (_, Some(endpoint)) if endpoint.scheme_str() == Some("https") => true,
        (Some(server), Some(endpoint)) if endpoint.scheme_str() == Some("http") => {
            on_loopback(&server) && on_loopback(&endpoint)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token is renewed a minute before it expires, or halfway through a lifetime shorter
    /// than two minutes; one living longer than the clock counts (`expires_in` of 2^64 - 1
    /// seconds) is never renewed.
    #[test]
    fn a_token_is_renewed_before_it_expires() {
        let received = Instant::now();
        let hour = Duration::from_secs(3600);
        assert_eq!(
            renewal_time(received, hour),
            Some(received + hour - Duration::from_secs(60))
        );
        let short = Duration::from_secs(10);
        assert_eq!(
            renewal_time(received, short),
            Some(received + Duration::from_secs(5))
        );
        assert_eq!(renewal_time(received, Duration::ZERO), Some(received));
        assert_eq!(renewal_time(received, Duration::from_secs(u64::MAX)), None);
    }

    /// A challenge's scopes are added to those asked for, once each; a challenge naming none
    /// that are new adds nothing, so the request is not sent again.
    #[test]
    fn a_challenge_adds_the_scopes_not_asked_for() {
        let held = vec!["crm:read".to_owned()];
        assert_eq!(
            with_challenged(&held, "crm:write  crm:read crm:write"),
            Some(vec!["crm:read".to_owned(), "crm:write".to_owned()])
        );
        assert_eq!(
            with_challenged(&[], "crm:read"),
            Some(vec!["crm:read".to_owned()])
        );
        assert_eq!(with_challenged(&held, "crm:read"), None);
        assert_eq!(with_challenged(&held, ""), None);
    }

    /// Credentials go over HTTPS, or plain HTTP between loopback addresses only.
    #[test]
    fn credentials_are_sent_over_https_or_on_the_loopback_address() {
        let server = "https://crm.internal/mcp";
        assert!(may_send_credentials(server, "https://auth.internal/token"));
        assert!(!may_send_credentials(server, "http://auth.internal/token"));
        assert!(!may_send_credentials(server, "http://127.0.0.1:8080/token"));
        for local in [
            "http://127.0.0.1:9/mcp",
            "http://localhost:9/mcp",
            "http://[::1]:9/mcp",
        ] {
            assert!(
                may_send_credentials(local, "http://localhost:8/token"),
                "{local}"
            );
            assert!(
                may_send_credentials(local, "http://[::1]:8/token"),
                "{local}"
            );
            assert!(
                !may_send_credentials(local, "http://10.0.0.9/token"),
                "{local}"
            );
        }
        assert!(!may_send_credentials(server, "not a url"));
    }
}
