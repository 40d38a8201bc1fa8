//! The slow path of the verbs transport: a context per daemon worker on each endpoint
//! (iwarp-control's `control.sock`; control places each context on a worker), then per
//! connected pair a PD, a CQ, a QP and a registered shared buffer on each side, and the
//! connection itself (listen on `b`, connect from `a`, accept), which is all an application
//! does before its first work request. Pairs go round-robin over the contexts, so the
//! connections spread over the workers.
//!
//! This is the one part of the harness that uses iwarp-verbs' context and connection API;
//! everything after it uses only the fast path (post send, post receive, poll CQ).

use super::{Mem, Pair, Side};
use crate::daemons::Endpoints;
use crate::error::{BenchError, Result};
use iwarp_verbs::{access, ConnSettings, Context, QpInitAttr};
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The TCP port `b` listens on (perftest's default).
const PORT: u16 = 18515;
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::transport("verbs", format!("{what}: {e}"))
}

/// Verbs contexts on each endpoint, one per daemon worker.
pub struct Contexts {
    a: Vec<Context>,
    b: Vec<Context>,
    b_ip: std::net::Ipv4Addr,
    /// Whether `b`'s k-th context listens (on PORT + k) yet.
    listening: Vec<AtomicBool>,
    next: AtomicUsize,
    /// The port b's first context listens on.
    port: u16,
}

impl Contexts {
    /// Opens a context on each of the `workers` workers of each endpoint (through its control
    /// socket).
    pub fn open(endpoints: &Endpoints, workers: usize) -> Result<Contexts> {
        let a = per_worker(&endpoints.a.runtime_dir, workers, "a")?;
        let b = per_worker(&endpoints.b.runtime_dir, workers, "b")?;
        Ok(Contexts {
            listening: (0..a.len()).map(|_| AtomicBool::new(false)).collect(),
            a,
            b,
            b_ip: endpoints.b.ip,
            next: AtomicUsize::new(0),
            port: PORT,
        })
    }

    /// b's contexts listen from `port` on (default 18515): applications sharing the
    /// endpoints each listen on their own.
    pub fn listening_from(mut self, port: Option<u16>) -> Contexts {
        self.port = port.unwrap_or(PORT);
        self
    }

    /// Creates and connects one pair of QPs with `depth`-deep queues and `buf_len`-octet
    /// registered buffers (local write, remote read / write / atomic access).
    pub fn connect_pair(&self, depth: usize, buf_len: usize) -> Result<Pair> {
        // RDMAP version 2 for Send with Immediate; the largest IRD/ORD for deep Read windows.
        let settings = ConnSettings {
            rdmap_v2: true,
            ..ConnSettings::default()
        };
        let k = self.next.fetch_add(1, Ordering::Relaxed) % self.a.len();
        let (ca, cb) = (&self.a[k], &self.b[k]);
        // Listeners belong to one application: each of b's contexts listens on its own port.
        let port = self.port + k as u16;
        if !self.listening[k].swap(true, Ordering::Relaxed) {
            cb.listen(port, &settings)
                .map_err(|e| err("listen on b", e))?;
        }
        let a = side(ca, depth, buf_len)?;
        let b = side(cb, depth, buf_len)?;
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

/// One side: PD, send and receive CQs, QP (both queues `depth` deep), a registered buffer.
fn side(ctx: &Context, depth: usize, buf_len: usize) -> Result<Side> {
    let pd = ctx.alloc_pd().map_err(|e| err("alloc PD", e))?;
    // Separate send and receive CQs: the harness polls each for its own completions.
    let send_cq = ctx
        .create_cq((depth + 16) as u32)
        .map_err(|e| err("create send CQ", e))?;
    let recv_cq = ctx
        .create_cq((depth + 16) as u32)
        .map_err(|e| err("create receive CQ", e))?;
    let mut attr = QpInitAttr::new(&send_cq, depth as u32);
    attr.recv_cq = recv_cq;
    attr.ird = 64;
    attr.ord = 64;
    let qp = pd.create_qp(&attr).map_err(|e| err("create QP", e))?;
    let buf = ctx
        .alloc_buffer(buf_len)
        .map_err(|e| err("alloc buffer", e))?;
    let rights =
        access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_WRITE | access::REMOTE_ATOMIC;
    let mr = pd
        .reg_mr(&buf, 0, buf_len as u64, rights)
        .map_err(|e| err("register memory", e))?;
    // SAFETY: the buffer's mapping is `buf_len` octets and lives in `keep` below, dropped
    // after the QP and the region (Side's field order).
    let mem = unsafe { Mem::new(buf.as_ptr(), buf_len) };
    Ok(Side {
        qp,
        mr,
        mem,
        recvs: 0,
        rq_depth: depth,
        keep: Box::new((pd, buf, ctx.clone())),
    })
}

/// One context on each of `workers` workers of the endpoint in `dir`. Control places a new
/// context on the worker serving the fewest applications, so on a daemon other applications
/// already use, a few more may be needed to reach every worker; those extra ones are closed.
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
            Some(w) if w < workers && mine[w].is_none() => mine[w] = Some(c),
            // A control that does not place, or one worker only: any context serves.
            None if workers == 1 => mine[0] = Some(c),
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
