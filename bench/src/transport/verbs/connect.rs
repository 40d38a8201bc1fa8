//! The slow path of the verbs transport: a context per daemon worker on each endpoint
//! (iwarp-control's `control.sock`; control places each context on a worker), then per
//! connected pair a PD, CQs, a QP and a registered region on each side (carved from a
//! shared buffer of the context's; the initiator's send CQs are shared, see `completions`),
//! and the connection itself (listen on `b`, connect from `a`, accept), which is all an
//! application does before its first work request. Pairs go round-robin over the contexts,
//! so the connections spread over the workers.
//!
//! This is the one part of the harness that uses iwarp-verbs' context and connection API;
//! everything after it uses only the fast path (post send, post receive, poll CQ).

use super::completions::{CqCarver, SendCompletions, SendCq};
use super::{Mem, Pair, Side};
use crate::daemons::Endpoints;
use crate::error::{BenchError, Result};
use iwarp_verbs::{access, ConnSettings, Context, QpInitAttr, SharedBuffer};
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Pairs set up between two looks at the process's memory mappings (reading them costs a
/// millisecond at tens of thousands).
const MAPPINGS_CHECK_EVERY: usize = 256;

/// The largest shared buffer regions are carved from. A buffer keeps a descriptor open for
/// its life (`SharedBuffer`), so a buffer per QP would stop a run at the process's
/// descriptor limit: 10,000 QPs on each side are 20,000.
const CARVE_MAX: usize = 64 << 20;

/// The shared buffer a context's regions are carved from: slots of `slot_len` octets, the
/// next one free at `next`. Each new buffer holds twice the slots of the last (up to
/// [`CARVE_MAX`]), so a run of one QP allocates one slot and one of thousands a few buffers.
#[derive(Default)]
struct Carver {
    buf: Option<Arc<SharedBuffer>>,
    slot_len: usize,
    slots: usize,
    next: usize,
}

impl Carver {
    /// A slot of `len` octets: its buffer and its offset there.
    fn take(&mut self, ctx: &Context, len: usize) -> Result<(Arc<SharedBuffer>, usize)> {
        let full = self.next == self.slots || self.slot_len != len;
        let buf = match &self.buf {
            Some(buf) if !full => buf.clone(),
            _ => {
                let slots = if self.slot_len == len {
                    2 * self.slots
                } else {
                    1
                };
                let slots = slots.clamp(1, (CARVE_MAX / len).max(1));
                let buf = Arc::new(
                    ctx.alloc_buffer(slots * len)
                        .map_err(|e| err("alloc buffer", e))?,
                );
                *self = Carver {
                    buf: Some(buf.clone()),
                    slot_len: len,
                    slots,
                    next: 0,
                };
                buf
            }
        };
        let offset = self.next * len;
        self.next += 1;
        Ok((buf, offset))
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::transport("verbs", format!("{what}: {e}"))
}

/// Verbs contexts on each endpoint, one per daemon worker.
pub struct Contexts {
    a: Vec<Context>,
    b: Vec<Context>,
    b_ip: std::net::Ipv4Addr,
    /// The port `b`'s first context listens on.
    port: u16,
    /// Whether `b`'s k-th context listens (on `port` + k) yet.
    listening: Vec<AtomicBool>,
    next: AtomicUsize,
    /// Where the regions of `a`'s and `b`'s k-th contexts come from.
    carve_a: Vec<Mutex<Carver>>,
    carve_b: Vec<Mutex<Carver>>,
    /// Where the send CQs of `a`'s k-th context's QPs come from.
    send_cqs_a: Vec<Mutex<CqCarver>>,
}

impl Contexts {
    /// Opens a context on each of the `workers` workers of each endpoint (through its control
    /// socket); `b`'s k-th listens on `port` + k. With `cq_per_qp`, each of `a`'s QPs gets a
    /// send CQ of its own; else the QPs of a context share them.
    pub fn open(
        endpoints: &Endpoints,
        workers: usize,
        port: u16,
        cq_per_qp: bool,
    ) -> Result<Contexts> {
        let a = per_worker(&endpoints.a.runtime_dir, workers, "a")?;
        let b = per_worker(&endpoints.b.runtime_dir, workers, "b")?;
        let send_cqs_a = a
            .iter()
            .map(|c| {
                let max_cqe = c.query_rnic().map_err(|e| err("query RNIC a", e))?.max_cqe;
                Ok(Mutex::new(CqCarver::new(cq_per_qp, max_cqe)))
            })
            .collect::<Result<_>>()?;
        Ok(Contexts {
            send_cqs_a,
            listening: (0..a.len()).map(|_| AtomicBool::new(false)).collect(),
            carve_a: (0..a.len()).map(|_| Mutex::default()).collect(),
            carve_b: (0..b.len()).map(|_| Mutex::default()).collect(),
            a,
            b,
            b_ip: endpoints.b.ip,
            port,
            next: AtomicUsize::new(0),
        })
    }

    /// Creates and connects one pair of QPs with `depth`-deep queues and `buf_len`-octet
    /// registered buffers (local write, remote read / write / atomic access).
    pub fn connect_pair(&self, depth: usize, buf_len: usize) -> Result<Pair> {
        // RDMAP version 2 for Send with Immediate; the largest IRD/ORD for deep Read windows.
        let settings = ConnSettings {
            rdmap_v2: true,
            ..ConnSettings::default()
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        if n % MAPPINGS_CHECK_EVERY == MAPPINGS_CHECK_EVERY - 1 {
            crate::limits::check_mapping_room(n)?;
        }
        let k = n % self.a.len();
        let (ca, cb) = (&self.a[k], &self.b[k]);
        // Listeners belong to one application: each of b's contexts listens on its own port.
        let port = self.port + k as u16;
        if !self.listening[k].swap(true, Ordering::Relaxed) {
            cb.listen(port, &settings)
                .map_err(|e| err("listen on b", e))?;
        }
        let a_cq = self.send_cqs_a[k]
            .lock()
            .map_err(|_| err("send CQ", "a setup thread panicked"))?
            .take(ca, depth as u32)
            .map_err(|e| err("create send CQ", e))?;
        let a = side(ca, depth, buf_len, &self.carve_a[k], a_cq)?;
        let b_cq = SendCq::own(cb, depth as u32).map_err(|e| err("create send CQ", e))?;
        let b = side(cb, depth, buf_len, &self.carve_b[k], b_cq)?;
        let b_addr = SocketAddr::V4(SocketAddrV4::new(self.b_ip, port));
        let conn = ca
            .connect(&a.qp, b_addr, &settings)
            .map_err(|e| err("connect a to b", e))?;
        let req = cb
            .get_request(SETUP_TIMEOUT)
            .map_err(|e| err("connection request at b", e))?;
        cb.accept_blocking(&req, &b.qp, &settings, SETUP_TIMEOUT)
            .map_err(|e| err("accept at b", e))?;
        ca.wait_established(conn, SETUP_TIMEOUT)
            .map_err(|e| err("connection at a", e))?;
        Ok(Pair {
            a,
            b,
            half: buf_len / 2,
        })
    }
}

/// One side: PD, a receive CQ, QP (both queues `depth` deep) completing sends on `send_cq`,
/// a registered region of `buf_len` octets carved by `carver`.
fn side(
    ctx: &Context,
    depth: usize,
    buf_len: usize,
    carver: &Mutex<Carver>,
    send_cq: Arc<SendCq>,
) -> Result<Side> {
    let pd = ctx.alloc_pd().map_err(|e| err("alloc PD", e))?;
    // Separate send and receive CQs: the harness polls each for its own completions.
    let recv_cq = ctx
        .create_cq((depth + 16) as u32)
        .map_err(|e| err("create receive CQ", e))?;
    let mut attr = QpInitAttr::new(send_cq.cq(), depth as u32);
    attr.recv_cq = recv_cq;
    attr.ird = 64;
    attr.ord = 64;
    let qp = pd.create_qp(&attr).map_err(|e| err("create QP", e))?;
    let (buf, offset) = carver
        .lock()
        .map_err(|_| err("region", "a setup thread panicked"))?
        .take(ctx, buf_len)?;
    let rights =
        access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_WRITE | access::REMOTE_ATOMIC;
    let mr = pd
        .reg_mr(&buf, offset as u64, buf_len as u64, rights)
        .map_err(|e| err("register memory", e))?;
    // SAFETY: the slot is `buf_len` octets at `offset` of the buffer's mapping (the carver
    // cut it there), and the buffer lives in `keep` below, dropped after the QP and the
    // region (Side's field order).
    let mem = unsafe { Mem::new(buf.as_ptr().add(offset), buf_len) };
    Ok(Side {
        send: SendCompletions::new(send_cq, qp.qp_num().0),
        qp,
        mr,
        mem,
        recvs: 0,
        rq_depth: depth,
        ctx: ctx.clone(),
        keep: Box::new((pd, buf, ctx.clone())),
    })
}

/// One context on each of `workers` workers of the endpoint in `dir` (for one, the first
/// context, wherever control placed it). Control places a new context on the worker serving
/// the fewest applications, so on a daemon other applications already use, a few more may be
/// needed to reach every worker; those extra ones are closed.
fn per_worker(dir: &std::path::Path, workers: usize, name: &str) -> Result<Vec<Context>> {
    let workers = workers.max(1);
    let mut mine: Vec<Option<Context>> = (0..workers).map(|_| None).collect();
    let mut extra = Vec::new();
    for _ in 0..workers * 4 {
        if mine.iter().all(Option::is_some) {
            break;
        }
        let c = Context::open(dir).map_err(|e| err(&format!("open endpoint {name}"), e))?;
        match c.worker() {
            // One context asked for: any worker serves it (an `--apps` child on a daemon of
            // several workers lands where control places it).
            _ if workers == 1 => mine[0] = Some(c),
            Some(w) if w < workers && mine[w].is_none() => mine[w] = Some(c),
            _ => extra.push(c),
        }
    }
    drop(extra);
    mine.into_iter()
        .enumerate()
        .map(|(w, c)| {
            c.ok_or_else(|| {
                err(
                    &format!("endpoint {name}"),
                    format!(
                        "no context landed on worker {w} (does its daemon run {workers} workers? \
                         --daemon-workers says so)"
                    ),
                )
            })
        })
        .collect()
}
