//! The slow path (Verbs section 8.1–8.2 and the connection management of RFC 5044/6581): an
//! open RNIC (a [`Context`] on `iwarp-control`'s socket), protection domains, completion
//! queues and queue pairs with their rings in shared segments this process creates, memory
//! regions over [`SharedBuffer`]s, and connections.
//!
//! Every resource releases itself when dropped (destroy or deregister, sent to control); a
//! queue pair keeps its completion queues alive, a posted work request its memory regions.

use crate::bell::{Bell, BellSlot};
use crate::buffer::SharedBuffer;
use crate::cq::CompletionQueue;
use crate::error::Error;
use crate::link::{lock, Link, Release, Shared};
use crate::mr::{FastRegStag, MemoryRegion, MemoryWindow};
use crate::qp::QueuePair;
use crate::shm::{path_of, ring_segment};
use crate::srq::SharedReceiveQueue;
/// A connection or asynchronous event (Verbs section 8.3.3; RFC 5040 section 7 for the
/// Terminate).
pub use iwarp_abi::app::{ConnectFailure, ConnectRequest, Established, Event};
use iwarp_abi::app::{QpAttrs, Reply, Request};
use iwarp_abi::doorbell::with_bell_ref;
use iwarp_abi::id::PdId;
use iwarp_abi::qp::QpState;
use iwarp_abi::ring;
use iwarp_abi::segment::{Segment, SegmentKind};
use iwarp_abi::wake::Waker;
use iwarp_abi::wqe::{Cqe, RecvWqe, SendWqe};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use iwarp_abi::app::Limits as RnicAttr;
/// MPA settings of a connection (RFC 5044 / RFC 6581): CRC, markers, revision, IRD/ORD,
/// peer-to-peer RTR, RDMAP version 2, private data.
pub use iwarp_abi::app::{ConnSettings, Rtr};

/// The id of a reply, as the type the request's caller knows it to be.
fn id<T: From<u32>>(r: Reply) -> Result<T, Error> {
    match r {
        Reply::Id(i) => Ok(T::from(i)),
        other => Err(Error::Protocol(format!("expected an id, got {other:?}"))),
    }
}

fn done(r: Reply) -> Result<(), Error> {
    match r {
        Reply::Done => Ok(()),
        other => Err(Error::Protocol(format!("expected done, got {other:?}"))),
    }
}

/// An open RNIC: the application's session with one endpoint's `iwarp-control`.
#[derive(Clone)]
pub struct Context {
    link: Shared,
    runtime_dir: PathBuf,
    /// iwarpd's doorbell for an idle poll loop (`iwarp_abi::wake`); `None` when the daemon
    /// offers none (it then polls on a timer).
    waker: Option<Arc<Waker>>,
    worker: Option<usize>,
    /// The doorbell its QPs and S-RQs ring, made with the first of them; `None` when it
    /// could not be made (the daemon then scans their rings every turn).
    bell: Arc<OnceLock<Option<Arc<Bell>>>>,
}

/// What a queue pair is created with (Verbs section 8.2.1).
#[derive(Clone)]
pub struct QpInitAttr {
    pub send_cq: Arc<CompletionQueue>,
    pub recv_cq: Arc<CompletionQueue>,
    pub sq_depth: u32,
    pub rq_depth: u32,
    pub max_sge: u32,
    pub max_inline: u32,
    /// Inbound Read/atomic queue depth offered, and outbound wanted.
    pub ird: u16,
    pub ord: u16,
    /// Take receives from this S-RQ (of the same PD) instead of an own receive queue.
    pub srq: Option<Arc<SharedReceiveQueue>>,
}

impl QpInitAttr {
    /// Both queues `depth` deep on one CQ, 4 SGEs, 64 octets inline, IRD/ORD 16.
    pub fn new(cq: &Arc<CompletionQueue>, depth: u32) -> QpInitAttr {
        QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            sq_depth: depth,
            rq_depth: depth,
            max_sge: 4,
            max_inline: 64,
            ird: 16,
            ord: 16,
            srq: None,
        }
    }
}

/// A protection domain (Verbs section 8.2.3).
pub struct ProtectionDomain {
    pd: PdId,
    ctx: Context,
    _release: Release,
}

impl core::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("pd", &self.pd)
            .finish_non_exhaustive()
    }
}

impl core::fmt::Debug for Context {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("runtime_dir", &self.runtime_dir)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Opens the RNIC served by the `iwarp-control` whose runtime directory is `runtime_dir`.
    pub fn open(runtime_dir: &Path) -> Result<Context, Error> {
        let mut link = Link::open(&runtime_dir.join("control.sock"))?;
        // Control places this application on one of the daemon's workers: posts ring only
        // that worker's doorbell.
        let worker = match link.call(&Request::Placement)? {
            Reply::Id(w) => Some(w as usize),
            _ => None,
        };
        let waker = Waker::open(runtime_dir).ok().map(|w| match worker {
            Some(n) => w.for_worker(n),
            None => w,
        });
        Ok(Context {
            link: Arc::new(Mutex::new(link)),
            runtime_dir: runtime_dir.to_path_buf(),
            waker: waker.map(Arc::new),
            worker,
            bell: Arc::default(),
        })
    }

    /// A doorbell slot for a new QP or S-RQ, named in the trailer of its ring segment `seg`
    /// (whose ring is `ring_len` octets).
    fn bell_slot(&self, seg: &Segment, ring_len: usize) -> Option<BellSlot> {
        let bell = self.bell.get_or_init(|| Bell::create().ok()).as_ref()?;
        bell.claim().filter(|s| s.mark(seg, ring_len))
    }

    /// The daemon's poll-mode worker that serves this context (control placed it there when
    /// it opened; `None` from a control that does not say).
    pub fn worker(&self) -> Option<usize> {
        self.worker
    }

    /// Opens the RNIC of `$IWARP_RUNTIME_DIR`, else of the default configuration's runtime
    /// directory (where `iwarpd` and `iwarp-control` put theirs by default).
    pub fn open_default() -> Result<Context, Error> {
        let dir = match std::env::var_os("IWARP_RUNTIME_DIR") {
            Some(d) => PathBuf::from(d),
            None => iwarp_config::Config::default().runtime_dir(),
        };
        Context::open(&dir)
    }

    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }

    fn call(&self, req: &Request) -> Result<Reply, Error> {
        lock(&self.link).call(req)
    }

    /// Query RNIC (Verbs section 8.2.2): the limits this RNIC grants.
    pub fn query_rnic(&self) -> Result<RnicAttr, Error> {
        match self.call(&Request::QueryRnic)? {
            Reply::Rnic(l) => Ok(l),
            other => Err(Error::Protocol(format!("Query RNIC answered {other:?}"))),
        }
    }

    /// Allocate Protection Domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain, Error> {
        let pd = id(self.call(&Request::AllocPd)?)?;
        Ok(ProtectionDomain {
            pd,
            ctx: self.clone(),
            _release: Release::new(&self.link, Request::DeallocPd { pd }),
        })
    }

    /// Create Completion Queue with room for `depth` completions.
    pub fn create_cq(&self, depth: u32) -> Result<Arc<CompletionQueue>, Error> {
        // The ring, then the notification word the daemon wakes waiters on.
        let (seg, _, consumer, name) = ring_segment::<Cqe>(
            "cq",
            SegmentKind::CompletionQueue,
            depth,
            iwarp_abi::notify::cq_segment_bytes,
        )?;
        let notify = iwarp_abi::notify::Notify::of_cq_segment(&seg, consumer.capacity());
        let cq = self.call(&Request::CreateCq {
            depth,
            ring: path_of(&seg)?,
        });
        // Answered: the daemon has mapped the ring, or never will.
        drop(name);
        let cq = id(cq?)?;
        Ok(Arc::new(
            CompletionQueue::from_ring(cq, consumer)
                .with_notify(notify, depth)
                .with_release(Release::new(&self.link, Request::DestroyCq { cq })),
        ))
    }

    /// Memory the daemon can map, for registration with [`ProtectionDomain::reg_mr`]: a
    /// shared segment (hugepages when free ones exist) of `len` octets, zeroed.
    pub fn alloc_buffer(&self, len: usize) -> Result<SharedBuffer, Error> {
        SharedBuffer::new(len)
    }

    pub(crate) fn attach_segment(&self, seg: &Segment) -> Result<u32, Error> {
        id(self.call(&Request::AttachSegment {
            path: path_of(seg)?,
        })?)
    }

    pub(crate) fn link(&self) -> &Shared {
        &self.link
    }

    /// Listen for connections on TCP `port`; requests arrive as
    /// [`Event::ConnectRequest`] (see [`Context::get_request`]).
    pub fn listen(&self, port: u16, settings: &ConnSettings) -> Result<(), Error> {
        done(self.call(&Request::Listen {
            port,
            settings: settings.clone(),
        })?)
    }

    /// Stops listening on `port` (one this context listens on): connections to it are
    /// refused from then on, and the port can be listened on again. Requests that already
    /// arrived stay to be accepted or rejected.
    pub fn unlisten(&self, port: u16) -> Result<(), Error> {
        done(self.call(&Request::Unlisten { port })?)
    }

    /// Starts connecting `qp` to `remote` (the MPA initiator); returns the connection id.
    /// The outcome is an [`Event`]: Established, Rejected or Failed.
    pub fn connect(
        &self,
        qp: &QueuePair,
        remote: SocketAddr,
        settings: &ConnSettings,
    ) -> Result<u32, Error> {
        id(self.call(&Request::Connect {
            qp: qp.qp_num(),
            remote,
            settings: settings.clone(),
        })?)
    }

    /// [`Context::connect`], then waits for the outcome.
    pub fn connect_blocking(
        &self,
        qp: &QueuePair,
        remote: SocketAddr,
        settings: &ConnSettings,
        timeout: Duration,
    ) -> Result<Established, Error> {
        let conn = self.connect(qp, remote, settings)?;
        self.wait_established(conn, timeout)
    }

    /// Accepts a connection request for `qp` with our settings (the MPA responder).
    pub fn accept(
        &self,
        req: &ConnectRequest,
        qp: &QueuePair,
        settings: &ConnSettings,
    ) -> Result<(), Error> {
        done(self.call(&Request::Accept {
            conn: req.conn,
            qp: qp.qp_num(),
            settings: settings.clone(),
        })?)
    }

    /// [`Context::accept`], then waits until the connection is in RTS.
    pub fn accept_blocking(
        &self,
        req: &ConnectRequest,
        qp: &QueuePair,
        settings: &ConnSettings,
        timeout: Duration,
    ) -> Result<Established, Error> {
        self.accept(req, qp, settings)?;
        self.wait_established(req.conn, timeout)
    }

    /// Rejects a connection request; the peer receives `private_data` with the rejection.
    pub fn reject(&self, req: &ConnectRequest, private_data: &[u8]) -> Result<(), Error> {
        done(self.call(&Request::Reject {
            conn: req.conn,
            private_data: private_data.to_vec(),
        })?)
    }

    /// Graceful (FIN) or abortive (RST) disconnect.
    pub fn disconnect(&self, conn: u32, abort: bool) -> Result<(), Error> {
        done(self.call(&Request::Disconnect { conn, abort })?)
    }

    /// Modify QP (Verbs section 8.2.6) to Closing, Terminate or Error (RTS is entered by
    /// connecting).
    pub fn modify_qp(&self, qp: &QueuePair, state: QpState) -> Result<QpState, Error> {
        match self.call(&Request::ModifyQp {
            qp: qp.qp_num(),
            state,
        })? {
            Reply::Qp { state } => Ok(state),
            Reply::Done => Ok(state),
            other => Err(Error::Protocol(format!("Modify QP answered {other:?}"))),
        }
    }

    /// Query QP: its state as control knows it.
    pub fn query_qp(&self, qp: &QueuePair) -> Result<QpState, Error> {
        match self.call(&Request::QueryQp { qp: qp.qp_num() })? {
            Reply::Qp { state } => Ok(state),
            other => Err(Error::Protocol(format!("Query QP answered {other:?}"))),
        }
    }

    /// The next connection or asynchronous event, waiting at most `timeout`; `None` when
    /// none came.
    pub fn next_event(&self, timeout: Duration) -> Result<Option<Event>, Error> {
        let deadline = Instant::now() + timeout;
        lock(&self.link).event(Some(deadline))
    }

    /// The next asynchronous event (Verbs section 8.3.3: a connection's end, a Terminate, a
    /// QP error, a CQ overflow, an S-RQ limit), waiting at most `timeout`; connection-setup
    /// events stay queued for [`Context::get_request`] and the connect/accept calls.
    pub fn next_async_event(&self, timeout: Duration) -> Result<Option<Event>, Error> {
        match self.wait_for(timeout, "an asynchronous event", |e| {
            matches!(
                e,
                Event::Disconnected { .. }
                    | Event::QpTerminated { .. }
                    | Event::QpError { .. }
                    | Event::CqOverflow { .. }
                    | Event::SrqLimit { .. }
            )
        }) {
            Ok(e) => Ok(Some(e)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether iwarp-control still serves this context, without waiting and without taking
    /// any event: false once it closed the connection (it exited, or found iwarpd gone), when
    /// every resource of the context is gone and nothing posted will complete.
    pub fn is_served(&self) -> bool {
        lock(&self.link).served()
    }

    /// The next connection or asynchronous event if one is queued or already readable,
    /// without waiting.
    pub fn poll_event(&self) -> Result<Option<Event>, Error> {
        lock(&self.link).event(None)
    }

    /// Waits for the next connection request (events of other kinds are kept for
    /// [`Context::next_event`]).
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest, Error> {
        match self.wait_for(timeout, "a connection request", |e| {
            matches!(e, Event::ConnectRequest(_))
        })? {
            Event::ConnectRequest(r) => Ok(r),
            _ => unreachable!("filtered above"),
        }
    }

    /// Waits until connection `conn` is established (or rejected, or failed).
    pub fn wait_established(&self, conn: u32, timeout: Duration) -> Result<Established, Error> {
        let e = self.wait_for(timeout, "the connection to be established", |e| {
            matches!(e, Event::Established(x) if x.conn == conn)
                || matches!(e, Event::Rejected { conn: c, .. } | Event::ConnectFailed { conn: c, .. } if *c == conn)
        })?;
        match e {
            Event::Established(x) => Ok(x),
            Event::Rejected { private_data, .. } => Err(Error::ConnectionRejected { private_data }),
            Event::ConnectFailed { reason, .. } => Err(Error::ConnectionFailed { reason }),
            _ => unreachable!("filtered above"),
        }
    }

    /// Reads events until one matches; the others are queued again, in order.
    fn wait_for(
        &self,
        timeout: Duration,
        what: &'static str,
        want: impl Fn(&Event) -> bool,
    ) -> Result<Event, Error> {
        let deadline = Instant::now() + timeout;
        let mut link = lock(&self.link);
        let mut others = Vec::new();
        let result = loop {
            match link.event(Some(deadline)) {
                Ok(Some(e)) => {
                    if want(&e) {
                        break Ok(e);
                    }
                    others.push(e);
                }
                Ok(None) => break Err(Error::Timeout { what }),
                Err(e) => break Err(e),
            }
        };
        link.requeue(others);
        result
    }
}

impl ProtectionDomain {
    pub fn pd(&self) -> PdId {
        self.pd
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Create QP in this PD, with its send and receive queues in shared rings (no receive
    /// ring with an S-RQ).
    pub fn create_qp(&self, attr: &QpInitAttr) -> Result<QueuePair, Error> {
        // The SQ's segment names the QP's doorbell slot after its ring, the RQ's a slot of
        // its own (a daemon that does not read it visits the RQ with the SQ).
        let (sq_seg, sq, _, sq_name) =
            ring_segment::<SendWqe>("sq", SegmentKind::SendQueue, attr.sq_depth, |s| {
                with_bell_ref(ring::ring_bytes::<SendWqe>(s))
            })?;
        let bell = self
            .ctx
            .bell_slot(&sq_seg, ring::ring_bytes::<SendWqe>(sq.capacity()));
        let rq = match attr.srq {
            Some(_) => None,
            None => {
                let (seg, rq, _, name) =
                    ring_segment::<RecvWqe>("rq", SegmentKind::RecvQueue, attr.rq_depth, |s| {
                        with_bell_ref(ring::ring_bytes::<RecvWqe>(s))
                    })?;
                // Without the QP's slot the daemon reads both rings every turn anyway.
                let bell = bell.as_ref().and_then(|_| {
                    self.ctx
                        .bell_slot(&seg, ring::ring_bytes::<RecvWqe>(rq.capacity()))
                });
                Some((rq, path_of(&seg)?, name, bell))
            }
        };
        let attrs = QpAttrs {
            pd: self.pd,
            send_cq: attr.send_cq.cq_num(),
            recv_cq: attr.recv_cq.cq_num(),
            srq: attr.srq.as_ref().map(|s| s.srq_num()),
            sq_depth: attr.sq_depth,
            rq_depth: attr.rq_depth,
            max_sge: attr.max_sge,
            max_inline: attr.max_inline,
            ird: attr.ird,
            ord: attr.ord,
        };
        let sq_path = path_of(&sq_seg)?;
        let qp = self.ctx.call(&Request::CreateQp {
            attrs,
            sq: sq_path,
            // With an S-RQ there is no receive ring; the field is not read.
            rq: rq.as_ref().map_or(sq_path, |(_, p, _, _)| *p),
        });
        // Answered: the daemon has mapped both rings, or never will.
        drop(sq_name);
        let (rq, rq_bell) = match rq {
            Some((r, _, name, bell)) => {
                drop(name);
                (Some(r), bell)
            }
            None => (None, None),
        };
        let qp = id(qp?)?;
        let release = Release::new(self.ctx.link(), Request::DestroyQp { qp });
        let (send_cq, recv_cq) = (attr.send_cq.clone(), attr.recv_cq.clone());
        let (max_sge, max_inline) = (attr.max_sge as usize, attr.max_inline as usize);
        let q = match (&attr.srq, rq) {
            (Some(srq), _) => {
                QueuePair::with_srq(qp, sq, send_cq, recv_cq, max_sge, max_inline, srq)
            }
            (None, rq) => QueuePair::from_rings(qp, sq, rq, send_cq, recv_cq, max_sge, max_inline),
        };
        Ok(q.with_depths(attr.sq_depth, attr.rq_depth)
            .with_release(release)
            .holding_srq(attr.srq.clone())
            .with_waker(self.ctx.waker.clone())
            .with_bell(bell, rq_bell))
    }

    /// Create S-RQ (Verbs section 6.3.1) of `depth` receives in this PD.
    pub fn create_srq(&self, depth: u32) -> Result<Arc<SharedReceiveQueue>, Error> {
        let (seg, producer, _, name) =
            ring_segment::<RecvWqe>("srq", SegmentKind::SharedRecvQueue, depth, |s| {
                with_bell_ref(ring::ring_bytes::<RecvWqe>(s))
            })?;
        let bell = self
            .ctx
            .bell_slot(&seg, ring::ring_bytes::<RecvWqe>(producer.capacity()));
        let srq = self.ctx.call(&Request::CreateSrq {
            pd: self.pd,
            depth,
            ring: path_of(&seg)?,
        });
        // Answered: the daemon has mapped the ring, or never will.
        drop(name);
        let srq = id(srq?)?;
        Ok(Arc::new(SharedReceiveQueue::new(
            srq,
            producer,
            depth,
            Release::new(self.ctx.link(), Request::DestroySrq { srq }),
            self.ctx.waker.clone(),
            bell,
        )))
    }

    /// Register Memory Region (Verbs section 7.2.3): `len` octets at `offset` of `buf` with
    /// `access` (`iwarp_abi::wqe::access` bits). Zero-based: tagged offsets run from 0 at
    /// the region's first octet. Memory windows bind only to VA-based regions
    /// ([`ProtectionDomain::reg_mr_va`], Verbs figure 19).
    pub fn reg_mr(
        &self,
        buf: &SharedBuffer,
        offset: u64,
        len: u64,
        access: u32,
    ) -> Result<MemoryRegion, Error> {
        self.register(buf, offset, len, access, None)
    }

    /// [`ProtectionDomain::reg_mr`] with a VA-based tagged offset (Verbs section 7.6.1.1):
    /// the region's first octet is addressed as `va`, which must be non-zero (a region
    /// whose tagged offsets start at 0 is zero-based).
    pub fn reg_mr_va(
        &self,
        buf: &SharedBuffer,
        offset: u64,
        len: u64,
        access: u32,
        va: u64,
    ) -> Result<MemoryRegion, Error> {
        self.register(buf, offset, len, access, Some(va))
    }

    fn register(
        &self,
        buf: &SharedBuffer,
        offset: u64,
        len: u64,
        access: u32,
        va: Option<u64>,
    ) -> Result<MemoryRegion, Error> {
        // The segment may be larger (hugepage rounding); the region must fit what was asked;
        // a VA-based region's tagged offsets must not wrap.
        if len == 0
            || offset
                .checked_add(len)
                .is_none_or(|end| end > buf.len() as u64)
            || va.is_some_and(|va| va == 0 || va.checked_add(len).is_none())
        {
            return Err(Error::InvalidLength {
                offset,
                len,
                region_len: buf.len() as u64,
            });
        }
        let segment = buf.attached_id(|seg| self.ctx.attach_segment(seg))?;
        let (pd, req) = (self.pd, |req| self.ctx.call(&req));
        let stag = id(match va {
            None => req(Request::RegMr {
                pd,
                access,
                segment,
                offset,
                len,
            }),
            Some(va) => req(Request::RegMrVa {
                pd,
                access,
                segment,
                offset,
                len,
                va,
            }),
        }?)?;
        Ok(MemoryRegion::from_registration(stag, va.unwrap_or(0), len)
            .with_release(Release::new(self.ctx.link(), Request::DeregMr { stag })))
    }

    /// Reregister Memory Region (Verbs section 7.2.5) with new access rights: the region gets
    /// a new STag (a new key), so peers holding the old one are refused. Refused, with the
    /// region given back, while posted work uses it.
    pub fn rereg_mr(
        &self,
        mut mr: MemoryRegion,
        access: u32,
    ) -> Result<MemoryRegion, (MemoryRegion, Error)> {
        let (stag, len, base_to) = (mr.stag(), mr.len(), mr.base_to());
        let posted = mr.posted();
        if posted > 0 || !mr.disarm() {
            return Err((mr, Error::MrInUse { stag, posted }));
        }
        match self
            .ctx
            .call(&Request::ReregMr { stag, access })
            .and_then(id)
        {
            Ok(new) => Ok(
                MemoryRegion::from_registration(new, base_to, len).with_release(Release::new(
                    self.ctx.link(),
                    Request::DeregMr { stag: new },
                )),
            ),
            Err(e) => {
                // Still registered under the old STag: released under that one.
                let mr = MemoryRegion::from_registration(stag, base_to, len)
                    .with_release(Release::new(self.ctx.link(), Request::DeregMr { stag }));
                Err((mr, e))
            }
        }
    }

    /// Allocate Memory Window (Verbs section 7.2.7): valid once bound with a
    /// [`crate::WrOpcode::BindMw`]; deallocated when dropped.
    pub fn alloc_mw(&self) -> Result<MemoryWindow, Error> {
        let stag = id(self.ctx.call(&Request::AllocMw { pd: self.pd })?)?;
        Ok(MemoryWindow::new(
            stag,
            Release::new(self.ctx.link(), Request::DeallocMw { stag }),
        ))
    }

    /// Allocate Non-Shared Memory Region STag (Verbs section 9.2.6.1) for Fast-Register work
    /// requests in this PD.
    pub fn alloc_fastreg_stag(&self) -> Result<FastRegStag, Error> {
        let stag = id(self.ctx.call(&Request::AllocStag { pd: self.pd })?)?;
        Ok(FastRegStag::new(
            stag,
            Release::new(self.ctx.link(), Request::DeallocStag { stag }),
        ))
    }
}
