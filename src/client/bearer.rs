//! The bearer token a client sends as `authorization: Bearer TOKEN` on every call, for a
//! toolplane whose `[[tenant_access]]` grants tenants to tokens. tonic's interceptors are the
//! way to add call metadata to every call of a generated client; [`BearerAuth`] is one.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::watch;
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
        Self::from_file_read_by(path, |path| std::fs::read_to_string(path))
    }

    /// As [`Self::from_file`], the file read by `read` (a configuration check's reader).
    pub fn from_file_read_by(
        path: &Path,
        read: impl FnOnce(&Path) -> std::io::Result<String>,
    ) -> Result<Self, InvalidBearerToken> {
        let text = read(path).map_err(|error| InvalidBearerToken::Unreadable {
            path: path.display().to_string(),
            reason: error.to_string(),
        })?;
        let line = text.lines().find(|line| !line.trim().is_empty());
        Self::new(line.unwrap_or_default())
    }

    /// The token itself, without `Bearer ` (for an HTTP client that adds it).
    pub fn secret(&self) -> &str {
        let header = self.header.to_str().unwrap_or_default();
        header.strip_prefix("Bearer ").unwrap_or(header)
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

/// A token file read again once what was read is `every` old, or the process was asked to
/// read its files again since (SIGHUP, where it listens for it:
/// [`crate::grpc::hangups::read_again_on_sighup`]), by the call that finds it so (as
/// Kubernetes' client-go reads a projected service-account token): a rotated token is sent
/// without a restart, and no task needs to outlive the client. The read is of a small file,
/// once per `every` or request, on the calling thread. [`BearerAuth::from_file`] sends its
/// token on gRPC calls; toolplane sends an MCP server's with `bearer_token_file`.
pub struct TokenFile {
    path: PathBuf,
    every: Duration,
    /// The requests to read the files again (a count).
    requests: watch::Receiver<u64>,
    read: ArcSwap<TokenRead>,
    /// Whether the last read failed.
    unreadable: AtomicBool,
}

/// A read of a token file.
struct TokenRead {
    at: Instant,
    /// The count of requests to read again when it was made.
    requests: u64,
    token: BearerToken,
}

impl TokenFile {
    /// The file at `path`, read now (an error names it, never the token) and again as the
    /// type says, once what was read is `every` old (zero: only when asked) or the process
    /// was asked to.
    pub fn open(path: &Path, every: Duration) -> Result<Self, InvalidBearerToken> {
        Self::following(path, every, crate::grpc::hangups::requests())
    }

    /// As [`Self::open`], read again on the requests `requests` counts.
    fn following(
        path: &Path,
        every: Duration,
        requests: watch::Receiver<u64>,
    ) -> Result<Self, InvalidBearerToken> {
        let token = BearerToken::from_file(path)?;
        let read = TokenRead {
            at: Instant::now(),
            requests: *requests.borrow(),
            token,
        };
        Ok(Self {
            path: path.to_owned(),
            every,
            requests,
            read: ArcSwap::from_pointee(read),
            unreadable: AtomicBool::new(false),
        })
    }

    /// The token to send now, read again first when it is `every` old or a request was made
    /// since. A file that cannot be read then is logged (see [`Self::token_read_now`]) and the
    /// token read before is sent until the next read.
    pub fn token(&self) -> BearerToken {
        let read = self.read.load();
        let requests = *self.requests.borrow();
        let old = !self.every.is_zero() && read.at.elapsed() >= self.every;
        if !old && requests == read.requests {
            return read.token.clone();
        }
        self.read_again(&read, requests)
    }

    /// The token in the file now, read again at once: for a token the other side refused,
    /// which may have been rotated in the file since it was read. A file that cannot be read
    /// gives the token read before, and is logged at WARN the first time, then at DEBUG until
    /// it is read again (logged at INFO): a server refusing every request while the file
    /// cannot be read would otherwise have a WARN logged for each.
    pub fn token_read_now(&self) -> BearerToken {
        let read = self.read.load();
        self.read_again(&read, *self.requests.borrow())
    }

    fn read_again(&self, read: &TokenRead, requests: u64) -> BearerToken {
        let token = match BearerToken::from_file(&self.path) {
            Ok(token) => {
                if self.unreadable.swap(false, Ordering::Relaxed) {
                    let path = self.path.display();
                    tracing::info!(%path, "the bearer token file can be read again");
                }
                token
            }
            Err(error) if self.unreadable.swap(true, Ordering::Relaxed) => {
                tracing::debug!(%error, "sending the bearer token read before");
                read.token.clone()
            }
            Err(error) => {
                tracing::warn!(%error, "sending the bearer token read before (while the file cannot be read, again at DEBUG)");
                read.token.clone()
            }
        };
        self.read.store(Arc::new(TokenRead {
            at: Instant::now(),
            requests,
            token: token.clone(),
        }));
        token
    }
}

impl fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// Where [`BearerAuth`] takes its token from.
#[derive(Clone, Default)]
enum Source {
    /// No token.
    #[default]
    None,
    /// One token.
    Fixed(BearerToken),
    /// A file, read again.
    File(Arc<TokenFile>),
}

/// Adds `authorization: Bearer TOKEN` to every call that has no `authorization` of its own;
/// without a token it adds nothing.
#[derive(Clone, Default)]
pub struct BearerAuth {
    source: Source,
}

impl fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::None => "none".to_owned(),
            Source::Fixed(_) => "a token".to_owned(),
            Source::File(file) => format!("the file {}", file.path.display()),
        };
        f.debug_struct("BearerAuth")
            .field("token", &source)
            .finish()
    }
}

impl BearerAuth {
    /// Sends `token` when there is one.
    pub fn new(token: Option<BearerToken>) -> Self {
        let source = token.map_or(Source::None, Source::Fixed);
        Self { source }
    }

    /// Sends the token in the file at `path` (see [`BearerToken::from_file`]), read now and
    /// again once what was read is `every` old (zero: only when asked), and by the first call
    /// after the process was asked to read its files again (SIGHUP, where it listens for it:
    /// [`crate::grpc::hangups::read_again_on_sighup`]), so a token rotated in the file (a
    /// mounted Kubernetes Secret) is sent from then on. A file that cannot be read now is an
    /// error naming it; later, the token read before is sent and the problem logged.
    pub fn from_file(path: &Path, every: Duration) -> Result<Self, InvalidBearerToken> {
        Ok(Self::of_file(TokenFile::open(path, every)?))
    }

    fn of_file(file: TokenFile) -> Self {
        Self {
            source: Source::File(Arc::new(file)),
        }
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
        let metadata = request.metadata_mut();
        if metadata.contains_key("authorization") {
            return Ok(request);
        }
        let token = match &self.source {
            Source::None => return Ok(request),
            Source::Fixed(token) => token.clone(),
            Source::File(file) => file.token(),
        };
        metadata.insert("authorization", token.header);
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

    #[test]
    fn a_token_file_is_read_again_once_what_was_read_is_old() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").expect("write");
        let hour = Duration::from_secs(3600);
        // Not the process's requests: another test may make one.
        let (asking, requests) = watch::channel(0);
        let following =
            |every| TokenFile::following(&path, every, requests.clone()).map(BearerAuth::of_file);
        let mut slow = following(hour).expect("readable");
        let mut quick = following(Duration::from_millis(1)).expect("readable");
        let mut once = following(Duration::ZERO).expect("readable");
        std::fs::write(&path, "second\n").expect("rotate");
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(
            sent(&mut slow, None).as_deref(),
            Some("Bearer first"),
            "not yet old"
        );
        assert_eq!(
            sent(&mut once, None).as_deref(),
            Some("Bearer first"),
            "only when asked"
        );
        assert_eq!(sent(&mut quick, None).as_deref(), Some("Bearer second"));
        asking.send_modify(|count| *count += 1);
        for (auth, what) in [(&mut slow, "slow"), (&mut once, "once")] {
            assert_eq!(sent(auth, None).as_deref(), Some("Bearer second"), "{what}");
        }
        std::fs::write(&path, "third\n").expect("rotate");
        assert_eq!(
            sent(&mut once, None).as_deref(),
            Some("Bearer second"),
            "once for each request"
        );
        std::fs::remove_file(&path).expect("remove");
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(
            sent(&mut quick, None).as_deref(),
            Some("Bearer second"),
            "an unreadable file keeps the token read before"
        );
        assert!(!format!("{quick:?}").contains("second"), "{quick:?}");
        assert!(BearerAuth::from_file(&path, hour).is_err(), "missing now");
    }

    #[test]
    fn a_token_file_is_read_at_once_when_its_token_was_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").expect("write");
        let (_asking, requests) = watch::channel(0);
        let hour = Duration::from_secs(3600);
        let file = TokenFile::following(&path, hour, requests).expect("readable");
        assert_eq!(file.token().secret(), "first");
        std::fs::write(&path, "second\n").expect("rotate");
        assert_eq!(file.token().secret(), "first", "not yet old");
        assert_eq!(file.token_read_now().secret(), "second");
        assert_eq!(
            file.token().secret(),
            "second",
            "the token read now is kept"
        );
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(
            file.token_read_now().secret(),
            "second",
            "an unreadable file keeps the token read before"
        );
        assert!(!format!("{file:?}").contains("second"), "{file:?}");
        assert!(TokenFile::open(&path, hour).is_err(), "missing now");
    }

    /// A file that cannot be read is logged at WARN once, then at DEBUG until it is read
    /// again, which is logged at INFO; then once more at WARN.
    #[test]
    fn a_token_file_that_cannot_be_read_is_warned_of_once_until_it_is_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").expect("write");
        let (_asking, requests) = watch::channel(0);
        let file = TokenFile::following(&path, Duration::ZERO, requests).expect("readable");
        let ((), log) = crate::test_logs::logged(|| {
            std::fs::remove_file(&path).expect("remove");
            for _ in 0..3 {
                assert_eq!(file.token_read_now().secret(), "first");
            }
            std::fs::write(&path, "second\n").expect("write");
            assert_eq!(file.token_read_now().secret(), "second");
            std::fs::remove_file(&path).expect("remove");
            assert_eq!(file.token_read_now().secret(), "second");
        });
        let levels: Vec<&str> = log
            .lines()
            .filter_map(|line| line.split("\"level\":\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(levels, ["WARN", "DEBUG", "DEBUG", "INFO", "WARN"], "{log}");
        assert!(
            log.contains(&*path.to_string_lossy()),
            "names the file: {log}"
        );
        assert!(!log.contains("second"), "never the token: {log}");
    }
}
