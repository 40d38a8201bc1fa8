//! The application's connection to `iwarp-control` (its `control.sock`): one request at a time,
//! its reply awaited; connection and asynchronous events that arrive meanwhile are queued for
//! [`crate::Context::next_event`]. The slow path only: nothing here runs per work request.

use crate::error::Error;
use iwarp_abi::app::{decode_to_app, encode_request, message_len};
use iwarp_abi::app::{Event, Failure, Reply, Request, ToApp};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long control may take to answer a request (it waits on iwarpd for most of them).
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

pub(crate) struct Link {
    stream: UnixStream,
    inbuf: Vec<u8>,
    events: VecDeque<Event>,
    path: PathBuf,
    /// Control closed the socket (it exited, or found iwarpd gone).
    closed: bool,
}

pub(crate) type Shared = Arc<Mutex<Link>>;

pub(crate) fn lock(l: &Shared) -> MutexGuard<'_, Link> {
    l.lock().unwrap_or_else(|p| p.into_inner())
}

impl Link {
    pub(crate) fn open(sock: &Path) -> Result<Link, Error> {
        let stream = UnixStream::connect(sock).map_err(|e| Error::ControlUnreachable {
            path: sock.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Link {
            stream,
            inbuf: Vec::new(),
            events: VecDeque::new(),
            path: sock.to_path_buf(),
            closed: false,
        })
    }

    /// Sends `req` and returns its reply; a `Failed` reply becomes [`Error::Refused`].
    pub(crate) fn call(&mut self, req: &Request) -> Result<Reply, Error> {
        if self.closed {
            return Err(self.gone());
        }
        self.stream
            .write_all(&encode_request(req))
            .map_err(|e| self.io(e))?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            match self.read_one(Some(deadline))? {
                ToApp::Event(e) => self.events.push_back(e),
                ToApp::Reply(Reply::Failed(Failure { code, message })) => {
                    return Err(Error::Refused { code, message })
                }
                ToApp::Reply(r) => return Ok(r),
            }
        }
    }

    /// The next event, waiting until `deadline` (None: return at once if none is queued or
    /// readable).
    pub(crate) fn event(&mut self, deadline: Option<Instant>) -> Result<Option<Event>, Error> {
        if let Some(e) = self.events.pop_front() {
            return Ok(Some(e));
        }
        if self.closed {
            return Err(self.gone());
        }
        let deadline = deadline.unwrap_or_else(Instant::now);
        match self.read_one(Some(deadline)) {
            Ok(ToApp::Event(e)) => Ok(Some(e)),
            Ok(other) => Err(Error::Protocol(format!(
                "unsolicited reply from iwarp-control: {other:?}"
            ))),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Puts events back at the front of the queue, in order (a waiter skipped them).
    pub(crate) fn requeue(&mut self, events: Vec<Event>) {
        for e in events.into_iter().rev() {
            self.events.push_front(e);
        }
    }

    /// Reads one whole message, waiting until `deadline`.
    fn read_one(&mut self, deadline: Option<Instant>) -> Result<ToApp, Error> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(n) = message_len(&self.inbuf).map_err(|e| Error::Protocol(e.to_string()))? {
                let r =
                    decode_to_app(&self.inbuf[4..n]).map_err(|e| Error::Protocol(e.to_string()));
                self.inbuf.drain(..n);
                return r;
            }
            let wait = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => REPLY_TIMEOUT,
            };
            let got = if wait.is_zero() {
                // Poll once without blocking before giving up. A receive timeout is counted
                // in scheduler ticks, so even 1 µs would block for a whole tick (4 ms at
                // 250 Hz) on every poll that finds nothing.
                self.read_now(&mut chunk)
            } else {
                self.stream
                    .set_read_timeout(Some(wait))
                    .map_err(|e| self.io(e))?;
                self.stream.read(&mut chunk)
            };
            match got {
                Ok(0) => {
                    self.closed = true;
                    return Err(self.gone());
                }
                Ok(k) => self.inbuf.extend_from_slice(&chunk[..k]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Error::Timeout {
                            what: "an answer or event from iwarp-control",
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    /// Whether control still holds the connection: takes in whatever is readable now
    /// (kept whole for [`Link::event`] and [`Link::call`]) and looks for its end.
    pub(crate) fn served(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        while !self.closed {
            match self.read_now(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(k) => self.inbuf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    let _ = self.io(e);
                    break;
                }
            }
        }
        !self.closed
    }

    /// One read that returns at once (`WouldBlock` when nothing is readable).
    fn read_now(&mut self, chunk: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_nonblocking(true)?;
        let r = self.stream.read(chunk);
        self.stream.set_nonblocking(false)?;
        r
    }

    fn gone(&self) -> Error {
        Error::ControlGone {
            path: self.path.clone(),
        }
    }

    fn io(&mut self, e: std::io::Error) -> Error {
        if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) {
            self.closed = true;
            return self.gone();
        }
        Error::Io(e)
    }
}

/// A request sent when a resource is dropped (destroy, deregister): best effort, since the
/// application is letting go and control cleans up after it anyway when it exits.
pub(crate) struct Release {
    link: Shared,
    req: Option<Request>,
}

impl Release {
    pub(crate) fn new(link: &Shared, req: Request) -> Release {
        Release {
            link: link.clone(),
            req: Some(req),
        }
    }
}

impl Release {
    pub(crate) fn link(&self) -> &Shared {
        &self.link
    }

    /// Releases now and says how it went; on failure the request stays armed (dropping
    /// tries again).
    pub(crate) fn now(&mut self) -> Result<(), Error> {
        if let Some(req) = &self.req {
            lock(&self.link).call(req)?;
            self.req = None;
        }
        Ok(())
    }

    /// The resource was replaced (re-registration): nothing to release any more.
    pub(crate) fn disarm(&mut self) {
        self.req = None;
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(req) = self.req.take() {
            let _ = lock(&self.link).call(&req);
        }
    }
}

impl core::fmt::Debug for Release {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Release({:?})", self.req)
    }
}
