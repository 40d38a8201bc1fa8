//! `iwarp-control`: the control-plane process. Maps iwarpd's segment (R/daemon.shm), serves
//! applications on R/control.sock, turns their requests into daemon commands through the
//! sans-IO [`iwarp_control::app_server::Core`], and cleans up after an application whose
//! socket reaches EOF (exit or crash).
//!
//! Usage: `iwarp-control [--config FILE] [--runtime-dir DIR]`.
//!
//! Single-threaded and non-blocking: one loop accepts, reads, answers, runs the connection
//! manager over the daemon's upcalls and watches the daemon (pid, segment identity,
//! heartbeat). Replies and events wait in a bounded queue per application
//! ([`iwarp_control::client`]) and are written as its socket takes them; an application that
//! lets the queue overflow is dropped and cleaned up after as on EOF. A vanished or replaced
//! iwarpd makes it close every application socket and exit with status 3; SIGINT/SIGTERM
//! tear every application down and remove control.sock.

use iwarp_abi::app::{ConnSettings, Event, Request};
use iwarp_abi::command::{reply_status, Command, ShmPath, Upcall};
use iwarp_abi::daemon_shm::{ControlBell, ControlSide, DaemonShm};
use iwarp_abi::id::{CqId, QpId, SrqId};
use iwarp_abi::qp::QpState;
use iwarp_abi::segment::{Segment, SegmentKind};
use iwarp_abi::wake::Waker;
use iwarp_config::Config;
use iwarp_control::app_proto::{decode_request, encode_event, encode_reply, message_len};
use iwarp_control::app_server::{Core, Reply, VerifiedSegment};
use iwarp_control::client::{Outbox, Unwritable};
use iwarp_control::conn_manager::{Action, CmError, ConnManager};
use iwarp_control::daemon_link::{DaemonWatch, Liveness, Pipeline, Router};
use iwarp_control::error::Resource;
use iwarp_control::Error;
use std::io::{ErrorKind, Read};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Set by SIGINT/SIGTERM; the loop then cleans up and exits.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

struct App {
    id: u32,
    stream: UnixStream,
    pid: u32,
    buf: Vec<u8>,
    /// Replies and events its socket has not taken yet.
    out: Outbox,
    /// Why it can no longer be written to: it is dropped on the loop's next turn.
    unwritable: Option<Unwritable>,
}

impl App {
    /// Queues `msg` for the application; a failure marks it for removal.
    fn send(&mut self, msg: &[u8]) {
        if self.unwritable.is_none() {
            if let Err(e) = self.out.send(&mut self.stream, msg) {
                self.unwritable = Some(e);
            }
        }
    }
}

fn peer_pid(s: &UnixStream) -> u32 {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of `len` octets on a connected Unix socket.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r == 0 {
        cred.pid as u32
    } else {
        0
    }
}

struct Daemon {
    side: ControlSide,
    /// Which worker each command goes to.
    router: Router,
    next_req: u64,
    /// Upcalls other than replies (connection events), for the connection manager.
    pending: std::collections::VecDeque<Upcall>,
    /// Wakes iwarpd's poll loop when it sleeps (`None`: it polls on a timer).
    waker: Option<Waker>,
    /// The connection manager's commands in flight and the application events behind them.
    pipe: Pipeline<Command, (u32, Event)>,
}

/// How long a wait for the daemon only yields the CPU before it sleeps between looks: a
/// reply is usually due within one turn of the worker's loop, and a sleep costs a timer
/// slice or more on a busy machine.
const SPIN: Duration = Duration::from_millis(2);

/// Waits out one look that found nothing, `since` the wait began.
fn pause(since: Instant) {
    if since.elapsed() < SPIN {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

impl Daemon {
    /// Queues `c` (on behalf of `app` when known) for the worker that serves it and rings
    /// it; returns the worker and the request id. While the ring is full (back-pressure)
    /// it keeps taking the worker's upcalls, so a worker waiting for room in its own
    /// upcall ring is never waited on in turn.
    fn send(&mut self, app: Option<u32>, c: &Command) -> Result<(usize, u64), String> {
        let w = self.router.route(app, c);
        self.next_req += 1;
        let req = self.next_req;
        let since = Instant::now();
        let deadline = since + Duration::from_secs(5);
        while self.side.send_command(w, req, c).is_err() {
            if Instant::now() > deadline || !self.side.daemon_alive() {
                return Err(format!(
                    "iwarpd's worker {w} is not draining its command ring"
                ));
            }
            match self.side.recv_upcall(w) {
                Some(Ok(u)) => self.absorb(w, u),
                Some(Err(e)) => tracing::warn!("bad upcall slot: {e}"),
                None => pause(since),
            }
        }
        if let Some(k) = &self.waker {
            k.kick_worker(w);
        }
        Ok((w, req))
    }

    /// Sends `c` without waiting for its reply (the connection manager's commands): a
    /// refusal is logged when the reply comes.
    fn post(&mut self, c: &Command) -> Result<(), String> {
        let (_, req) = self.send(None, c)?;
        self.pipe.sent(req, *c);
        Ok(())
    }

    /// Sends `c` and waits for its reply.
    fn call(&mut self, app: Option<u32>, c: &Command) -> Result<u32, String> {
        let (w, req) = self.send(app, c)?;
        let since = Instant::now();
        let deadline = since + Duration::from_secs(5);
        loop {
            match self.side.recv_upcall(w) {
                Some(Ok(Upcall::Reply { req_id, status, .. })) if req_id == req => {
                    return Ok(status)
                }
                Some(Ok(u)) => self.absorb(w, u),
                Some(Err(e)) => tracing::warn!("bad upcall slot: {e}"),
                None => {
                    if Instant::now() > deadline || !self.side.daemon_alive() {
                        return Err(format!(
                            "iwarpd's worker {w} did not answer (dead or stuck)"
                        ));
                    }
                    pause(since);
                }
            }
        }
    }

    /// An upcall of worker `w` that nobody waits for at the moment: the reply to a posted
    /// command is checked off, anything else is kept for the connection manager.
    fn absorb(&mut self, w: usize, u: Upcall) {
        if let Upcall::Reply { req_id, status, .. } = u {
            if let Some(c) = self.pipe.answered(req_id) {
                if status != reply_status::OK {
                    tracing::warn!("iwarpd refused {c:?}: status {status}");
                }
                return;
            }
        }
        self.router.learn(w, &u);
        self.pending.push_back(u);
    }

    /// Takes every upcall the workers have ready; false when there was none.
    fn drain(&mut self) -> bool {
        let mut any = false;
        for w in 0..self.side.worker_count() {
            while let Some(u) = self.side.recv_upcall(w) {
                any = true;
                match u {
                    Ok(u) => self.absorb(w, u),
                    Err(e) => tracing::warn!("bad upcall slot: {e}"),
                }
            }
        }
        any
    }
}

/// The ring segments a request names, with the kind each must be.
fn rings_of(req: &Request) -> Vec<(ShmPath, SegmentKind)> {
    match req {
        Request::CreateCq { ring, .. } | Request::ModifyCq { ring, .. } => {
            vec![(*ring, SegmentKind::CompletionQueue)]
        }
        Request::CreateSrq { ring, .. } => vec![(*ring, SegmentKind::SharedRecvQueue)],
        Request::CreateQp { attrs, sq, rq } => {
            let mut v = vec![(*sq, SegmentKind::SendQueue)];
            if attrs.srq.is_none() {
                v.push((*rq, SegmentKind::RecvQueue));
            }
            v
        }
        _ => vec![],
    }
}

fn cm_error(e: CmError, id: u32) -> Reply {
    Reply::Failed(match e {
        CmError::PortInUse => Error::InUse {
            what: Resource::Connection,
            id,
            users: 1,
        },
        CmError::NoSuchConnection | CmError::NotListening => Error::InvalidHandle {
            what: Resource::Connection,
            id,
        },
    })
}

/// Connection-management requests: checked here, run by the connection manager, whose
/// actions go to `outbox`.
fn serve_cm(
    core: &mut Core,
    cm: &mut ConnManager,
    outbox: &mut Vec<Action>,
    app: u32,
    req: Request,
    now: u64,
) -> Reply {
    let r = match req {
        Request::Connect {
            qp,
            remote,
            settings,
        } => {
            if let Err(e) = core.check_qp(app, qp) {
                return Reply::Failed(e);
            }
            let (conn, acts) = cm.connect(app, qp.0, remote, settings, now);
            outbox.extend(acts);
            return Reply::Id(conn);
        }
        Request::Accept { conn, qp, settings } => {
            if let Err(e) = core.check_qp(app, qp) {
                return Reply::Failed(e);
            }
            cm.accept(app, conn, qp.0, settings)
                .map_err(|e| cm_error(e, conn))
        }
        Request::Reject { conn, private_data } => cm
            .reject(app, conn, &private_data)
            .map_err(|e| cm_error(e, conn)),
        Request::Disconnect { conn, abort } => {
            // The QP leaves RTS: Closing (the daemon drains it, then it is Idle there; the
            // application moves it on with Modify QP) or Error.
            let qp = cm.qp_of(app, conn);
            let r = cm
                .disconnect(app, conn, abort)
                .map_err(|e| cm_error(e, conn));
            if let (Ok(_), Some(qp)) = (&r, qp) {
                let to = if abort {
                    QpState::Error
                } else {
                    QpState::Closing
                };
                core.set_qp_state(qp, to);
            }
            r
        }
        _ => {
            return Reply::Failed(Error::Protocol {
                what: "not a connection request",
            })
        }
    };
    match r {
        Ok(acts) => {
            outbox.extend(acts);
            Reply::Done
        }
        Err(reply) => reply,
    }
}

/// A QP in Closing whose stream has closed is Idle in the daemon (Verbs section 6.2.5): the
/// daemon drains it and says nothing more, so control records it here, where Modify QP may
/// move it on again.
fn closing_done(core: &mut Core, cm: &mut ConnManager, u: &Upcall) {
    let Some(qp) = cm.closed_qp(u) else {
        return;
    };
    let r = core.resources();
    let closing = r
        .qp_owner(qp)
        .is_some_and(|app| r.qp(app, qp).is_ok_and(|q| q.state == QpState::Closing));
    if closing {
        core.set_qp_state(qp, QpState::Idle);
    }
}

/// An asynchronous event of the daemon as an event for the application owning its QP, CQ
/// or S-RQ (Verbs section 8.3.3); a QP it puts in Error is recorded so.
fn async_event(core: &mut Core, u: &Upcall) -> Option<Action> {
    let r = core.resources();
    let (app, event) = match *u {
        Upcall::QpTerminated(t) => (r.qp_owner(t.qp.0)?, Event::QpTerminated(t)),
        Upcall::QpError { qp } => {
            let app = r.qp_owner(qp)?;
            core.set_qp_state(qp, QpState::Error);
            (app, Event::QpError { qp: QpId(qp) })
        }
        Upcall::QpClosed { qp } => {
            // The application hears of the close as Disconnected (TcpClosed); here only the
            // state: out of RTS, Idle unless a QpError follows (Verbs section 6.2.2.2).
            let app = r.qp_owner(qp)?;
            if r.qp(app, qp).is_ok_and(|q| q.state == QpState::Rts) {
                core.set_qp_state(qp, QpState::Idle);
            }
            return None;
        }
        Upcall::CqOverflow { cq } => (r.cq_owner(cq)?, Event::CqOverflow { cq: CqId(cq) }),
        Upcall::SrqLimit { srq } => (r.srq_owner(srq)?, Event::SrqLimit { srq: SrqId(srq) }),
        _ => return None,
    };
    Some(Action::App { app, event })
}

/// Stop listening on `port`: the daemon has closed the port before the reply, so a connect
/// the application then asks a peer for is refused.
fn unlisten(cm: &mut ConnManager, daemon: &mut Daemon, app: u32, port: u16) -> Reply {
    let acts = match cm.stop_listening(app, port) {
        Ok(a) => a,
        Err(e) => return cm_error(e, port as u32),
    };
    for a in acts {
        let Action::Daemon(c) = a else { continue };
        // Whatever the daemon answers, nothing listens there any more: a status other than
        // OK says it did not know the port, and a daemon that cannot be reached listens on
        // nothing.
        if let Err(e) = daemon.call(Some(app), &c) {
            tracing::warn!("unlisten on port {port} for app {app}: {e}");
        }
    }
    Reply::Done
}

/// Listen on `port`: the connection manager's listener, and the daemon's, before the reply.
fn listen(
    cm: &mut ConnManager,
    daemon: &mut Daemon,
    app: u32,
    port: u16,
    settings: ConnSettings,
) -> Reply {
    let acts = match cm.listen(app, port, settings) {
        Ok(a) => a,
        Err(e) => return cm_error(e, port as u32),
    };
    for a in acts {
        let Action::Daemon(c) = a else { continue };
        match daemon.call(Some(app), &c) {
            Ok(reply_status::OK) => {}
            Ok(_) | Err(_) => {
                cm.unlisten(port);
                return Reply::Failed(Error::InUse {
                    what: Resource::Connection,
                    id: port as u32,
                    users: 1,
                });
            }
        }
    }
    Reply::Done
}

/// Runs connection-manager actions and feeds it daemon upcalls and timers until quiet.
/// Commands go out without waiting for their replies; an application's event waits until
/// the commands made before it are answered, so an application told Established finds its
/// QP in RTS in the daemon. Returns whether anything happened.
fn pump(
    core: &mut Core,
    daemon: &mut Daemon,
    cm: &mut ConnManager,
    apps: &mut [App],
    outbox: &mut Vec<Action>,
    now: u64,
) -> bool {
    outbox.extend(cm.handle_timeout(now));
    let mut busy = false;
    loop {
        busy |= daemon.drain();
        while let Some(u) = daemon.pending.pop_front() {
            busy = true;
            closing_done(core, cm, &u);
            outbox.extend(cm.handle_upcall(&u, now));
            outbox.extend(async_event(core, &u));
        }
        for (app, event) in daemon.pipe.release() {
            busy = true;
            if let Some(a) = apps.iter_mut().find(|a| a.id == app) {
                a.send(&encode_event(&event));
            }
        }
        if outbox.is_empty() {
            return busy;
        }
        busy = true;
        for a in std::mem::take(outbox) {
            match a {
                Action::Daemon(c) => {
                    if let Command::QpRts { qp, .. } = c {
                        core.set_qp_state(qp.0, QpState::Rts);
                    }
                    if let Err(e) = daemon.post(&c) {
                        tracing::error!("{e}");
                    }
                }
                Action::App { app, event } => daemon.pipe.hold((app, event)),
            }
        }
    }
}

/// Tears down everything of an application that went away (exit, crash, or dropped): its
/// connections are reset first, so that a peer hears that the application is gone and not
/// a graceful close (the stream of a QP put in Error ends with a FIN); then its QPs,
/// regions, CQs and PDs in the daemon. Its listening ports close too.
fn app_gone(
    core: &mut Core,
    daemon: &mut Daemon,
    cm: &mut ConnManager,
    outbox: &mut Vec<Action>,
    app: u32,
) {
    for a in cm.app_gone(app) {
        match a {
            Action::Daemon(c) => {
                if let Err(e) = daemon.call(None, &c) {
                    tracing::warn!("cleanup of app {app}: {e}");
                }
            }
            other => outbox.push(other),
        }
    }
    for c in core.app_gone(app) {
        if let Err(e) = daemon.call(Some(app), &c) {
            tracing::warn!("cleanup of app {app}: {e}");
        }
    }
    daemon.router.forget_app(app);
}

fn serve_one(core: &mut Core, daemon: &mut Daemon, app: &mut App, req: Request) -> Reply {
    if let Request::AttachSegment { path } = req {
        // Only memory the daemon can map: a verbs-allocated segment of kind Memory, sealed
        // against shrinking (iwarpd maps nothing else), created by this very application.
        return match Segment::open_sealed(&path.to_path(), Some(SegmentKind::Memory)) {
            Ok(seg) if seg.header().creator_pid == app.pid => {
                let id = core.add_segment(
                    app.id,
                    VerifiedSegment {
                        path,
                        data_len: seg.data_len() as u64,
                    },
                );
                Reply::Id(id)
            }
            Ok(_) => Reply::Failed(Error::Protocol {
                what: "segment was not created by this application",
            }),
            Err(iwarp_abi::Error::NotSealed) => Reply::Failed(Error::Protocol {
                what: "segment is not sealed against shrinking: allocate it with iwarp-verbs \
                       (alloc_buffer)",
            }),
            Err(_) => Reply::Failed(Error::Protocol {
                what: "not a shared segment allocated through iwarp-verbs (alloc_buffer)",
            }),
        };
    }
    // Ring segments named in a request must be this application's own sealed segments of
    // the right kind: iwarpd is never pointed at any other file.
    let rings = rings_of(&req);
    for (path, kind) in rings {
        match Segment::open_sealed(&path.to_path(), Some(kind)) {
            Ok(seg) if seg.header().creator_pid == app.pid => {}
            Err(iwarp_abi::Error::Version { .. }) => {
                return Reply::Failed(Error::Protocol {
                    what: "ring written by another ABI version: the application's iwarp-verbs \
                           and this iwarp-control come from different builds",
                })
            }
            _ => {
                return Reply::Failed(Error::Protocol {
                    what: "ring is not a sealed segment of the right kind created by this \
                           application",
                })
            }
        }
    }
    core.serve(app.id, req, |c| match daemon.call(Some(app.id), c) {
        Ok(reply_status::OK) => reply_status::OK,
        Ok(st) => {
            tracing::warn!("iwarpd refused {c:?}: status {st}");
            st
        }
        Err(e) => {
            tracing::error!("{e}");
            reply_status::BAD_COMMAND
        }
    })
}

/// Reads of one application's socket per turn of the loop (4 KiB each).
const READS_PER_TURN: usize = 16;

/// The longest a quiet loop sleeps: a worker rings the bell when it queues an upcall, so
/// this bounds only how late a dead iwarpd or a stalled heartbeat is noticed.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// The longest an idle loop naps before it is quiet (and always without a bell): no worker
/// rings for an upcall then, so it looks at the upcall rings this often.
const NAP: Duration = Duration::from_micros(200);

/// How long after its last work the loop naps before it sleeps on the bell. While
/// connections are being set up upcalls come every few microseconds, and a ring for each
/// would cost the worker a system call and control a wake-up: napping takes them in batches.
const QUIET_AFTER: Duration = Duration::from_millis(10);

/// One look at control's sockets each turn: the listener, the bell and every application's
/// socket, in one `ppoll`, which costs less than a read of each (an `accept` that finds no
/// application still allocates a socket and frees it). The descriptors are kept from turn
/// to turn, and what the look found is read off their `revents`.
#[derive(Default)]
struct Looks {
    fds: Vec<libc::pollfd>,
}

impl Looks {
    /// Waits up to `timeout` (zero: only looks) for a new application, a request, room in
    /// the socket of an application with replies queued, or the bell (an upcall).
    fn wait(
        &mut self,
        listener: &UnixListener,
        bell: Option<&ControlBell>,
        apps: &[App],
        timeout: Duration,
    ) {
        use std::os::fd::AsRawFd;
        let watch = |fd, events| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        self.fds.clear();
        self.fds.push(watch(listener.as_raw_fd(), libc::POLLIN));
        // The bell has no entry of its own in what was found: the upcall rings are looked
        // at every turn. A missing bell is polled as fd -1, which ppoll skips.
        self.fds
            .push(watch(bell.map_or(-1, ControlBell::fd), libc::POLLIN));
        for a in apps {
            let mut events = libc::POLLIN;
            if a.out.queued() > 0 {
                events |= libc::POLLOUT;
            }
            self.fds.push(watch(a.stream.as_raw_fd(), events));
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a live array of `fds.len()` pollfd entries for the duration of
        // the call, `ts` a valid timespec, and a null signal mask leaves the mask as it is.
        let n = unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if n < 0 {
            // EINTR (SIGTERM) or a failed look: every socket is looked at, as if all were
            // ready; each read or accept that finds nothing says so at once.
            for p in &mut self.fds {
                p.revents = libc::POLLIN;
            }
        }
    }

    /// Whether an application waits on the listener.
    fn listener(&self) -> bool {
        self.fds.first().is_some_and(|p| p.revents != 0)
    }

    /// Whether application `i` (in the order of the `apps` looked at) is to be read: any
    /// event but POLLOUT (POLLHUP and POLLERR are its end closing, which a read reports;
    /// replies are flushed every turn). One accepted after the look was not looked at: it
    /// may have written already.
    fn app(&self, i: usize) -> bool {
        self.fds
            .get(i + 2)
            .is_none_or(|p| p.revents & !libc::POLLOUT != 0)
    }
}

/// How often the loop checks that iwarpd still lives (a signal and a `stat` of its
/// segment): an exit is noticed within this, and a busy loop does not pay for it each turn.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);

/// Logs to stderr at the configured level (`daemon.log_level`, as iwarpd does).
fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut config = Config::default();
    let mut runtime: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--config", Some(p)) => match Config::load(std::path::Path::new(&p)) {
                Ok(c) => config = c,
                Err(e) => {
                    eprintln!("iwarp-control: {e}");
                    return ExitCode::from(2);
                }
            },
            ("--runtime-dir", Some(p)) => runtime = Some(p.into()),
            _ => {
                eprintln!("usage: iwarp-control [--config FILE] [--runtime-dir DIR]");
                return ExitCode::from(2);
            }
        }
    }
    iwarp_config::logging::init(config.daemon.log_level);
    // Each QP's rings are shared-memory files held open here; an ordinary user's soft limit
    // (often 1024) would cap a daemon at a few hundred connections.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    let dir = runtime.unwrap_or_else(|| config.runtime_dir());
    let shm = dir.join("daemon.shm");
    let generation = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    let side = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match DaemonShm::open(&shm, generation) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => {
                    tracing::error!("cannot map {}: {e} (is iwarpd running?)", shm.display());
                    return ExitCode::from(1);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    };
    let mut daemon = Daemon {
        router: Router::new(side.worker_count()),
        side,
        next_req: 0,
        pending: Default::default(),
        // iwarpd makes its doorbell before its segment appears.
        waker: Waker::open(&dir)
            .map_err(|e| {
                tracing::warn!(
                    "no doorbell in {} ({e}): commands wait for iwarpd's next \
                     poll",
                    dir.display()
                )
            })
            .ok(),
        pipe: Pipeline::default(),
    };
    // MPA setup must finish within this (RFC 5044 section 7.1 leaves the value to us).
    let mut cm = ConnManager::new(10_000, config.mss() as u32)
        .with_rts_delay(config.mpa.rts_delay_ms)
        .with_max_conns(config.limits.max_qp as usize);
    let mut outbox: Vec<Action> = Vec::new();
    let start = Instant::now();
    // Each worker's poll loop bumps its heartbeat; silence for 3 s is reported.
    let mut watches: Vec<(DaemonWatch, bool)> = (0..daemon.side.worker_count())
        .map(|w| {
            let beat = daemon.side.heartbeat(w);
            (
                DaemonWatch::new(daemon.side.generation(), beat, 0, 3000),
                false,
            )
        })
        .collect();
    // What an idle loop sleeps on besides the sockets: the workers ring it for an upcall.
    let bell = ControlBell::create(&dir)
        .map_err(|e| {
            tracing::warn!(
                "no bell in {} ({e}): an idle loop looks at iwarpd's upcalls every {} µs",
                dir.display(),
                NAP.as_micros()
            )
        })
        .ok();
    let sock = dir.join("control.sock");
    // Before control.sock appears: whoever sees it may stop us at once, and SIGTERM must
    // then end the loop below, not the process.
    install_signal_handlers();
    // Bound under a temporary name and renamed into place: control.sock exists only once it
    // is listening, so an application that sees the file can connect (no refused window
    // between bind and listen).
    let staging = dir.join("control.sock.new");
    let _ = std::fs::remove_file(&staging);
    let listener = match UnixListener::bind(&staging).and_then(|l| {
        std::fs::rename(&staging, &sock)?;
        Ok(l)
    }) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot bind {}: {e}", sock.display());
            let _ = std::fs::remove_file(&staging);
            return ExitCode::from(1);
        }
    };
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!("{e}");
        return ExitCode::from(1);
    }
    tracing::info!(
        "serving {} (iwarpd pid {}, generation {:#x}, {} worker(s))",
        sock.display(),
        daemon.side.daemon_pid(),
        daemon.side.generation(),
        daemon.side.worker_count()
    );
    let mut core = Core::new(config.limits.clone());
    let mut apps: Vec<App> = Vec::new();
    let mut next_app = 1u32;
    let mut last_busy = Instant::now();
    let mut last_liveness: Option<Instant> = None;
    // The next look's wait: none while work may be waiting, a nap once the loop is idle, up
    // to IDLE_WAIT on the bell (`ring_me`) once it is quiet.
    let mut wait = Duration::ZERO;
    let mut ring_me = false;
    let mut looks = Looks::default();
    loop {
        if ring_me {
            // Asleep from here: a worker that queues an upcall rings. One more look at the
            // rings, since one may have come before the word was stored.
            daemon.side.sleeping();
            if daemon.side.upcalls_waiting() {
                wait = Duration::ZERO;
            }
        }
        looks.wait(&listener, bell.as_ref(), &apps, wait);
        if ring_me {
            daemon.side.awake();
            if let Some(b) = &bell {
                b.drain();
            }
        }
        if STOP.load(std::sync::atomic::Ordering::Relaxed) {
            // Ctrl-C / SIGTERM: tear every application's resources down in the daemon and
            // leave nothing behind (the socket file; applications see EOF).
            for app in apps.drain(..) {
                app_gone(&mut core, &mut daemon, &mut cm, &mut outbox, app.id);
            }
            let _ = std::fs::remove_file(&sock);
            tracing::info!("stopped");
            return ExitCode::SUCCESS;
        }
        let liveness_due = last_liveness.is_none_or(|t| t.elapsed() >= LIVENESS_EVERY);
        if liveness_due {
            last_liveness = Some(Instant::now());
        }
        if liveness_due && (!daemon.side.daemon_alive() || daemon.side.daemon_replaced()) {
            // Every QP, region and connection lived in that daemon: tell applications by
            // closing their sockets, and leave (a supervisor restarts us with the new one).
            tracing::error!("iwarpd died or was restarted; closing all applications");
            let _ = std::fs::remove_file(&sock);
            return ExitCode::from(3);
        }
        // Every application waiting, once the look saw one.
        if looks.listener() {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if stream.set_nonblocking(true).is_ok() {
                            let pid = peer_pid(&stream);
                            daemon.router.place(next_app);
                            apps.push(App {
                                id: next_app,
                                stream,
                                pid,
                                buf: Vec::new(),
                                out: Outbox::default(),
                                unwritable: None,
                            });
                            next_app += 1;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        break;
                    }
                }
            }
        }
        let now = start.elapsed().as_millis() as u64;
        for (w, (watch, stalled)) in watches.iter_mut().enumerate() {
            match watch.sample(daemon.side.generation(), daemon.side.heartbeat(w), now) {
                Liveness::Stalled { since_ms } if !*stalled => {
                    *stalled = true;
                    tracing::warn!(
                        "the heartbeat of iwarpd's worker {w} has not moved for \
                         {since_ms} ms"
                    );
                }
                Liveness::Alive => *stalled = false,
                _ => {}
            }
        }
        let mut idle = true;
        let mut gone = Vec::new();
        for (i, app) in apps.iter_mut().enumerate() {
            if app.unwritable.is_none() && app.out.queued() > 0 {
                if let Err(e) = app.out.flush(&mut app.stream) {
                    app.unwritable = Some(e);
                }
            }
            if app.unwritable.is_some() {
                gone.push(i);
                continue;
            }
            // Everything the application has sent, up to a bound per turn so one busy
            // application cannot hold up the others: an application that pipelines its
            // requests has them all answered in one turn.
            let mut tmp = [0u8; 4096];
            let reads = if looks.app(i) { READS_PER_TURN } else { 0 };
            for _ in 0..reads {
                match app.stream.read(&mut tmp) {
                    Ok(0) => {
                        gone.push(i);
                        break;
                    }
                    Ok(n) => {
                        idle = false;
                        app.buf.extend_from_slice(&tmp[..n]);
                        if n < tmp.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        gone.push(i);
                        break;
                    }
                }
            }
            loop {
                let n = match message_len(&app.buf) {
                    Ok(Some(n)) => n,
                    Ok(None) => break,
                    Err(_) => {
                        // An unframable stream cannot be resynchronised: drop the app.
                        gone.push(i);
                        break;
                    }
                };
                let body: Vec<u8> = app.buf.drain(..n).skip(4).collect();
                let reply = match decode_request(&body) {
                    // Listening is done in the daemon before the application hears so: a
                    // peer it then tells to connect must find the port open.
                    Ok(Request::Listen { port, settings }) => {
                        listen(&mut cm, &mut daemon, app.id, port, settings)
                    }
                    Ok(Request::Unlisten { port }) => unlisten(&mut cm, &mut daemon, app.id, port),
                    Ok(Request::Placement) => Reply::Id(daemon.router.app_worker(app.id) as u32),
                    Ok(
                        req @ (Request::Connect { .. }
                        | Request::Accept { .. }
                        | Request::Reject { .. }
                        | Request::Disconnect { .. }),
                    ) => serve_cm(&mut core, &mut cm, &mut outbox, app.id, req, now),
                    Ok(req) => serve_one(&mut core, &mut daemon, &mut *app, req),
                    Err(e) => Reply::Failed(e),
                };
                app.send(&encode_reply(&reply));
                if app.unwritable.is_some() {
                    gone.push(i);
                    break;
                }
            }
        }
        gone.sort_unstable();
        gone.dedup();
        for i in gone.into_iter().rev() {
            let app = apps.remove(i);
            if let Some(e @ Unwritable::Overflow { .. }) = app.unwritable {
                tracing::warn!("application {} (pid {}) dropped: {e}", app.id, app.pid);
            }
            app_gone(&mut core, &mut daemon, &mut cm, &mut outbox, app.id);
        }
        if pump(&mut core, &mut daemon, &mut cm, &mut apps, &mut outbox, now) {
            idle = false;
        }
        wait = Duration::ZERO;
        ring_me = false;
        if !idle {
            last_busy = Instant::now();
        } else {
            let due = daemon.pipe.in_flight() > 0 || daemon.pipe.held() > 0;
            if due && last_busy.elapsed() < SPIN {
                // Replies are due within a turn of the workers' loops.
                std::thread::yield_now();
            } else {
                // Until an application's request, a new application, the connection
                // manager's next deadline, or (once quiet) the bell.
                ring_me = bell.is_some() && last_busy.elapsed() >= QUIET_AFTER;
                let longest = if ring_me { IDLE_WAIT } else { NAP };
                // Deadlines are in milliseconds since `start`: wait until that instant itself,
                // not a whole number of milliseconds from a truncated now.
                wait = match cm.next_timeout() {
                    Some(at) => (start + Duration::from_millis(at))
                        .saturating_duration_since(Instant::now())
                        .min(longest),
                    None => longest,
                };
            }
        }
    }
}
