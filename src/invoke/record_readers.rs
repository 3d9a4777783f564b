//! Who may read the record log's files now: at most [`READERS`] reads at once, one per tenant.
//!
//! A read of the files (a lookup of an id memory no longer holds, a listing page past memory)
//! can read gigabytes: all of them for an id they do not hold. Reads were taken one at a time,
//! so that callers could not make the server read its files many times over at once; but then
//! one tenant's read held every other tenant's up for as long as it took (a caller setting no
//! deadline is waited for to the end). Now a tenant reads one at a time, and another tenant's
//! read goes on beside it: the waiting reads start in the order they came, passing over those
//! of tenants already reading. A read whose caller stops waiting (`stop_check::is_given_up`)
//! leaves the line without reading.
//!
//! Written here because no crate offers a semaphore that excludes by key; the waits are on
//! blocking threads (`invoke::heavy::blocking`), so a `Condvar`, not an async semaphore.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::envelope::TenantId;
use crate::registry::stop_check::is_given_up;

/// The most reads of the files at once: each reads sequentially, and two cores serve them.
pub(super) const READERS: usize = 2;
/// How often a waiting read looks whether its caller still waits for it.
const GIVEN_UP_CHECK: Duration = Duration::from_millis(50);

/// The reads going on and waiting.
#[derive(Debug, Default)]
pub(super) struct FileReaders {
    state: Mutex<Line>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Line {
    /// The tenants reading now.
    reading: Vec<TenantId>,
    /// The reads waiting, in the order they came: ticket and tenant.
    waiting: VecDeque<(u64, TenantId)>,
    next_ticket: u64,
}

impl Line {
    /// Whether the read of `ticket` is the one to start now.
    fn may_start(&self, ticket: u64) -> bool {
        self.reading.len() < READERS
            && (self.waiting.iter())
                .find(|(_, tenant)| !self.reading.contains(tenant))
                .is_some_and(|&(first, _)| first == ticket)
    }

    fn leave(&mut self, ticket: u64) {
        self.waiting.retain(|&(waiting, _)| waiting != ticket);
    }
}

/// A read of the files going on; it ends when dropped.
#[derive(Debug)]
pub(super) struct FileRead<'a> {
    readers: &'a FileReaders,
    tenant: TenantId,
}

impl FileReaders {
    /// Waits for `tenant`'s turn to read the files; `None` when the work was given up first.
    /// Blocking: call it off the serving threads.
    pub(super) fn start(&self, tenant: TenantId) -> Option<FileRead<'_>> {
        let mut line = self.lock();
        let ticket = line.next_ticket;
        line.next_ticket += 1;
        line.waiting.push_back((ticket, tenant));
        loop {
            if is_given_up() {
                line.leave(ticket);
                drop(line);
                // The read behind it may be the one to start now.
                self.changed.notify_all();
                return None;
            }
            if line.may_start(ticket) {
                line.leave(ticket);
                line.reading.push(tenant);
                drop(line);
                // A second place may be free for the read behind it.
                self.changed.notify_all();
                return Some(FileRead {
                    readers: self,
                    tenant,
                });
            }
            line = (self.changed.wait_timeout(line, GIVEN_UP_CHECK))
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Line> {
        // Every change to the line is whole before anything that could panic.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for FileRead<'_> {
    fn drop(&mut self) {
        let mut line = self.readers.lock();
        if let Some(index) = line.reading.iter().position(|&t| t == self.tenant) {
            line.reading.swap_remove(index);
        }
        drop(line);
        self.readers.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    use crate::registry::stop_check::watching;

    /// Starts a read of `tenant` on a thread of its own, which holds it until told to end it;
    /// the receiver hears when it started.
    fn read_on_a_thread(
        readers: &Arc<FileReaders>,
        tenant: u64,
    ) -> (mpsc::Receiver<u64>, mpsc::Sender<()>) {
        let (started, heard) = mpsc::channel();
        let (end, ended) = mpsc::channel::<()>();
        let readers = Arc::clone(readers);
        std::thread::spawn(move || {
            let _read = readers.start(TenantId(tenant)).expect("not given up");
            started.send(tenant).expect("heard");
            let _ = ended.recv();
        });
        (heard, end)
    }

    const NOW: Duration = Duration::from_secs(10);
    const NOT_YET: Duration = Duration::from_millis(300);

    #[test]
    fn another_tenants_read_goes_on_beside_a_tenants_read() {
        let readers = Arc::new(FileReaders::default());
        let (one, end_one) = read_on_a_thread(&readers, 1);
        assert_eq!(one.recv_timeout(NOW), Ok(1));
        let (two, end_two) = read_on_a_thread(&readers, 2);
        assert_eq!(two.recv_timeout(NOW), Ok(2), "tenant 2 waited for tenant 1");

        // Both places taken: tenant 1's second read and tenant 3's wait; when tenant 2's read
        // ends, tenant 3's starts, though it came after tenant 1's, which still waits for
        // tenant 1's first.
        let (one_again, end_one_again) = read_on_a_thread(&readers, 1);
        assert!(one_again.recv_timeout(NOT_YET).is_err());
        let (three, end_three) = read_on_a_thread(&readers, 3);
        assert!(three.recv_timeout(NOT_YET).is_err());
        end_two.send(()).expect("ended");
        assert_eq!(three.recv_timeout(NOW), Ok(3));
        assert!(one_again.recv_timeout(NOT_YET).is_err());
        end_one.send(()).expect("ended");
        assert_eq!(one_again.recv_timeout(NOW), Ok(1));
        for end in [end_one_again, end_three] {
            end.send(()).expect("ended");
        }
    }

    #[test]
    fn a_read_given_up_while_it_waits_leaves_the_line() {
        let readers = Arc::new(FileReaders::default());
        let (one, _end_one) = read_on_a_thread(&readers, 1);
        assert_eq!(one.recv_timeout(NOW), Ok(1));
        let given_up = Arc::new(AtomicBool::new(false));
        let waiting = {
            let (readers, given_up) = (Arc::clone(&readers), Arc::clone(&given_up));
            std::thread::spawn(move || watching(&given_up, || readers.start(TenantId(1)).is_some()))
        };
        std::thread::sleep(NOT_YET);
        assert!(!waiting.is_finished());
        given_up.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(!waiting.join().expect("ran"), "a read given up started");
        assert!(readers.lock().waiting.is_empty());
    }
}
