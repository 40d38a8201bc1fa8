//! iWARP through the verbs library (iwarp-verbs), as an application uses it: two endpoints
//! (each an iwarpd + iwarp-control, see [`crate::daemons`]), and in this process one QP
//! connected from endpoint `a` (the initiator) to one on endpoint `b` (the responder), each
//! with a registered buffer:
//!
//! ```text
//! 0      SRC: what this side sends / writes / is read from
//! HALF   DST: where the peer's Sends land, where Writes and Read Responses are placed, the
//!        8-octet atomic target (HALF is a multiple of 4096, so it is 8-aligned)
//! ```
//!
//! Round trips (one in flight), as perftest's `ib_*_lat` measure them:
//! - send, send-imm: `a` posts a receive for the answer, then the Send; `b` (a thread) takes
//!   the receive completion, re-posts a receive, sends the same size back; the round trip ends
//!   with `a`'s receive completion.
//! - write: `a` writes SRC into `b`'s DST with a tag in the last octet; `b` polls that octet in
//!   its memory (no completion on the target: RFC 5040 section 5.1) and writes back the same
//!   way; `a` polls its own DST. Placement is in order on one TCP stream, so the last octet
//!   arriving means all arrived.
//! - write-imm: like send, with RDMA Write with Immediate (RFC 7306 section 6) both ways.
//! - read, fetch-add, cmp-swap: one-sided; the round trip ends with `a`'s completion (the
//!   Read Response or Atomic Response placed in `a`'s DST).
//!
//! Streams (a window in flight): "delivered" is `b`'s receive completion for send, send-imm
//! and write-imm (a receiver thread re-posts receives before counting, so the initiator's
//! window never outruns the posted receives), and `a`'s completion for write, read and the
//! atomics. Every work request is signaled.
//!
//! Connected pairs are kept in a pool between measurements (a connection per QP of the run),
//! each sized for the largest message of the run. What the slow path must provide (contexts,
//! PDs, CQs, QPs, registered shared buffers, connection management) is confined to
//! [`connect`].

mod completions;
pub mod connect;

use super::{Backoff, PingPong, Setup, Stream, Transport};
use crate::cli::EndpointPlan;
use crate::daemons::Endpoints;
use crate::error::{BenchError, Result};
use crate::stages::{DaemonMemory, DaemonStages, StageTimes};
use crate::workload::{Exchange, Op, TransportKind};
use iwarp_verbs::Stag;
use iwarp_verbs::{
    Error as VerbsError, MemoryRegion, QueuePair, RecvWr, SendWr, Sg, WcStatus, WorkCompletion,
    WrOpcode,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A wait longer than this for a completion or an answer is an error (the QP is likely in
/// Error, or a daemon is gone).
const PATIENCE: Duration = Duration::from_secs(10);

fn err(m: impl std::fmt::Display) -> BenchError {
    BenchError::transport("verbs", m)
}

fn verr(what: &str, e: VerbsError) -> BenchError {
    err(format!("{what}: {e}"))
}

/// A registered buffer as this process maps it.
#[derive(Debug, Clone, Copy)]
pub struct Mem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `Mem` is an address range of a shared mapping owned by its `Side` (kept alive by
// `Side::keep`); the harness reads and writes it only with volatile single-octet accesses or
// when no operation targets it, and moves it between threads together with its `Side`.
unsafe impl Send for Mem {}

impl Mem {
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` octets for as long as the `Side` that
    /// holds this `Mem` lives.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Mem {
        Mem { ptr, len }
    }

    fn load(&self, off: usize) -> u8 {
        assert!(off < self.len, "offset {off} past the buffer");
        // SAFETY: in bounds (checked); volatile because the daemon writes this memory.
        let v = unsafe { std::ptr::read_volatile(self.ptr.add(off)) };
        // Orders what this side reads next after the octet that announced it.
        std::sync::atomic::fence(Ordering::Acquire);
        v
    }

    fn store(&self, off: usize, v: u8) {
        assert!(off < self.len, "offset {off} past the buffer");
        // SAFETY: in bounds (checked); no operation is reading this octet now (the previous
        // one that did has completed).
        unsafe { std::ptr::write_volatile(self.ptr.add(off), v) };
        std::sync::atomic::fence(Ordering::Release);
    }

    fn load_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        for (i, x) in b.iter_mut().enumerate() {
            *x = self.load(off + i);
        }
        // RFC 7306 section 5: atomics operate on 64-bit values in the host's order (the
        // responder's memory); both ends are this machine.
        u64::from_ne_bytes(b)
    }
}

/// One end of a connected pair.
pub struct Side {
    pub qp: QueuePair,
    /// The QP's completions from its send CQ, which other QPs may share.
    pub send: completions::SendCompletions,
    pub mr: MemoryRegion,
    pub mem: Mem,
    /// Receives posted and not yet consumed.
    pub recvs: usize,
    /// The receive queue depth.
    pub rq_depth: usize,
    /// The context the QP lives in, to tell a daemon that is gone from a slow one.
    pub ctx: iwarp_verbs::Context,
    /// Whatever keeps the QP, the region and the mapping valid (context, PD, buffer);
    /// declared last so it is dropped last.
    pub keep: Box<dyn std::any::Any + Send>,
}

/// A connected pair: `a` initiates, `b` responds.
pub struct Pair {
    pub a: Side,
    pub b: Side,
    /// Offset of DST in both buffers; also the largest message.
    pub half: usize,
}

/// The layout for messages of at most `max_size` octets: (half, buffer length).
pub fn layout(max_size: usize) -> (usize, usize) {
    let half = max_size.max(64).div_ceil(4096) * 4096;
    (half, 2 * half)
}

fn sg(mr: &MemoryRegion, offset: usize, len: usize) -> [Sg<'_>; 1] {
    [Sg {
        mr,
        offset: offset as u64,
        len: len as u32,
    }]
}

/// The tagged offset of `off` in `side`'s region, as the peer names it.
fn remote_to(side: &Side, off: usize) -> Result<u64> {
    side.mr
        .sge(off as u64, 0)
        .map(|s| s.to)
        .map_err(|e| verr("region offset", e))
}

fn check(wc: &WorkCompletion, what: &str) -> Result<()> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(err(format!(
            "{what}: completion {:?} of wr_id {} ({:?})",
            wc.status, wc.wr_id, wc.opcode
        )))
    }
}

impl Side {
    /// Posts receives into DST (`len` octets each) until `target` are posted.
    fn fill_recvs(&mut self, target: usize, half: usize) -> Result<()> {
        let target = target.min(self.rq_depth);
        while self.recvs < target {
            let sgl = sg(&self.mr, half, half);
            self.qp
                .post_recv(&RecvWr {
                    wr_id: 0,
                    sg_list: &sgl,
                })
                .map_err(|e| verr("post receive", e))?;
            self.recvs += 1;
        }
        Ok(())
    }

    /// Polls the send CQ once; calls `f` for each completion (all must succeed, and all
    /// must be this QP's).
    fn poll_send(
        &self,
        wcs: &mut [WorkCompletion],
        mut f: impl FnMut(&WorkCompletion),
    ) -> Result<usize> {
        let n = self.send.poll(wcs).map_err(|e| verr("poll send CQ", e))?;
        let qp = self.qp.qp_num().0;
        for wc in &wcs[..n] {
            check(wc, "send queue")?;
            if wc.qp_num != qp {
                return Err(err(format!(
                    "QP {qp} was handed a completion of QP {} (wr_id {})",
                    wc.qp_num, wc.wr_id
                )));
            }
            f(wc);
        }
        Ok(n)
    }

    /// Polls the receive CQ once; returns the receive completions (all must succeed).
    fn poll_recv(&mut self, wcs: &mut [WorkCompletion]) -> Result<usize> {
        let n = self
            .qp
            .recv_cq()
            .poll_cq(wcs)
            .map_err(|e| verr("poll receive CQ", e))?;
        for wc in &wcs[..n] {
            check(wc, "receive queue")?;
        }
        self.recvs = self.recvs.saturating_sub(n);
        Ok(n)
    }

    /// Posts `wr`, reaping send completions while the SQ is full (up to [`PATIENCE`]).
    fn post(&self, wr: &SendWr<'_>, wcs: &mut [WorkCompletion], sent: &mut u64) -> Result<()> {
        let start = Instant::now();
        let mut b = Backoff::new();
        loop {
            match self.qp.post_send(wr) {
                Ok(()) => return Ok(()),
                Err(VerbsError::QueueFull) => {
                    *sent += self.poll_send(wcs, |_| {})? as u64;
                    if start.elapsed() > PATIENCE {
                        return Err(err("the send queue stayed full"));
                    }
                    b.snooze();
                }
                Err(e) => return Err(verr("post send", e)),
            }
        }
    }
}

/// The work request of `op` from `from` (SRC, or DST for a Read / atomic sink) towards `to`.
struct OpWr {
    op: Op,
    size: usize,
    half: usize,
    rkey: Stag,
    /// The peer's SRC (Read source) and DST (Write target, atomic target).
    peer_src: u64,
    peer_dst: u64,
}

impl OpWr {
    fn new(op: Op, size: usize, half: usize, peer: &Side) -> Result<OpWr> {
        Ok(OpWr {
            op,
            size,
            half,
            rkey: peer.mr.stag(),
            peer_src: remote_to(peer, 0)?,
            peer_dst: remote_to(peer, half)?,
        })
    }

    fn opcode(&self, seq: u64, compare: u64) -> WrOpcode {
        match self.op {
            Op::Send => WrOpcode::Send,
            Op::SendImm => WrOpcode::SendWithImm { imm: seq as u32 },
            Op::Write => WrOpcode::RdmaWrite {
                rkey: self.rkey,
                remote_addr: self.peer_dst,
            },
            Op::WriteImm => WrOpcode::RdmaWriteWithImm {
                rkey: self.rkey,
                remote_addr: self.peer_dst,
                imm: seq,
            },
            Op::Read => WrOpcode::RdmaRead {
                rkey: self.rkey,
                remote_addr: self.peer_src,
            },
            Op::FetchAdd => WrOpcode::FetchAdd {
                rkey: self.rkey,
                remote_addr: self.peer_dst,
                add: 1,
            },
            Op::CmpSwap => WrOpcode::CmpSwap {
                rkey: self.rkey,
                remote_addr: self.peer_dst,
                compare,
                swap: compare.wrapping_add(1),
            },
        }
    }

    /// The local buffer range of the work request: SRC for what goes out, DST for what
    /// comes back (Read Response, atomic original value).
    fn local(&self) -> (usize, usize) {
        match self.op {
            Op::Read => (self.half, self.size),
            Op::FetchAdd | Op::CmpSwap => (self.half, 8),
            _ => (0, self.size),
        }
    }

    /// Posts it on `side`.
    fn post(
        &self,
        side: &Side,
        seq: u64,
        compare: u64,
        wcs: &mut [WorkCompletion],
        sent: &mut u64,
    ) -> Result<()> {
        let (off, len) = self.local();
        let sgl = sg(&side.mr, off, len);
        let list: &[Sg<'_>] = if len == 0 { &[] } else { &sgl };
        let wr = SendWr::new(seq, self.opcode(seq, compare), list);
        side.post(&wr, wcs, sent)
    }
}

/// The write ping-pong tag for round trip `k`: never 0, and never the previous one.
fn tag(k: u64) -> u8 {
    (k % 255) as u8 + 1
}

/// Waits until `cond` holds, polling `side`'s send CQ meanwhile; errors after [`PATIENCE`] or
/// when `stop` is set (then `Ok(false)`).
fn spin_until(
    side: &Side,
    wcs: &mut [WorkCompletion],
    sent: &mut u64,
    stop: Option<&AtomicBool>,
    mut cond: impl FnMut(&Side) -> bool,
) -> Result<bool> {
    let mut b = Backoff::new();
    let mut n: u32 = 0;
    let mut start: Option<Instant> = None;
    while !cond(side) {
        n = n.wrapping_add(1);
        if n.is_multiple_of(256) {
            *sent += side.poll_send(wcs, |_| {})? as u64;
            if stop.is_some_and(|s| s.load(Ordering::Acquire)) {
                return Ok(false);
            }
            let t0 = *start.get_or_insert_with(Instant::now);
            if stop.is_none() && t0.elapsed() > PATIENCE {
                return Err(err("no answer within 10 s"));
            }
        }
        b.snooze();
    }
    Ok(true)
}

/// The responder of a two-sided ping-pong (send, send-imm, write-imm) or of the write
/// ping-pong, run on its own thread until `stop`; gives its side back.
fn respond(mut b: Side, w: OpWr, stop: Arc<AtomicBool>, core: Option<usize>) -> (Side, Result<()>) {
    super::pin(core);
    let mut wcs = vec![WorkCompletion::BLANK; 32];
    let mut sent = 0u64;
    let r = (|| -> Result<()> {
        let mut k: u64 = 0;
        loop {
            if w.op == Op::Write {
                let last = w.half + w.size - 1;
                let t = tag(k);
                if !spin_until(&b, &mut wcs, &mut sent, Some(&stop), |s| {
                    s.mem.load(last) == t
                })? {
                    return Ok(());
                }
                b.mem.store(w.size - 1, t);
            } else {
                let mut got = 0;
                let mut bo = Backoff::new();
                while got == 0 {
                    got = b.poll_recv(&mut wcs)?;
                    if got == 0 {
                        if stop.load(Ordering::Acquire) {
                            return Ok(());
                        }
                        bo.snooze();
                    }
                }
                // Re-post before answering so the initiator never finds none posted.
                b.fill_recvs(b.rq_depth / 2, w.half)?;
            }
            w.post(&b, k, 0, &mut wcs, &mut sent)?;
            sent += b.poll_send(&mut wcs, |_| {})? as u64;
            k += 1;
        }
    })();
    (b, r)
}

type Responder = JoinHandle<(Side, Result<()>)>;

/// The shared pool of connected pairs and what returns them.
#[derive(Clone)]
struct Pool(Arc<Mutex<Vec<Pair>>>);

impl Pool {
    fn take(&self) -> Option<Pair> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn give(&self, p: Pair) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(p);
    }
}

/// How often a wait for completions asks whether the endpoint still serves the context.
const LOOK: Duration = Duration::from_millis(50);

/// The error of a wait whose endpoint no longer serves the context: `what` will not happen.
fn endpoint_gone(what: String) -> BenchError {
    err(format!(
        "{what}: iwarp-control closed the context (it exited, or found iwarpd gone)"
    ))
}

/// Waits until every send posted on `a` has completed (so the pair can be reused). A
/// teardown waits here once per connection: where the endpoint is gone nothing completes,
/// and it says so at once rather than after [`PATIENCE`] on each of a thousand QPs.
fn quiesce(a: &Side, posted: u64, mut done: u64, wcs: &mut [WorkCompletion]) -> Result<()> {
    let start = Instant::now();
    let mut look = start;
    let mut b = Backoff::new();
    while done < posted {
        done += a.poll_send(wcs, |_| {})? as u64;
        if done >= posted {
            break;
        }
        if start.elapsed() > PATIENCE {
            return Err(err(format!(
                "{} send(s) never completed",
                posted.saturating_sub(done)
            )));
        }
        if look.elapsed() >= LOOK {
            look = Instant::now();
            if !a.ctx.is_served() {
                return Err(endpoint_gone(format!(
                    "{} send(s) will never complete",
                    posted - done
                )));
            }
        }
        b.snooze();
    }
    Ok(())
}

struct VerbsPingPong {
    pool: Pool,
    a: Option<Side>,
    /// One-sided operations: `b` stays here, idle.
    b: Option<Side>,
    responder: Option<Responder>,
    stop: Arc<AtomicBool>,
    w: OpWr,
    k: u64,
    posted: u64,
    completed: u64,
    compare: u64,
    wcs: Vec<WorkCompletion>,
    stages: bool,
    times: StageTimes,
}

impl VerbsPingPong {
    fn side(&self) -> Result<&Side> {
        self.a.as_ref().ok_or_else(|| err("the pair was lost"))
    }

    /// Waits for the completion of `wr_id` on `a`'s send queue.
    fn wait_send(&mut self, wr_id: u64) -> Result<()> {
        let a = self.a.as_ref().ok_or_else(|| err("the pair was lost"))?;
        let start = Instant::now();
        let mut b = Backoff::new();
        let mut found = false;
        let mut n: u32 = 0;
        while !found {
            self.completed += a.poll_send(&mut self.wcs, |wc| found |= wc.wr_id == wr_id)? as u64;
            n = n.wrapping_add(1);
            if !found && n.is_multiple_of(1024) && start.elapsed() > PATIENCE {
                return Err(err(format!("no completion for wr_id {wr_id} within 10 s")));
            }
            if !found {
                b.snooze();
            }
        }
        Ok(())
    }
}

impl PingPong for VerbsPingPong {
    fn round_trip(&mut self) -> Result<()> {
        let k = self.k;
        self.k += 1;
        let t0 = self.stages.then(Instant::now);
        let op = self.w.op;
        {
            let a = self.a.as_mut().ok_or_else(|| err("the pair was lost"))?;
            match op {
                Op::Send | Op::SendImm | Op::WriteImm => a.fill_recvs(a.recvs + 1, self.w.half)?,
                Op::Write => a.mem.store(self.w.size - 1, tag(k)),
                _ => {}
            }
        }
        let a = self.a.as_ref().ok_or_else(|| err("the pair was lost"))?;
        let mut completed = self.completed;
        self.w
            .post(a, k, self.compare, &mut self.wcs, &mut completed)?;
        self.completed = completed;
        self.posted += 1;
        let t1 = self.stages.then(Instant::now);
        match op {
            Op::Read | Op::FetchAdd | Op::CmpSwap => {
                self.wait_send(k)?;
                if op == Op::CmpSwap {
                    // The original value came back: the next compare is against what is there now.
                    let orig = self.side()?.mem.load_u64(self.w.half);
                    self.compare = if orig == self.compare {
                        orig.wrapping_add(1)
                    } else {
                        orig
                    };
                }
            }
            Op::Write => {
                let last = self.w.half + self.w.size - 1;
                let t = tag(k);
                let a = self.a.as_ref().ok_or_else(|| err("the pair was lost"))?;
                let mut completed = self.completed;
                spin_until(a, &mut self.wcs, &mut completed, None, |s| {
                    s.mem.load(last) == t
                })?;
                // The answer can come before the wait polled the send CQ at all: reap the
                // Write's completion now, or completions pile up past the CQ's depth (the
                // daemon frees SQ slots as it takes the WQEs, so a full SQ never forces a poll)
                // and the CQ overflows.
                completed += a.poll_send(&mut self.wcs, |_| {})? as u64;
                self.completed = completed;
            }
            Op::Send | Op::SendImm | Op::WriteImm => {
                let a = self.a.as_mut().ok_or_else(|| err("the pair was lost"))?;
                let start = Instant::now();
                let mut b = Backoff::new();
                let mut n: u32 = 0;
                loop {
                    if a.poll_recv(&mut self.wcs)? > 0 {
                        break;
                    }
                    self.completed += a.poll_send(&mut self.wcs, |_| {})? as u64;
                    n = n.wrapping_add(1);
                    if n.is_multiple_of(1024) {
                        if start.elapsed() > PATIENCE {
                            return Err(err("no answer within 10 s"));
                        }
                        if self.responder.as_ref().is_some_and(|h| h.is_finished()) {
                            return Err(err("the responder stopped"));
                        }
                    }
                    b.snooze();
                }
            }
        }
        if let (Some(t0), Some(t1)) = (t0, t1) {
            self.times
                .add((t1 - t0).as_nanos() as u64, t1.elapsed().as_nanos() as u64);
        }
        Ok(())
    }

    fn stages(&self) -> StageTimes {
        self.times
    }

    fn reset_stages(&mut self) {
        self.times = StageTimes::default();
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        let mut result = Ok(());
        let b = match self.responder.take() {
            Some(h) => match h.join() {
                Ok((b, r)) => {
                    result = r;
                    Some(b)
                }
                Err(_) => {
                    result = Err(err("the responder thread panicked"));
                    None
                }
            },
            None => self.b.take(),
        };
        let a = self.a.take();
        if let (Some(a), Some(b), Ok(())) = (a, b, &result) {
            let half = self.w.half;
            quiesce(&a, self.posted, self.completed, &mut self.wcs)?;
            self.pool.give(Pair { a, b, half });
        }
        result
    }
}

struct VerbsStream {
    pool: Pool,
    a: Option<Side>,
    b: Option<Side>,
    receiver: Option<Responder>,
    stop: Arc<AtomicBool>,
    delivered: Arc<AtomicU64>,
    reported: u64,
    w: OpWr,
    posted: u64,
    completed: u64,
    wcs: Vec<WorkCompletion>,
    quiet: Quiet,
}

/// Polls of a stream that delivered nothing, and since when: a stream quiet for a second
/// asks (at most every [`LOOK`]) whether the endpoint still serves its context, so that a
/// run whose endpoint died fails at once, naming the cause, instead of after the runner's
/// stall timeout. Polls are counted, not timed, so a busy stream reads no clock for this.
#[derive(Default)]
struct Quiet {
    polls: u32,
    since: Option<Instant>,
    looked: Option<Instant>,
}

/// How long a stream may deliver nothing before it asks whether its endpoint is gone.
const QUIET: Duration = Duration::from_secs(1);

impl Quiet {
    /// Notes a poll that delivered something or had nothing in flight to wait for (a run at
    /// a low rate); returns whether the endpoint should be asked now.
    fn due(&mut self, delivered_or_idle: bool) -> bool {
        if delivered_or_idle {
            *self = Quiet::default();
            return false;
        }
        self.polls = self.polls.wrapping_add(1);
        if self.polls & 1023 != 0 {
            return false;
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if now - since < QUIET || self.looked.is_some_and(|t| now - t < LOOK) {
            return false;
        }
        self.looked = Some(now);
        true
    }
}

/// The receiver of a two-sided stream: counts receive completions, re-posting before counting.
fn receive(
    mut b: Side,
    half: usize,
    target: usize,
    delivered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    core: Option<usize>,
) -> (Side, Result<()>) {
    super::pin(core);
    let mut wcs = vec![WorkCompletion::BLANK; 64];
    let r = (|| -> Result<()> {
        let mut n: u64 = 0;
        let mut bo = Backoff::new();
        loop {
            let got = b.poll_recv(&mut wcs)?;
            if got > 0 {
                b.fill_recvs(target, half)?;
                n += got as u64;
                // SYNC POINT: Release pairs with the initiator's Acquire in poll_delivered.
                delivered.store(n, Ordering::Release);
                bo.reset();
            } else if stop.load(Ordering::Acquire) {
                return Ok(());
            } else {
                bo.snooze();
            }
        }
    })();
    (b, r)
}

impl Stream for VerbsStream {
    fn post(&mut self, seq: u64) -> Result<bool> {
        let a = self.a.as_ref().ok_or_else(|| err("the pair was lost"))?;
        let (off, len) = self.w.local();
        let sgl = sg(&a.mr, off, len);
        let list: &[Sg<'_>] = if len == 0 { &[] } else { &sgl };
        let wr = SendWr::new(seq, self.w.opcode(seq, seq), list);
        match a.qp.post_send(&wr) {
            Ok(()) => {
                self.posted += 1;
                Ok(true)
            }
            Err(VerbsError::QueueFull) => Ok(false),
            Err(e) => Err(verr("post send", e)),
        }
    }

    fn poll_delivered(&mut self, delivered: &mut dyn FnMut(u64)) -> Result<usize> {
        let a = self.a.as_ref().ok_or_else(|| err("the pair was lost"))?;
        let one_sided = self.receiver.is_none();
        let mut n = 0usize;
        // Message k is posted with wr_id k, and a send queue completes in order (Verbs
        // section 8.2.2, rule 2), so the next completion must be the next message's.
        let mut next = self.completed;
        let mut order = Ok(());
        self.completed += a.poll_send(&mut self.wcs, |wc| {
            if wc.wr_id != next && order.is_ok() {
                order = Err(err(format!(
                    "send completion of wr_id {} where {next} was next",
                    wc.wr_id
                )));
            }
            next += 1;
            if one_sided {
                delivered(wc.wr_id);
                n += 1;
            }
        })? as u64;
        order?;
        if !one_sided {
            // SYNC POINT: Acquire pairs with the receiver's Release store.
            let now = self.delivered.load(Ordering::Acquire);
            for seq in self.reported..now {
                delivered(seq);
            }
            n = now.saturating_sub(self.reported) as usize;
            self.reported = now;
            if n == 0 && self.receiver.as_ref().is_some_and(|h| h.is_finished()) {
                // Say why: the receiver's own error, not only that it ended.
                let why = match self.receiver.take().map(|h| h.join()) {
                    Some(Ok((b, r))) => {
                        self.b = Some(b);
                        r.err()
                            .map_or_else(|| "no error".to_string(), |e| e.to_string())
                    }
                    _ => "it panicked".to_string(),
                };
                return Err(err(format!("the receiver stopped: {why}")));
            }
        }
        let idle = self.posted == self.completed;
        if self.quiet.due(n > 0 || idle) && !a.ctx.is_served() {
            return Err(endpoint_gone(format!(
                "{} message(s) in flight will never be delivered",
                self.posted - self.completed
            )));
        }
        Ok(n)
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        let a = self.a.take();
        let mut result = match &a {
            Some(a) => quiesce(a, self.posted, self.completed, &mut self.wcs),
            None => Err(err("the pair was lost")),
        };
        self.stop.store(true, Ordering::Release);
        let b = match self.receiver.take() {
            Some(h) => match h.join() {
                Ok((b, r)) => {
                    if result.is_ok() {
                        result = r;
                    }
                    Some(b)
                }
                Err(_) => {
                    result = Err(err("the receiver thread panicked"));
                    None
                }
            },
            None => self.b.take(),
        };
        if let (Some(a), Some(b), Ok(())) = (a, b, &result) {
            self.pool.give(Pair {
                a,
                b,
                half: self.w.half,
            });
        }
        result
    }
}

/// The verbs transport: the endpoints, the contexts on them, and a pool of connected pairs.
pub struct VerbsTransport {
    pool: Pool,
    contexts: connect::Contexts,
    endpoints: Mutex<Option<Endpoints>>,
    max_size: usize,
    depth: usize,
    /// Each daemon's memory before any application used it.
    idle_memory: Vec<DaemonMemory>,
}

impl VerbsTransport {
    fn pair(&self) -> Result<Pair> {
        match self.pool.take() {
            Some(p) => Ok(p),
            None => {
                let (half, len) = layout(self.max_size);
                let p = self.contexts.connect_pair(self.depth, len)?;
                debug_assert_eq!(half, p.half);
                Ok(p)
            }
        }
    }
}

fn op_of(e: Exchange) -> Result<Op> {
    match e {
        Exchange::Verb(op) => Ok(op),
        Exchange::Message => Err(err("verbs measures verbs operations, not plain messages")),
    }
}

impl Transport for VerbsTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Verbs
    }

    fn supports(&self, exchange: Exchange) -> bool {
        matches!(exchange, Exchange::Verb(_))
    }

    fn ping_pong(&self, setup: &Setup) -> Result<Box<dyn PingPong>> {
        let op = op_of(setup.exchange)?;
        if setup.size > self.max_size {
            return Err(err(format!("size {} past the run's largest", setup.size)));
        }
        let Pair { a, mut b, half } = self.pair()?;
        let w = OpWr::new(op, setup.size, half, &b)?;
        let back = OpWr::new(op, setup.size, half, &a)?;
        if op == Op::Write {
            // A tag left by an earlier measurement must not read as this one's.
            a.mem.store(half + setup.size - 1, 0);
            b.mem.store(half + setup.size - 1, 0);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let two_sided = matches!(op, Op::Send | Op::SendImm | Op::WriteImm | Op::Write);
        let (responder, b) = if two_sided {
            if op != Op::Write {
                b.fill_recvs(b.rq_depth / 2, half)?;
            }
            let (s, core) = (stop.clone(), setup.responder_core);
            let h = std::thread::Builder::new()
                .name("verbs-responder".into())
                .spawn(move || respond(b, back, s, core))
                .map_err(|e| BenchError::io("spawning the verbs responder", e))?;
            (Some(h), None)
        } else {
            (None, Some(b))
        };
        Ok(Box::new(VerbsPingPong {
            pool: self.pool.clone(),
            a: Some(a),
            b,
            responder,
            stop,
            w,
            k: 0,
            posted: 0,
            completed: 0,
            compare: 0,
            wcs: vec![WorkCompletion::BLANK; 32],
            stages: setup.stages,
            times: StageTimes::default(),
        }))
    }

    fn stream(&self, setup: &Setup) -> Result<Box<dyn Stream>> {
        let op = op_of(setup.exchange)?;
        if setup.window > self.depth {
            return Err(err(format!(
                "window {} is deeper than the QPs ({})",
                setup.window, self.depth
            )));
        }
        let Pair { a, mut b, half } = self.pair()?;
        let w = OpWr::new(op, setup.size, half, &b)?;
        let stop = Arc::new(AtomicBool::new(false));
        let delivered = Arc::new(AtomicU64::new(0));
        let (receiver, b) = if matches!(op, Op::Send | Op::SendImm | Op::WriteImm) {
            let target = (setup.window + 8).min(b.rq_depth);
            b.fill_recvs(target, half)?;
            let (s, d, core) = (stop.clone(), delivered.clone(), setup.responder_core);
            let h = std::thread::Builder::new()
                .name("verbs-receiver".into())
                .spawn(move || receive(b, half, target, d, s, core))
                .map_err(|e| BenchError::io("spawning the verbs receiver", e))?;
            (Some(h), None)
        } else {
            (None, Some(b))
        };
        Ok(Box::new(VerbsStream {
            pool: self.pool.clone(),
            a: Some(a),
            b,
            receiver,
            stop,
            delivered,
            reported: 0,
            w,
            posted: 0,
            completed: 0,
            wcs: vec![WorkCompletion::BLANK; 64],
            quiet: Quiet::default(),
        }))
    }

    fn daemon_stages(&self) -> Option<DaemonStages> {
        let eps = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let eps = eps.as_ref()?;
        let [a, b] = eps.runtime_dirs();
        // Counters as they are now, not up to a second ago; the two waits overlap.
        let asked = std::time::SystemTime::now();
        Some(DaemonStages::read(a, asked).plus(&DaemonStages::read(b, asked)))
    }

    fn daemon_memory(&self) -> Vec<DaemonMemory> {
        let eps = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let Some(eps) = eps.as_ref() else {
            return Vec::new();
        };
        let [a, b] = eps.runtime_dirs();
        // One instant for both: the two waits for a rewrite overlap.
        let asked = std::time::SystemTime::now();
        let now = [("a", a), ("b", b)]
            .into_iter()
            .filter_map(|(n, d)| DaemonMemory::read(d, n, "end", Some(asked)));
        self.idle_memory.iter().cloned().chain(now).collect()
    }

    fn shutdown(self: Box<Self>) -> Result<()> {
        // Connections and contexts first (the daemons tear down what they served), then the
        // daemons.
        let VerbsTransport {
            pool,
            contexts,
            endpoints,
            ..
        } = *self;
        drop(pool);
        drop(contexts);
        match endpoints.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => e.stop(),
            None => Ok(()),
        }
    }
}

/// Opens the verbs transport for a run whose largest message is `max_size`, with `window`
/// messages in flight at most: starts (or finds) the endpoints and opens a context on each.
/// With `cq_per_qp`, each initiating QP has a send CQ of its own (see `completions`).
pub fn open(
    endpoint: &EndpointPlan,
    window: usize,
    max_size: usize,
    cq_per_qp: bool,
) -> Result<Box<dyn Transport>> {
    let endpoints = Endpoints::start(endpoint)?;
    let [a, b] = endpoints.runtime_dirs();
    let idle_memory = [("a", a), ("b", b)]
        .into_iter()
        // Any reading before the first application is an idle one: no wait for a rewrite.
        .filter_map(|(n, d)| DaemonMemory::read(d, n, "idle", None))
        .collect();
    let contexts = connect::Contexts::open(
        &endpoints,
        endpoint.daemon_workers,
        endpoint.cm_port,
        cq_per_qp,
    )?;
    // Room for the window plus the ping-pong's re-posted receives.
    let depth = (window + 16).next_power_of_two().max(64);
    Ok(Box::new(VerbsTransport {
        pool: Pool(Arc::new(Mutex::new(Vec::new()))),
        contexts,
        endpoints: Mutex::new(Some(endpoints)),
        max_size,
        depth,
        idle_memory,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_halves_are_page_multiples_and_hold_the_largest_message() {
        assert_eq!(layout(8), (4096, 8192));
        assert_eq!(layout(4096), (4096, 8192));
        assert_eq!(layout(4097), (8192, 16384));
        assert_eq!(layout(1 << 20), (1 << 20, 2 << 20));
    }

    #[test]
    fn write_tags_never_repeat_back_to_back_and_are_never_zero() {
        for k in 0..1000u64 {
            assert_ne!(tag(k), 0);
            assert_ne!(tag(k), tag(k + 1));
        }
    }

    #[test]
    fn mem_reads_what_was_written() {
        let mut v = vec![0u8; 16];
        // SAFETY: `v` outlives `m` in this test.
        let m = unsafe { Mem::new(v.as_mut_ptr(), v.len()) };
        m.store(3, 7);
        assert_eq!(m.load(3), 7);
        for i in 8..16 {
            m.store(i, (i - 7) as u8);
        }
        assert_eq!(m.load_u64(8), u64::from_ne_bytes([1, 2, 3, 4, 5, 6, 7, 8]));
    }
}
