//! The write gathering of [`super`], checked against a socket that records each write.

use std::task::Waker;

use super::*;

/// A socket that records each write it is given.
#[derive(Debug, Default)]
struct Recorder {
    writes: Vec<Vec<u8>>,
}

impl AsyncWrite for Recorder {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().writes.push(buf.to_vec());
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Recorder {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

fn context() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

fn write(io: &mut CoalescingIo<Recorder>, cx: &mut Context<'_>, bytes: &[u8]) {
    assert!(matches!(
        Pin::new(io).poll_write(cx, bytes),
        Poll::Ready(Ok(n)) if n == bytes.len()
    ));
}

fn flush(io: &mut CoalescingIo<Recorder>, cx: &mut Context<'_>) {
    assert!(matches!(Pin::new(io).poll_flush(cx), Poll::Ready(Ok(()))));
}

/// Polls a flush once from the running task, so that a flush put off for a burst hands the
/// task's waker to the runtime.
async fn flush_from_task(io: &mut CoalescingIo<Recorder>) -> Poll<io::Result<()>> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *io).poll_flush(cx))).await
}

/// Polls a read once; the recorder never has anything to read.
fn read(io: &mut CoalescingIo<Recorder>, cx: &mut Context<'_>) {
    let mut space = [0u8; 8];
    let mut buf = ReadBuf::new(&mut space);
    assert!(Pin::new(io).poll_read(cx, &mut buf).is_pending());
}

/// What h2 writes for a frame whose payload it did not copy: header, then payload.
fn write_chained(
    io: &mut CoalescingIo<Recorder>,
    cx: &mut Context<'_>,
    head: &[u8],
    payload: &[u8],
) {
    let parts = [io::IoSlice::new(head), io::IoSlice::new(payload)];
    assert!(matches!(
        Pin::new(io).poll_write_vectored(cx, &parts),
        Poll::Ready(Ok(n)) if n == head.len() + payload.len()
    ));
}

#[tokio::test]
async fn a_burst_leaves_in_one_write_once_the_ready_tasks_have_run() {
    let noop = &mut context();
    let mut io = CoalescingIo::new(Recorder::default());
    io.burst_window = Duration::from_secs(3600);
    write(&mut io, noop, b"first");
    flush(&mut io, noop);
    write(&mut io, noop, b"second");
    let waits = flush_from_task(&mut io).await;
    assert!(waits.is_pending(), "a flush soon after a write waits");
    write(&mut io, noop, b"third");
    assert_eq!(io.get_ref().writes, vec![b"first".to_vec()]);
    // The runtime wakes the connection once it has run what was ready.
    tokio::task::yield_now().await;
    assert!(flush_from_task(&mut io).await.is_ready());
    assert_eq!(
        io.get_ref().writes,
        vec![b"first".to_vec(), b"secondthird".to_vec()]
    );
}

#[test]
fn a_flush_after_a_quiet_spell_writes_at_once() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    io.burst_window = Duration::ZERO;
    write(&mut io, &mut cx, b"one answer");
    flush(&mut io, &mut cx);
    write(&mut io, &mut cx, b"the next");
    flush(&mut io, &mut cx);
    assert_eq!(io.get_ref().writes.len(), 2);
}

#[test]
fn outside_a_runtime_a_burst_flush_is_due_at_once() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    io.burst_window = Duration::from_secs(3600);
    write(&mut io, &mut cx, b"first");
    flush(&mut io, &mut cx);
    write(&mut io, &mut cx, b"second");
    assert!(Pin::new(&mut io).poll_flush(&mut cx).is_pending());
    flush(&mut io, &mut cx);
    assert_eq!(io.get_ref().writes.len(), 2);
}

#[test]
fn a_large_frame_leaves_with_the_frames_after_it() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write_chained(&mut io, &mut cx, b"headers+head", b"message");
    // The flush h2 makes to make room is put off...
    flush(&mut io, &mut cx);
    assert!(io.get_ref().writes.is_empty());
    // ...and its closing flush writes everything at once.
    write(&mut io, &mut cx, b"trailers");
    flush(&mut io, &mut cx);
    assert_eq!(
        io.get_ref().writes,
        vec![b"headers+headmessagetrailers".to_vec()]
    );
    flush(&mut io, &mut cx);
    assert_eq!(io.get_ref().writes.len(), 1);
}

#[test]
fn other_flushes_write_at_once() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write(&mut io, &mut cx, b"small frames");
    flush(&mut io, &mut cx);
    assert_eq!(io.get_ref().writes, vec![b"small frames".to_vec()]);
}

#[test]
fn large_frames_in_a_row_leave_in_one_write() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write_chained(&mut io, &mut cx, b"head", b"first");
    flush(&mut io, &mut cx);
    write_chained(&mut io, &mut cx, b"head", b"second");
    flush(&mut io, &mut cx);
    assert!(io.get_ref().writes.is_empty());
    write(&mut io, &mut cx, b"trailers");
    flush(&mut io, &mut cx);
    assert_eq!(
        io.get_ref().writes,
        vec![b"headfirstheadsecondtrailers".to_vec()]
    );
}

#[test]
fn a_second_flush_with_nothing_written_between_writes() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write_chained(&mut io, &mut cx, b"head", b"message");
    flush(&mut io, &mut cx);
    flush(&mut io, &mut cx);
    assert_eq!(io.get_ref().writes, vec![b"headmessage".to_vec()]);
}

#[test]
fn a_put_off_flush_is_made_up_by_the_next_read() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write_chained(&mut io, &mut cx, b"head", b"frame");
    flush(&mut io, &mut cx);
    read(&mut io, &mut cx);
    assert_eq!(io.get_ref().writes, vec![b"headframe".to_vec()]);
}

#[tokio::test]
async fn a_read_leaves_a_burst_flush_to_the_runtime() {
    let noop = &mut context();
    let mut io = CoalescingIo::new(Recorder::default());
    io.burst_window = Duration::from_secs(3600);
    write(&mut io, noop, b"first");
    flush(&mut io, noop);
    write_chained(&mut io, noop, b"head", b"large");
    flush(&mut io, noop);
    write(&mut io, noop, b"trailers");
    let waits = flush_from_task(&mut io).await;
    assert!(waits.is_pending(), "a flush soon after a write waits");
    read(&mut io, noop);
    assert_eq!(io.get_ref().writes, vec![b"first".to_vec()]);
    tokio::task::yield_now().await;
    assert!(flush_from_task(&mut io).await.is_ready());
    assert_eq!(
        io.get_ref().writes,
        vec![b"first".to_vec(), b"headlargetrailers".to_vec()]
    );
}

#[test]
fn shutdown_writes_what_is_buffered() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write(&mut io, &mut cx, b"goaway");
    assert!(Pin::new(&mut io).poll_shutdown(&mut cx).is_ready());
    assert_eq!(io.get_ref().writes, vec![b"goaway".to_vec()]);
}

#[test]
fn large_writes_go_out_after_what_was_buffered() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write(&mut io, &mut cx, b"small");
    let large = vec![7u8; MAX_BUFFERED];
    write(&mut io, &mut cx, &large);
    assert_eq!(io.get_ref().writes, vec![b"small".to_vec(), large]);
}

#[test]
fn a_burst_does_not_keep_its_buffer() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    write(&mut io, &mut cx, &vec![1u8; 10 * 1024]);
    write(&mut io, &mut cx, &vec![2u8; 6 * 1024]);
    assert!(
        io.buffered.capacity() > RETAINED_CAPACITY,
        "the burst grew the buffer"
    );
    flush(&mut io, &mut cx);
    assert!(io.buffered.capacity() <= RETAINED_CAPACITY);
}

/// A batch of large messages, each flush after one put off, leaves in writes of at most
/// `MAX_BUFFERED` bytes, in order (with larger writes a dropped segment waited out TCP's
/// retransmission timeout: BENCHMARKS.md, item 36).
#[test]
fn a_batch_leaves_in_writes_of_at_most_max_buffered_bytes() {
    let mut cx = context();
    let mut io = CoalescingIo::new(Recorder::default());
    io.burst_window = Duration::ZERO;
    let mut sent = Vec::new();
    let messages = 2 * MAX_BUFFERED / 6000 + 2;
    for message in 0..messages {
        let payload = vec![message as u8; 6000];
        write_chained(&mut io, &mut cx, b"head", &payload);
        flush(&mut io, &mut cx);
        sent.extend_from_slice(b"head");
        sent.extend_from_slice(&payload);
    }
    write(&mut io, &mut cx, b"trailers");
    flush(&mut io, &mut cx);
    sent.extend_from_slice(b"trailers");
    let writes = &io.get_ref().writes;
    assert!(sent.len() > 2 * MAX_BUFFERED);
    assert!(writes.len() > 2, "{} writes", writes.len());
    assert!(writes.iter().all(|write| write.len() <= MAX_BUFFERED));
    assert_eq!(writes.concat(), sent);
}
