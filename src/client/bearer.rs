//! The bearer token a client sends as `authorization: Bearer TOKEN` on every call, for a
//! toolplane whose `[[tenant_access]]` grants tenants to tokens. tonic's interceptors are the
//! way to add call metadata to every call of a generated client; [`BearerAuth`] is one.

use std::fmt;
use std::path::Path;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The channel a [`super::ToolplaneClient`]'s generated clients use: calls carry its bearer
/// token, if it has one.
pub type ClientChannel = InterceptedService<Channel, BearerAuth>;

/// A token that cannot be sent. The message never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBearerToken {
    /// Nothing but white space.
    #[error("the bearer token is empty")]
    Empty,
    /// A character an HTTP header cannot carry in a token.
    #[error(
        "the bearer token holds a character a token cannot have (white space, a control \
         character or a non-ASCII character) at byte {position}"
    )]
    Character {
        /// Where, counted in bytes from the start of the trimmed token.
        position: usize,
    },
    /// The file that should hold it cannot be read.
    #[error("the bearer token file {path} cannot be read: {reason}")]
    Unreadable {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// A bearer token. Its `Debug` shows no part of it, and the header holding it is marked
/// sensitive (HTTP/2 header compression leaves it out of its tables).
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    header: MetadataValue<Ascii>,
}

impl BearerToken {
    /// A token from its text; white space around it (a trailing newline of a file or a
    /// variable) is dropped. A token is visible ASCII, as `authorization: Bearer TOKEN` needs.
    pub fn new(token: &str) -> Result<Self, InvalidBearerToken> {
        let token = token.trim();
        if token.is_empty() {
            return Err(InvalidBearerToken::Empty);
        }
        if let Some(position) = token.bytes().position(|byte| !byte.is_ascii_graphic()) {
            return Err(InvalidBearerToken::Character { position });
        }
        let mut header = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| InvalidBearerToken::Character { position: 0 })?;
        header.set_sensitive(true);
        Ok(Self { header })
    }
}

impl BearerToken {
    /// The token in the file at `path`: its first line that is not blank (a mounted Kubernetes
    /// Secret, or a file a Vault agent writes). An error names the file, never the token.
    pub fn from_file(path: &Path) -> Result<Self, InvalidBearerToken> {
        let text =
            std::fs::read_to_string(path).map_err(|error| InvalidBearerToken::Unreadable {
                path: path.display().to_string(),
                reason: error.to_string(),
            })?;
        let line = text.lines().find(|line| !line.trim().is_empty());
        Self::new(line.unwrap_or_default())
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

/// Adds `authorization: Bearer TOKEN` to every call that has no `authorization` of its own;
/// without a token it adds nothing.
#[derive(Debug, Clone, Default)]
pub struct BearerAuth {
    token: Option<BearerToken>,
}

impl BearerAuth {
    /// Sends `token` when there is one.
    pub fn new(token: Option<BearerToken>) -> Self {
        Self { token }
    }

    /// `channel` with this token added to its calls.
    pub fn on(self, channel: Channel) -> ClientChannel {
        InterceptedService::new(channel, self)
    }
}

impl Interceptor for BearerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.token {
            let metadata = request.metadata_mut();
            if !metadata.contains_key("authorization") {
                metadata.insert("authorization", token.header.clone());
            }
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(auth: &mut BearerAuth, own: Option<&str>) -> Option<String> {
        let mut request = tonic::Request::new(());
        if let Some(own) = own {
            request
                .metadata_mut()
                .insert("authorization", own.parse().expect("ascii"));
        }
        let request = auth.call(request).expect("never refuses");
        request
            .metadata()
            .get("authorization")
            .map(|value| value.to_str().expect("ascii").to_owned())
    }

    #[test]
    fn a_token_is_sent_unless_the_call_has_its_own() {
        let mut auth = BearerAuth::new(Some(BearerToken::new(" s3cret.tok-en\n").expect("valid")));
        assert_eq!(
            sent(&mut auth, None).as_deref(),
            Some("Bearer s3cret.tok-en")
        );
        assert_eq!(
            sent(&mut auth, Some("Bearer other")).as_deref(),
            Some("Bearer other")
        );
        assert_eq!(sent(&mut BearerAuth::default(), None), None);
    }

    #[test]
    fn tokens_a_header_cannot_carry_are_refused_without_showing_them() {
        assert_eq!(BearerToken::new(" \n"), Err(InvalidBearerToken::Empty));
        let error = BearerToken::new("two words").expect_err("a space");
        assert_eq!(error, InvalidBearerToken::Character { position: 3 });
        assert!(!error.to_string().contains("words"), "{error}");
        assert!(BearerToken::new("tökén").is_err());
        let token = BearerToken::new("s3cret").expect("valid");
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    #[test]
    fn a_token_file_s_first_line_that_is_not_blank_is_its_token() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "\n  \n s3cret-new \ns3cret-old\n").expect("write");
        let mut auth = BearerAuth::new(Some(BearerToken::from_file(&path).expect("readable")));
        assert_eq!(sent(&mut auth, None).as_deref(), Some("Bearer s3cret-new"));
        std::fs::write(&path, "\n").expect("write");
        assert_eq!(
            BearerToken::from_file(&path),
            Err(InvalidBearerToken::Empty)
        );
        let missing = BearerToken::from_file(&dir.path().join("missing")).expect_err("missing");
        assert!(
            missing.to_string().contains("missing cannot be read"),
            "{missing}"
        );
    }
}
