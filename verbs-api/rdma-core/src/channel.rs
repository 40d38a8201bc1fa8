//! Completion channels as real file descriptors (Verbs section 8.3.4, Request Completion
//! Notification, with rdma-core's event channel): an eventfd the application may `poll`,
//! `epoll` or set `O_NONBLOCK` (then `ibv_get_cq_event` fails with `EAGAIN`).
//!
//! `ibv_req_notify_cq` arms the CQ's notification word in shared memory, which the daemon
//! clears (and futex-wakes) when it writes the next completion; a thread per CQ with a
//! channel sleeps on that word and, once it is cleared, queues the CQ on its channel and
//! counts the event into the eventfd (one count per event, `EFD_SEMAPHORE`). A solicited-only
//! request arms the word with its own value, which the daemon clears only for a solicited
//! or an error completion.
#![cfg_attr(test, allow(dead_code))]

use crate::abi::*;
use crate::events::EventQueue;
use crate::stub::set_errno;
use core::ffi::{c_int, c_uint, c_void};
use iwarp_abi::notify::Notify;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// An `ibv_comp_channel` and the CQs whose events are waiting to be read, in order.
#[repr(C)]
pub(crate) struct Channel {
    ibv: ibv_comp_channel,
    events: EventQueue<usize>,
}

impl Channel {
    fn post(&self, cq: usize) {
        self.events.post(cq);
    }
}

pub(crate) unsafe extern "C" fn ibv_create_comp_channel(
    ctx: *mut ibv_context,
) -> *mut ibv_comp_channel {
    if ctx.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let Some(events) = EventQueue::new() else {
        return core::ptr::null_mut();
    };
    let ch = Box::new(Channel {
        ibv: ibv_comp_channel {
            context: ctx,
            fd: events.fd(),
            refcnt: 0,
        },
        events,
    });
    Box::into_raw(ch).cast()
}

pub(crate) unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if ch.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a channel of ibv_create_comp_channel.
    if unsafe { (*ch).refcnt } > 0 {
        // CQs still deliver to it (rdma-core answers the same).
        return libc::EBUSY;
    }
    // SAFETY: as above, destroyed once; its eventfd closes with it.
    drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
    0
}

pub(crate) unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a channel of ibv_create_comp_channel.
    let c = unsafe { &*ch.cast::<Channel>() };
    let Some(p) = c.events.take() else {
        return -1;
    };
    let p = p as *mut ibv_cq;
    // SAFETY: the CQ queued by its watcher, alive until the application destroys it (which
    // it may only do after acknowledging its events).
    unsafe {
        *cq = p;
        *cq_context = (*p).cq_context;
    }
    0
}

pub(crate) unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint) {
    if !cq.is_null() {
        // SAFETY: the application's CQ; acknowledgements are counted as rdma-core does.
        unsafe { (*cq).comp_events_completed += n };
    }
}

#[derive(Default)]
struct State {
    armed: bool,
    stop: bool,
}

/// The thread that turns one CQ's notifications into channel events.
pub(crate) struct Watcher {
    state: Arc<(Mutex<State>, Condvar)>,
    notify: Arc<Notify>,
    thread: Option<JoinHandle<()>>,
}

/// How long the watcher sleeps on the word before it looks at its stop flag again.
const NAP: Duration = Duration::from_millis(50);

impl Watcher {
    /// Starts watching `notify` for the CQ at `cq`, delivering to `ch`.
    pub(crate) fn start(
        notify: Arc<Notify>,
        cq: *mut ibv_cq,
        ch: *mut ibv_comp_channel,
    ) -> Watcher {
        let state: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let (s, n) = (state.clone(), notify.clone());
        let (cq, ch) = (cq as usize, ch as usize);
        // SAFETY: the application's channel; the count keeps ibv_destroy_comp_channel away
        // until the CQ is destroyed.
        unsafe { (*(ch as *mut ibv_comp_channel)).refcnt += 1 };
        let thread = std::thread::Builder::new()
            .name("ibv-cq-events".into())
            .spawn(move || {
                let (m, cv) = &*s;
                loop {
                    let mut st = m.lock().unwrap_or_else(|p| p.into_inner());
                    while !st.armed && !st.stop {
                        st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    if st.stop {
                        return;
                    }
                    drop(st);
                    // Armed: wait for the daemon to clear the word with a completion.
                    while n.armed() {
                        if m.lock().unwrap_or_else(|p| p.into_inner()).stop {
                            return;
                        }
                        n.wait(NAP);
                    }
                    m.lock().unwrap_or_else(|p| p.into_inner()).armed = false;
                    // SAFETY: the channel outlives the CQ (its count above), and the CQ
                    // joins this thread before it is freed.
                    unsafe { &*(ch as *const Channel) }.post(cq);
                }
            })
            .ok();
        Watcher {
            state,
            notify,
            thread,
        }
    }

    /// `ibv_req_notify_cq`: an event for the next completion, or with `solicited_only` for
    /// the next solicited or error one.
    pub(crate) fn arm(&self, solicited_only: bool) {
        self.notify.arm_for(solicited_only);
        let (m, cv) = &*self.state;
        m.lock().unwrap_or_else(|p| p.into_inner()).armed = true;
        cv.notify_one();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let (m, cv) = &*self.state;
        m.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
