//! A connection's opening deadline: a caller that connects must send the first bytes of its
//! protocol within [`OPENING_TIMEOUT`] or be disconnected, so connections that send nothing
//! (by mistake or to use up the server's file descriptors) do not stay open for ever.
//!
//! hyper-util tells HTTP/2 from HTTP/1 by reading a connection's first bytes and sets no time
//! limit on that read, and HTTP/2's keepalive pings begin only after the preface. gRPC's own
//! servers bound this step the same way (grpc-go's `ConnectionTimeout`, gRPC core's server
//! handshake timeout). No crate bounds only the opening of a stream (`tokio-io-timeout` bounds
//! every read, which would end idle connections a client means to keep), hence this wrapper.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use tonic::transport::server::Connected;

/// How long a caller may take, once connected (and past TLS, when served), to send
/// [`OPENING_BYTES`].
pub const OPENING_TIMEOUT: Duration = Duration::from_secs(10);

/// How many bytes open a connection: HTTP/2's 24-byte client preface and the header of the
/// SETTINGS frame that must follow it. An HTTP/1 request line and its `Host` header are longer,
/// and from then on hyper's header read timeout bounds an HTTP/1 request.
pub const OPENING_BYTES: usize = 24 + 9;

/// A connection whose reads fail with [`io::ErrorKind::TimedOut`] when its first
/// [`OPENING_BYTES`] have not arrived within its deadline; after them it reads and writes as
/// the connection it wraps, with no time limit.
#[derive(Debug)]
pub struct OpeningDeadline<IO> {
    io: IO,
    /// How many more bytes must arrive before the deadline is lifted.
    awaited: usize,
    /// `None` once lifted.
    deadline: Option<Pin<Box<Sleep>>>,
    timeout: Duration,
}

impl<IO> OpeningDeadline<IO> {
    /// `io`, which must send its opening bytes within `timeout` from now.
    pub fn new(io: IO, timeout: Duration) -> Self {
        Self {
            io,
            awaited: OPENING_BYTES,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            timeout,
        }
    }
}

/// Each connection `incoming` yields, to open within [`OPENING_TIMEOUT`] of being yielded: for
/// a server tonic serves, which sets no such deadline itself.
pub fn opened_in_time<IO>(
    incoming: impl Stream<Item = io::Result<IO>>,
) -> impl Stream<Item = io::Result<OpeningDeadline<IO>>> {
    incoming.map(|accepted| accepted.map(|io| OpeningDeadline::new(io, OPENING_TIMEOUT)))
}

impl<IO: Connected> Connected for OpeningDeadline<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for OpeningDeadline<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let Some(deadline) = &mut this.deadline else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) => {
                let arrived = buf.filled().len() - before;
                this.awaited = this.awaited.saturating_sub(arrived);
                if this.awaited == 0 {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the caller sent {} of the {OPENING_BYTES} bytes that open a \
                         connection within {:?}",
                        OPENING_BYTES - this.awaited,
                        this.timeout
                    ),
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for OpeningDeadline<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

    #[tokio::test(start_paused = true)]
    async fn a_caller_sending_nothing_is_timed_out() {
        let (_caller, served) = tokio::io::duplex(1024);
        let mut served = OpeningDeadline::new(served, OPENING_TIMEOUT);
        let started = tokio::time::Instant::now();
        let error = served.read(&mut [0; 64]).await.expect_err("timed out");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(
            error.to_string().contains("sent 0 of the 33 bytes"),
            "{error}"
        );
        assert_eq!(started.elapsed(), OPENING_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_sending_part_of_the_preface_is_timed_out() {
        let (mut caller, served) = tokio::io::duplex(1024);
        let mut served = OpeningDeadline::new(served, OPENING_TIMEOUT);
        caller.write_all(&PREFACE[..30]).await.expect("written");
        let mut read = vec![0; 64];
        assert_eq!(served.read(&mut read).await.expect("read"), 30);
        let error = served.read(&mut read).await.expect_err("timed out");
        assert!(
            error.to_string().contains("sent 30 of the 33 bytes"),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_opened_in_time_may_stay_idle_and_carries_its_bytes() {
        let (mut caller, served) = tokio::io::duplex(1024);
        let mut served = OpeningDeadline::new(served, OPENING_TIMEOUT);
        caller.write_all(&PREFACE[..20]).await.expect("written");
        let mut read = vec![0; 64];
        assert_eq!(served.read(&mut read).await.expect("read"), 20);
        tokio::time::sleep(OPENING_TIMEOUT / 2).await;
        caller.write_all(&PREFACE[20..]).await.expect("written");
        assert_eq!(served.read(&mut read).await.expect("read"), 13);
        tokio::time::sleep(OPENING_TIMEOUT * 100).await;
        caller.write_all(b"later").await.expect("written");
        assert_eq!(served.read(&mut read).await.expect("read"), 5);
        assert_eq!(&read[..5], b"later");
        served.write_all(b"answer").await.expect("written");
        let mut answer = [0; 6];
        caller.read_exact(&mut answer).await.expect("read");
        assert_eq!(&answer, b"answer");
    }
}
