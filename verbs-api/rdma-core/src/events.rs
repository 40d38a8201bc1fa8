//! The one way events reach an application here: a queue whose length a semaphore eventfd
//! counts, one count per event. The fd polls readable while events wait, a read blocks
//! until one does, and with `O_NONBLOCK` set by the application it fails with `EAGAIN`
//! instead. Completion channels, rdma_cm event channels and a context's asynchronous
//! events are each one of these.

use crate::stub::set_errno;
use core::ffi::c_int;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

pub(crate) struct EventQueue<T> {
    fd: c_int,
    queue: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    /// A new queue and its eventfd; none (errno from eventfd) when no fd could be made.
    pub(crate) fn new() -> Option<EventQueue<T>> {
        // SAFETY: eventfd has no preconditions; checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        (fd >= 0).then(|| EventQueue {
            fd,
            queue: Mutex::new(VecDeque::new()),
        })
    }

    /// The eventfd the C structure publishes (`fd`, `async_fd`); closed with the queue.
    pub(crate) fn fd(&self) -> c_int {
        self.fd
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<T>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item` and counts it in the eventfd.
    pub(crate) fn post(&self, item: T) {
        self.lock().push_back(item);
        let one = 1u64;
        // SAFETY: an 8-octet write of the count to the queue's own eventfd.
        unsafe { libc::write(self.fd, (&one as *const u64).cast(), 8) };
    }

    /// The oldest event, after taking one count from the eventfd (blocking unless the
    /// application set `O_NONBLOCK`); none with errno set (`EAGAIN` when nothing waits).
    pub(crate) fn take(&self) -> Option<T> {
        let mut n = 0u64;
        // SAFETY: an 8-octet read from the queue's own eventfd; errno stays as read set it.
        if unsafe { libc::read(self.fd, (&mut n as *mut u64).cast(), 8) } != 8 {
            return None;
        }
        let item = self.lock().pop_front();
        if item.is_none() {
            set_errno(libc::EAGAIN);
        }
        item
    }

    /// Everything still queued, for its owner to release.
    pub(crate) fn drain(&self) -> Vec<T> {
        self.lock().drain(..).collect()
    }
}

impl<T> Drop for EventQueue<T> {
    fn drop(&mut self) {
        // SAFETY: the queue's own fd, closed once.
        unsafe { libc::close(self.fd) };
    }
}
