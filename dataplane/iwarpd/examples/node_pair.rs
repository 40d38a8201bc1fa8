//! The frame path's own cost: two iwarpd nodes (smoltcp TCP and the RNIC engine, as a
//! worker runs them), by default on one thread joined by an in-memory Ethernet link. No
//! scheduler, no second core, no system call: what remains is the software a frame crosses
//! on its way through a daemon (port, TCP, MPA/DDP/RDMAP, placement) plus the post that
//! starts it.
//!
//!     cargo run --release -p iwarpd --example node-pair -- latency [--iterations N] [--ack-delay-us US]
//!     cargo run --release -p iwarpd --example node-pair -- rate [--seconds S] [--op sends|writes]
//!     cargo run --release -p iwarpd --example node-pair -- streams [--qps N] [--size OCTETS] [--window W]
//!     cargo run --release -p iwarpd --features dpdk --example node-pair -- latency --link memif --threads 2
//!     cargo run --release -p iwarpd --features dpdk --example node-pair -- rate --link memif --threads 2
//!
//! `latency`: RDMA Write 64 B ping-pong; percentiles of the round trip and of one hop (half
//! of it), in microseconds. With an ACK delay (`tcp.ack_delay_us`) the receiver's ACK rides
//! its answer instead of going out alone.
//!
//! `rate`: many messages in flight from one node to the other. On one thread the figure is
//! what one core does running both ends of the path: 64 B Sends per second (batches of 256,
//! each received before the next is posted) or 64 KiB RDMA Write bandwidth (batches of 8,
//! each closed by an 8-byte RDMA Read, whose response arrives after the Writes are placed).
//! With a thread per node it is a stream, each end on its own core: Sends as a credit-based
//! application sends them (never more in flight than the receiver has receives posted, 1024,
//! each posted again as it completes), Writes eight in flight, each posted as one completes;
//! it prints the share of each core's time spent in turns that moved something, so the
//! busier core names the bound, and its rate is what one core does at its end of the path.
//! Both print the frames and FPDUs the sender sent per message.
//!
//! `streams`: every one of `--qps` QP pairs keeps `--window` RDMA Writes of `--size` octets
//! in flight, each posted again on its QP as it completes, both nodes on one thread: what one
//! core does running both ends when all QPs are busy at once, against the same with 16 QPs
//! (the per-connection state outgrows the caches), and what many streams of large Writes
//! move together (`--worker-inflight` sets `tcp.worker_inflight`). It prints the frames
//! each side sent per Write, and the slowest QP's Writes against the fastest's. It takes
//! `--link` and `--mtu` (below), not the others.
//!
//! Both modes: `--link memif` joins the nodes by DPDK's `net_memif` (a server and a client
//! in this process, root, hugepages when free) instead of the in-memory link (whose mutex
//! two threads contend for: memif is the link to read per-core figures from); `--link unix`
//! by the daemon's embedded Unix-socket port (two ports in a temporary directory, a system
//! call per batch of frames at each end, no root); `--threads 2`
//! gives each node its own thread pinned to its own core (`--cores`), each polling only its
//! node, busy: two daemons' frame paths, without the applications and their rings.
//!
//! `--congestion cubic|newreno|dctcp|none` (both modes) sets both nodes' `tcp.congestion`.
//!
//! `--idle N` (both modes) connects N more QP pairs first, which stay idle (their TCP keeps
//! them alive): what the measured connection's path costs next to many idle ones.
//!
//! `--mtu N` (both modes) runs the link at that MTU, TCP's segments and FPDUs following it
//! as the daemon's defaults do; memif gets a buffer per frame. Above 1500: jumbo frames.
//!
//! `--rings` (both modes) puts the rings back: work is posted and reaped through an
//! application's shared-memory SQ, RQ and CQ rings, moved by the daemon's own fast path
//! ([`HostQp`], [`HostCq`]) in a worker's order; the application's side runs on its node's
//! thread.

use clap::{Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use iwarp_abi::ring::{self, Consumer, Producer};
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use iwarp_abi::wqe::{self, send_flags, Cqe, CqeStatus, RecvWqe, SendOpcode, SendWqe};
use iwarp_engine::{
    Access, CqId, PdId, QpCaps, QpId, RecvWr, Rnic, SendOp, SendWr, Sge, VerbsError, WorkCompletion,
};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::host::fastpath::{HostCq, HostQp};
use iwarpd::node::{ConnState, Node, TcpSettings};
#[cfg(feature = "dpdk")]
use iwarpd::port::dpdk::{eal_init, DpdkPort};
use iwarpd::port::memory::MemoryPort;
use iwarpd::port::Port;
use iwarpd::worker::Service;
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEN: usize = 64;
/// `rate` mode's batches: Sends of 64 B, or RDMA Writes of `WRITE_LEN`.
const SENDS: usize = 256;
/// Receives the receiving node keeps posted in a two-thread Send stream, and so the Sends
/// the sender may have in flight (its credit).
const STREAM_RECVS: usize = 1024;
const WRITES: usize = 8;
const WRITE_LEN: usize = 64 << 10;
/// Registered memory of each end in `rate` mode: room for a batch of either.
const RATE_MEM: usize = WRITES * WRITE_LEN;

#[derive(Parser)]
#[command(about = "Two iwarpd nodes: the frame path's latency and rate")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// RDMA Write 64 B ping-pong.
    Latency {
        #[arg(long, default_value_t = 100_000)]
        iterations: u64,
        /// `tcp.ack_delay_us` of both nodes (the daemon's default; 0: every ACK at once).
        #[arg(long, default_value_t = 5)]
        ack_delay_us: u64,
        #[command(flatten)]
        place: Placement,
    },
    /// Many messages in flight, one direction.
    Rate {
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        #[arg(long, value_enum, default_value_t = RateOp::Sends)]
        op: RateOp,
        #[command(flatten)]
        place: Placement,
    },
    /// Every one of many QP pairs streaming RDMA Writes, one direction, both nodes on this
    /// thread.
    Streams {
        /// QP pairs, every one streaming.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=20000))]
        qps: u16,
        /// Writes in flight on each QP, each posted again as it completes.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
        window: u16,
        /// Octets per Write.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
        size: u32,
        /// Both nodes' `tcp.worker_inflight` (0: the daemon's default).
        #[arg(long, default_value_t = 0)]
        worker_inflight: usize,
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        #[command(flatten)]
        place: Placement,
    },
}

/// What joins the nodes and which threads run them.
#[derive(clap::Args)]
struct Placement {
    /// What joins the two nodes.
    #[arg(long, value_enum, default_value_t = Link::Memory)]
    link: Link,
    /// 1: both nodes polled in turn by one thread; 2: a pinned thread per node.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    threads: u8,
    /// The cores of the two threads (with --threads 2).
    #[arg(long, value_delimiter = ',', num_args = 2, default_values_t = [0, 1])]
    cores: Vec<usize>,
    /// Post and reap through the application's shared-memory rings (SQ, RQ and CQ entries,
    /// moved by the daemon's own fast path) instead of calling the engine directly: the ring
    /// stage's cost on the core that runs both sides of it.
    #[arg(long)]
    rings: bool,
    /// The link's MTU (the ports' `port.mtu`); TCP's segment size and in-flight bound
    /// follow it as the daemon's defaults do. Above 1500: jumbo frames.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..=9216))]
    mtu: u16,
    /// Both nodes' `tcp.congestion`: cubic, newreno, dctcp or none.
    #[arg(long, default_value = "cubic")]
    congestion: iwarp_config::Congestion,
    /// Idle connected QP pairs next to the measured one.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=20000))]
    idle: u16,
}

impl Placement {
    /// The cores of a thread per node; None: both nodes on this thread.
    fn cores(&self) -> Option<[usize; 2]> {
        (self.threads == 2).then(|| [self.cores[0], self.cores[1]])
    }

    /// Both nodes' configuration: the daemon's defaults for the link's MTU.
    fn config(&self) -> iwarp_config::Config {
        let mut c = iwarp_config::Config::default();
        c.port.mtu = usize::from(self.mtu);
        c.tcp.congestion = self.congestion;
        c
    }

    /// Both nodes' TCP settings: the daemon's for the link's MTU.
    fn tcp(&self) -> TcpSettings {
        TcpSettings::from_config(&self.config())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Link {
    /// Two queues in memory (no system call, no DPDK).
    Memory,
    /// DPDK `net_memif` (needs the `dpdk` feature and root).
    Memif,
    /// The embedded Unix-socket port, the daemon's default (no root).
    Unix,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RateOp {
    /// 64 B Sends.
    Sends,
    /// 64 KiB RDMA Writes.
    Writes,
}

struct End<P: Port> {
    node: Node<P>,
    rnic: Rnic,
    qp: iwarp_engine::QpId,
    cq: iwarp_engine::CqId,
    stag: u32,
    buf: NonNull<u8>,
    conn: usize,
    /// With `--rings`: work goes through the application rings.
    rings: Option<Rings>,
}

/// An application's rings of one QP and its CQ, both ends: the application's (the producer
/// of SQ and RQ entries, the consumer of CQEs) and the daemon's fast path
/// ([`HostQp`], [`HostCq`]: the code a daemon's worker runs on them).
struct Rings {
    sq: Producer<SendWqe>,
    rq: Producer<RecvWqe>,
    cq: Consumer<Cqe>,
    host_qp: HostQp,
    host_cq: HostCq,
}

impl Rings {
    fn new(qp: iwarp_engine::QpId, cq: iwarp_engine::CqId) -> Rings {
        fn segment(what: &str, len: usize) -> Arc<Segment> {
            let name = format!("node-pair-{what}-{}", std::process::id());
            let seg = Segment::create_anonymous(&name, SegmentKind::Other, len, HugePolicy::Auto);
            Arc::new(seg.expect("ring memory"))
        }
        let depth = STREAM_RECVS;
        let sq = segment("sq", ring::ring_bytes::<SendWqe>(depth));
        let rq = segment("rq", ring::ring_bytes::<RecvWqe>(depth));
        let cqs = segment("cq", ring::ring_bytes::<Cqe>(2 * depth));
        let (sq, sq_host) = ring::init_segment::<SendWqe>(&sq, depth).expect("SQ ring");
        let (rq, rq_host) = ring::init_segment::<RecvWqe>(&rq, depth).expect("RQ ring");
        let (cq_host, cq_app) = ring::init_segment::<Cqe>(&cqs, 2 * depth).expect("CQ ring");
        Rings {
            sq,
            rq,
            cq: cq_app,
            host_qp: HostQp::new(qp, sq_host, Some(rq_host)),
            host_cq: HostCq::new(cq, cq_host, None),
        }
    }
}

/// The daemon's host side on these rings, as a worker's turn drives it
/// ([`iwarpd::worker::turn`]): the RQ and the SQ into the engine after the port's burst,
/// completions out after the node transmitted.
impl<P: Port> Service<P> for Rings {
    fn post(&mut self, rnic: &mut Rnic) -> bool {
        let r = self.host_qp.pump_rq(rnic);
        let s = self.host_qp.pump_sq(rnic);
        r.posted + r.rejected + s.posted + s.rejected > 0
    }
    fn serve(&mut self, _node: &mut Node<P>, rnic: &mut Rnic) -> bool {
        // Only this QP's CQ: what the engine lists as ready is this one.
        while rnic.next_cq_ready().is_some() {}
        self.host_cq.drain(rnic).completed > 0
    }
}

/// A scatter/gather element as an application writes it into an SQ or RQ entry.
fn wqe_sge(g: Sge) -> wqe::Sge {
    wqe::Sge {
        stag: g.stag,
        len: g.len,
        to: g.to,
    }
}

/// The SQ entry an application writes for `wr` (the operations node-pair posts).
fn send_wqe(wr: &SendWr) -> SendWqe {
    let sgl = wr.sgl.map(wqe_sge);
    let (opcode, remote) = match wr.op {
        SendOp::Send { .. } => (SendOpcode::Send, None),
        SendOp::Write {
            remote_stag,
            remote_to,
        } => (SendOpcode::Write, Some((remote_stag, remote_to))),
        SendOp::Read {
            remote_stag,
            remote_to,
        } => (SendOpcode::Read, Some((remote_stag, remote_to))),
        _ => unreachable!("node-pair posts Sends, Writes and Reads"),
    };
    let mut w = SendWqe::new(wr.wr_id, opcode, &sgl[..wr.num_sge as usize]).expect("WQE");
    if let Some((stag, to)) = remote {
        w.remote_stag = stag;
        w.remote_to = to;
    }
    if !wr.signaled {
        w.flags &= !send_flags::SIGNALED;
    }
    w
}

// SAFETY: `buf` points into a leaked allocation that only the thread owning this End reads
// or writes (its own engine places into it inside `poll`, on that thread); the node moves
// with the End, so nothing is shared between threads.
unsafe impl<P: Port + Send> Send for End<P> {}

impl<P: Port> End<P> {
    fn new(port: P, ip: Ipv4Addr, tcp: TcpSettings, mem_len: usize, rings: bool) -> End<P> {
        let node = Node::new(port, ip, 24, tcp);
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let cq = rnic.create_cq(2 * STREAM_RECVS);
        let caps = QpCaps {
            sq_depth: STREAM_RECVS,
            rq_depth: STREAM_RECVS,
            srq: None,
        };
        let qp = rnic.create_qp(pd, cq, cq, caps).expect("QP");
        // Latency: two halves, what this end sends from and what the other end writes into.
        let (stag, buf) = leaked_region(&mut rnic, pd, mem_len);
        let rings = rings.then(|| Rings::new(qp, cq));
        End {
            node,
            rnic,
            qp,
            cq,
            stag,
            buf,
            conn: usize::MAX,
            rings,
        }
    }

    /// One turn: the node, and with rings the daemon's fast path on them. Whether it moved
    /// anything.
    fn poll(&mut self) -> bool {
        match &mut self.rings {
            Some(r) => iwarpd::worker::turn(&mut self.node, &mut self.rnic, r),
            None => self.node.poll(&mut self.rnic),
        }
    }

    /// Posts `wr` on the SQ: into the engine, or with rings into the SQ ring.
    fn post(&mut self, wr: SendWr) -> Result<(), VerbsError> {
        match &mut self.rings {
            Some(r) => r.sq.push(send_wqe(&wr)).map_err(|_| VerbsError::QueueFull),
            None => self.rnic.post_send(self.qp, wr),
        }
    }

    /// Posts a receive of `sge` with `id` as its work request id.
    fn post_recv(&mut self, id: u64, sge: Sge) {
        match &mut self.rings {
            Some(r) => {
                let w = RecvWqe::new(id, &[wqe_sge(sge)]).expect("RQ entry");
                r.rq.push(w).map_err(|_| "RQ ring full").expect("recv");
            }
            None => self
                .rnic
                .post_recv(self.qp, RecvWr::new(id, &[sge]))
                .expect("recv"),
        }
    }

    /// The last octet of the half the peer writes into.
    fn landed(&self) -> u8 {
        // SAFETY: inside the leaked buffer; the engine writes it only inside `poll`, on
        // this same thread.
        unsafe { std::ptr::read_volatile(self.buf.as_ptr().add(2 * LEN - 1)) }
    }

    /// Writes `tag` as the last octet of the outgoing half and posts an RDMA Write of it into
    /// the peer's incoming half.
    fn write(&mut self, peer_stag: u32, peer_va: u64, tag: u8) {
        // SAFETY: inside the leaked buffer, not under a transfer (the previous Write of it
        // completed before the peer answered).
        unsafe { *self.buf.as_ptr().add(LEN - 1) = tag };
        let sge = self.sge(0, LEN);
        let op = SendOp::Write {
            remote_stag: peer_stag,
            remote_to: peer_va + LEN as u64,
        };
        self.post(SendWr::new(u64::from(tag), op, &[sge]))
            .expect("post");
    }

    /// Completions taken off the CQ, all successful.
    fn reap(&mut self, wcs: &mut [WorkCompletion]) -> usize {
        let Some(r) = &mut self.rings else {
            let n = self.rnic.poll_cq(self.cq, wcs).expect("poll CQ");
            assert!(wcs[..n]
                .iter()
                .all(|w| w.status == iwarp_engine::Status::Success));
            return n;
        };
        let mut n = 0;
        while n < wcs.len() {
            let Some(c) = r.cq.pop() else { break };
            assert!(
                matches!(c.status(), Ok(CqeStatus::Success)),
                "completion {c:?}"
            );
            wcs[n].wr_id = c.wr_id;
            n += 1;
        }
        n
    }

    /// Posts a receive into slot `slot` of this end's memory (`LEN` octets each), with the
    /// slot as its work request id.
    fn post_recv_slot(&mut self, slot: usize) {
        self.post_recv(slot as u64, self.sge(LEN * slot, LEN));
    }

    /// A Send of slot `slot` of this end's memory.
    fn send_wr(&self, id: u64, slot: usize) -> SendWr {
        let send = SendOp::Send {
            solicited: false,
            invalidate: None,
        };
        SendWr::new(id, send, &[self.sge(LEN * slot, LEN)])
    }

    /// An RDMA Write of block `slot` (`WRITE_LEN` octets each) of this end's memory into the
    /// same block of the peer's (its STag and address).
    fn write_wr(&self, id: u64, slot: usize, peer: (u32, u64)) -> SendWr {
        let write = SendOp::Write {
            remote_stag: peer.0,
            remote_to: peer.1 + (slot * WRITE_LEN) as u64,
        };
        SendWr::new(id, write, &[self.sge(slot * WRITE_LEN, WRITE_LEN)])
    }

    /// An 8-octet RDMA Read of the peer's first octets: its response comes only once every
    /// Write posted before it is placed.
    fn fence_read(&self, peer: (u32, u64)) -> SendWr {
        let read = SendOp::Read {
            remote_stag: peer.0,
            remote_to: peer.1,
        };
        SendWr::new(u64::MAX, read, &[self.sge(0, 8)])
    }

    fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge {
            stag: self.stag,
            to: self.buf.as_ptr() as u64 + offset as u64,
            len: len as u32,
        }
    }
}

/// The in-memory link's two ports.
fn memory_ports(mtu: usize) -> (MemoryPort, MemoryPort) {
    MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], mtu)
}

/// A `net_memif` server and client in this process, on one socket.
#[cfg(feature = "dpdk")]
fn memif_ports(mtu: usize) -> Result<(DpdkPort, DpdkPort), String> {
    let pid = std::process::id();
    let sock = format!("/tmp/iwarp-node-pair-{pid}.sock");
    let mut args: Vec<String> = ["--no-pci", "--no-telemetry", "--log-level=3"]
        .map(String::from)
        .to_vec();
    args.push(format!("--file-prefix=node-pair-{pid}"));
    if iwarp_abi::segment::free_hugepages() > 0 {
        args.extend(["--in-memory".into(), "-m".into(), "256".into()]);
    } else {
        eprintln!("node-pair: no hugepages free, DPDK on ordinary memory (--no-huge)");
        args.extend(["--no-huge".into(), "-m".into(), "512".into()]);
    }
    // A memif buffer per frame (bsize, 2048 by default): see iwarpd's DPDK port.
    let bsize = (mtu + 14).max(2048);
    args.push(format!(
        "--vdev=net_memif0,role=server,socket={sock},id=0,bsize={bsize}"
    ));
    args.push(format!(
        "--vdev=net_memif1,role=client,socket={sock},id=0,bsize={bsize}"
    ));
    eal_init(&args).map_err(|e| format!("DPDK EAL ({}): {e}", args.join(" ")))?;
    let a = DpdkPort::open("net_memif0", mtu).map_err(|e| e.to_string())?;
    let b = DpdkPort::open("net_memif1", mtu).map_err(|e| e.to_string())?;
    Ok((a, b))
}

/// Two connected ends, A the active side.
fn pair<P: Port>(
    pa: P,
    pb: P,
    tcp: TcpSettings,
    mem_len: usize,
    rings: bool,
    idle: u16,
) -> (End<P>, End<P>) {
    let (ip_a, ip_b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let mut a = End::new(pa, ip_a, tcp, mem_len, rings);
    let mut b = End::new(pb, ip_b, tcp, mem_len, rings);
    connect_idle(&mut a, &mut b, ip_a, idle);
    a.conn = a
        .node
        .listen(7174, a.qp, Settings::default())
        .expect("listen");
    b.conn = b
        .node
        .connect(ip_a, 7174, 40000, b.qp, Settings::default())
        .expect("connect");
    let t = Instant::now();
    while a.node.state(a.conn) != Some(&ConnState::Rts)
        || b.node.state(b.conn) != Some(&ConnState::Rts)
    {
        assert!(t.elapsed() < Duration::from_secs(10), "no connection");
        a.poll();
        b.poll();
    }
    (a, b)
}

/// Connects `n` QP pairs that stay idle, a listening port each on `a`, a few hundred
/// handshakes at a time.
fn connect_idle<P: Port>(a: &mut End<P>, b: &mut End<P>, ip_a: Ipv4Addr, n: u16) {
    let caps = QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq: None,
    };
    connect_pairs(a, b, ip_a, usize::from(n), caps, 16);
}

/// QP pairs set up by [`connect_pairs`]: each side's PD and shared CQ, and the QPs.
struct Pairs {
    pd: (PdId, PdId),
    cq: (CqId, CqId),
    qps: Vec<(QpId, QpId)>,
}

/// Connects `n` QP pairs (`caps` each, one CQ of `cq_depth` per side), a listening port each
/// on `a`, a few hundred handshakes at a time.
fn connect_pairs<P: Port>(
    a: &mut End<P>,
    b: &mut End<P>,
    ip_a: Ipv4Addr,
    n: usize,
    caps: QpCaps,
    cq_depth: usize,
) -> Pairs {
    let (pd_a, pd_b) = (a.rnic.alloc_pd(), b.rnic.alloc_pd());
    let (cq_a, cq_b) = (a.rnic.create_cq(cq_depth), b.rnic.create_cq(cq_depth));
    let t = Instant::now();
    let mut pending = Vec::new();
    let mut qps = Vec::with_capacity(n);
    for k in 0..n {
        let qa = a.rnic.create_qp(pd_a, cq_a, cq_a, caps).expect("QP");
        let qb = b.rnic.create_qp(pd_b, cq_b, cq_b, caps).expect("QP");
        qps.push((qa, qb));
        let port = 20000 + k as u16;
        let ca = a
            .node
            .listen(port, qa, Settings::default())
            .expect("listen");
        let cb = b
            .node
            .connect(ip_a, port, 40001 + k as u16, qb, Settings::default())
            .expect("connect");
        pending.push((ca, cb));
        while pending.len() >= 256 || (k + 1 == n && !pending.is_empty()) {
            assert!(
                t.elapsed() < Duration::from_secs(600),
                "QP pairs connecting"
            );
            a.poll();
            b.poll();
            pending.retain(|&(ca, cb)| {
                a.node.state(ca) != Some(&ConnState::Rts)
                    || b.node.state(cb) != Some(&ConnState::Rts)
            });
        }
    }
    if n > 0 {
        eprintln!(
            "{n} QP pairs connected in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    Pairs {
        pd: (pd_a, pd_b),
        cq: (cq_a, cq_b),
        qps,
    }
}

/// What the output says of `--idle`.
fn idle_note(idle: u16) -> String {
    match idle {
        0 => String::new(),
        n => format!(", {n} idle QP pairs beside"),
    }
}

fn main() {
    let (job, place) = match Cli::parse().mode {
        Mode::Latency {
            iterations,
            ack_delay_us,
            place,
        } => {
            let run = Latency {
                idle: place.idle,
                iterations,
                ack_us: ack_delay_us,
                cores: place.cores(),
                rings: place.rings,
                tcp: {
                    let mut c = place.config();
                    c.tcp.ack_delay_us = ack_delay_us;
                    TcpSettings::from_config(&c)
                },
            };
            (Job::Latency(run), place)
        }
        Mode::Rate { seconds, op, place } => {
            let run = Rate {
                idle: place.idle,
                seconds,
                op,
                cores: place.cores(),
                rings: place.rings,
                tcp: place.tcp(),
            };
            (Job::Rate(run), place)
        }
        Mode::Streams {
            qps,
            window,
            size,
            worker_inflight,
            seconds,
            place,
        } => {
            if place.threads != 1 || place.rings || place.idle != 0 {
                eprintln!(
                    "node-pair: streams runs both nodes on one thread, without rings or --idle"
                );
                std::process::exit(2);
            }
            let run = Streams {
                qps: usize::from(qps),
                window: usize::from(window),
                size: size as usize,
                seconds,
                tcp: {
                    let mut c = place.config();
                    c.tcp.worker_inflight = worker_inflight;
                    TcpSettings::from_config(&c)
                },
            };
            (Job::Streams(run), place)
        }
    };
    let mtu = usize::from(place.mtu);
    let jumbo = if mtu == 1500 {
        String::new()
    } else {
        format!(" (MTU {mtu})")
    };
    match place.link {
        Link::Memory => {
            let (pa, pb) = memory_ports(mtu);
            job.run(pa, pb, &format!("in-memory link{jumbo}"));
        }
        Link::Unix => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let open = |last: u8| {
                iwarpd::port::unix::UnixPort::open(dir.path(), [2, 0, 0, 0, 0, last], mtu)
                    .expect("a Unix port")
            };
            job.run(open(1), open(2), &format!("Unix-socket port{jumbo}"));
        }
        #[cfg(feature = "dpdk")]
        Link::Memif => match memif_ports(mtu) {
            Ok((pa, pb)) => {
                // Both ends of the pair stay open until the process ends: closed one after
                // the other here, the first one's disconnect would meet the second one's
                // close in EAL's interrupt thread (see `DpdkPort::hold`).
                let holds = [pa.hold(), pb.hold()];
                job.run(pa, pb, &format!("DPDK net_memif{jumbo}"));
                std::mem::forget(holds);
            }
            Err(e) => {
                eprintln!("node-pair: {e}");
                std::process::exit(1);
            }
        },
        #[cfg(not(feature = "dpdk"))]
        Link::Memif => {
            eprintln!(
                "node-pair: --link memif needs the dpdk feature \
                 (cargo run --release -p iwarpd --features dpdk --example node-pair)"
            );
            std::process::exit(2);
        }
    }
}

enum Job {
    Latency(Latency),
    Rate(Rate),
    Streams(Streams),
}

impl Job {
    fn run<P: Port + Send + 'static>(&self, pa: P, pb: P, link: &str) {
        match self {
            Job::Latency(run) => latency(pa, pb, link, run),
            Job::Rate(run) => rate(pa, pb, link, run),
            Job::Streams(run) => streams(pa, pb, link, run),
        }
    }
}

struct Latency {
    idle: u16,
    iterations: u64,
    ack_us: u64,
    /// A pinned thread per node on these cores; None: both nodes on this thread.
    cores: Option<[usize; 2]>,
    rings: bool,
    tcp: TcpSettings,
}

fn pin(core: usize) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("node-pair: could not pin a thread to core {core}");
        std::process::exit(2);
    }
}

fn latency<P: Port + Send + 'static>(pa: P, pb: P, link: &str, run: &Latency) {
    let (a, b) = pair(pa, pb, run.tcp, 2 * LEN, run.rings, run.idle);
    let warmup = run.iterations / 10;
    let total = warmup + run.iterations;
    let (rtt, frames) = match run.cores {
        None => one_thread(a, b, total, warmup),
        Some(cores) => two_threads(a, b, total, warmup, cores),
    };
    let iterations = run.iterations;
    let ack_us = run.ack_us;
    let us =
        |h: &Histogram<u64>, q: f64, div: u64| h.value_at_quantile(q) as f64 / 1e3 / div as f64;
    let threads = match run.cores {
        None => "both on one thread".to_string(),
        Some([x, y]) => format!("a thread each on cores {x} and {y}, polling busy"),
    };
    let via = format!("{}{}", work_path(run.rings), idle_note(run.idle));
    println!(
        "node-pair: RDMA Write {LEN} B ping-pong, two nodes over the {link}, {threads}, {via}, \
         {iterations} round trips, ACK delay {ack_us} us ({:.1} frames from A per round trip)",
        frames as f64 / total as f64
    );
    println!("             p50      p90      p99    p99.9      max   (microseconds)");
    for (name, div) in [("round trip", 1), ("one hop", 2)] {
        println!(
            "{name:<10} {:>7.3}  {:>7.3}  {:>7.3}  {:>7.3}  {:>7.3}",
            us(&rtt, 0.5, div),
            us(&rtt, 0.9, div),
            us(&rtt, 0.99, div),
            us(&rtt, 0.999, div),
            rtt.max() as f64 / 1e3 / div as f64,
        );
    }
}

/// A wait that must end: one that makes no progress for `STALL` ends the run with a message
/// (a broken path fails, it does not hang). Reads the clock once every 4096 turns.
struct Patience {
    start: Instant,
    turns: u32,
    what: &'static str,
}

const STALL: Duration = Duration::from_secs(10);

impl Patience {
    fn new(what: &'static str) -> Patience {
        Patience {
            start: Instant::now(),
            turns: 0,
            what,
        }
    }

    fn turn(&mut self) {
        self.turns = self.turns.wrapping_add(1);
        if self.turns.is_multiple_of(4096) && self.start.elapsed() > STALL {
            eprintln!("node-pair: {} did not finish in {STALL:?}", self.what);
            std::process::exit(1);
        }
    }
}

/// How work reaches the engine, as the output says it.
fn work_path(rings: bool) -> &'static str {
    if rings {
        "work through the application rings"
    } else {
        "work posted straight to the engine"
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram")
}

/// Times `total` round trips A starts with a Write of each tag to B (`peer`: its STag and
/// address), recording those after `warmup`; `back` returns once B's Write of the tag has
/// landed in A. The round trips, and the frames A sent.
fn time_round_trips<P: Port>(
    a: &mut End<P>,
    peer: (u32, u64),
    total: u64,
    warmup: u64,
    mut back: impl FnMut(&mut End<P>, u8),
) -> (Histogram<u64>, u64) {
    let mut wcs = vec![WorkCompletion::default(); 64];
    let mut rtt = histogram();
    let frames0 = a.node.counters().tx_frames;
    for i in 0..total {
        let tag = (i % 255) as u8 + 1;
        let start = Instant::now();
        a.write(peer.0, peer.1, tag);
        back(a, tag);
        let ns = start.elapsed().as_nanos() as u64;
        if i >= warmup {
            rtt.record(ns.max(1)).expect("record");
        }
        a.reap(&mut wcs);
    }
    (rtt, a.node.counters().tx_frames - frames0)
}

/// The ping-pong with both nodes polled in turn by this thread.
fn one_thread<P: Port>(
    mut a: End<P>,
    mut b: End<P>,
    total: u64,
    warmup: u64,
) -> (Histogram<u64>, u64) {
    let (a_va, b_va) = (a.buf.as_ptr() as u64, b.buf.as_ptr() as u64);
    let mut wcs = vec![WorkCompletion::default(); 64];
    time_round_trips(&mut a, (b.stag, b_va), total, warmup, |a, tag| {
        let mut wait = Patience::new("a round trip");
        while b.landed() != tag {
            a.poll();
            b.poll();
            wait.turn();
        }
        b.write(a.stag, a_va, tag);
        while a.landed() != tag {
            b.poll();
            a.poll();
            wait.turn();
        }
        b.reap(&mut wcs);
    })
}

/// The ping-pong with a pinned thread per node, each polling only its own: B answers each
/// Write that lands with one of the same tag, A times the round trips.
fn two_threads<P: Port + Send + 'static>(
    mut a: End<P>,
    mut b: End<P>,
    total: u64,
    warmup: u64,
    cores: [usize; 2],
) -> (Histogram<u64>, u64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let (a_va, b_va, a_stag, b_stag) =
        (a.buf.as_ptr() as u64, b.buf.as_ptr() as u64, a.stag, b.stag);
    let stop = Arc::new(AtomicBool::new(false));
    let stop_b = stop.clone();
    let responder = std::thread::spawn(move || {
        pin(cores[1]);
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut expect = 1u8;
        while !stop_b.load(Ordering::Relaxed) {
            b.poll();
            if b.landed() == expect {
                b.write(a_stag, a_va, expect);
                b.reap(&mut wcs);
                expect = expect % 255 + 1;
            }
        }
        b
    });
    pin(cores[0]);
    let measured = time_round_trips(&mut a, (b_stag, b_va), total, warmup, |a, tag| {
        let mut wait = Patience::new("a round trip");
        while a.landed() != tag {
            a.poll();
            wait.turn();
        }
    });
    stop.store(true, Ordering::Relaxed);
    let _b = responder.join().expect("responder thread");
    measured
}

/// One batch from A to B, polled until B has it all.
fn batch<P: Port>(a: &mut End<P>, b: &mut End<P>, op: RateOp, wcs: &mut [WorkCompletion]) -> u64 {
    match op {
        RateOp::Sends => {
            for i in 0..SENDS {
                b.post_recv_slot(i);
                let mut wr = a.send_wr(i as u64, i);
                wr.signaled = i == SENDS - 1;
                a.post(wr).expect("post");
            }
            let (mut sent, mut received) = (0, 0);
            let mut wait = Patience::new("a batch of Sends");
            while sent < 1 || received < SENDS {
                a.poll();
                b.poll();
                sent += a.reap(wcs);
                received += b.reap(wcs);
                wait.turn();
            }
            SENDS as u64
        }
        RateOp::Writes => {
            let peer = (b.stag, b.buf.as_ptr() as u64);
            for i in 0..WRITES {
                let mut wr = a.write_wr(i as u64, i, peer);
                wr.signaled = false;
                a.post(wr).expect("post");
            }
            a.post(a.fence_read(peer)).expect("post read");
            let mut done = 0;
            let mut wait = Patience::new("a batch of Writes");
            while done < 1 {
                a.poll();
                b.poll();
                done += a.reap(wcs);
                wait.turn();
            }
            (WRITES * WRITE_LEN) as u64
        }
    }
}

struct Rate {
    idle: u16,
    seconds: f64,
    op: RateOp,
    /// A pinned thread per node on these cores; None: both nodes on this thread.
    cores: Option<[usize; 2]>,
    rings: bool,
    tcp: TcpSettings,
}

/// What a rate run moved: units (messages, or octets for Writes), messages, seconds, and
/// with a thread per node the share of each core's time spent in turns that moved something.
struct Moved {
    units: u64,
    messages: u64,
    seconds: f64,
    busy: Option<[f64; 2]>,
}

fn rate<P: Port + Send + 'static>(pa: P, pb: P, link: &str, run: &Rate) {
    let (mut a, mut b) = pair(pa, pb, run.tcp, RATE_MEM, run.rings, run.idle);
    let mut wcs = vec![WorkCompletion::default(); 256];
    for _ in 0..50 {
        batch(&mut a, &mut b, run.op, &mut wcs);
    }
    let (frames0, fpdus0) = (a.node.counters().tx_frames, a.node.counters().fpdus_tx);
    let (a, moved) = match run.cores {
        None => {
            let start = Instant::now();
            let (mut units, mut messages) = (0u64, 0u64);
            while start.elapsed().as_secs_f64() < run.seconds {
                units += batch(&mut a, &mut b, run.op, &mut wcs);
                messages += match run.op {
                    RateOp::Sends => SENDS as u64,
                    RateOp::Writes => WRITES as u64,
                };
            }
            let seconds = start.elapsed().as_secs_f64();
            let moved = Moved {
                units,
                messages,
                seconds,
                busy: None,
            };
            (a, moved)
        }
        Some(cores) => stream(a, b, run.op, run.seconds, cores),
    };
    let c = a.node.counters();
    let (frames, fpdus) = (c.tx_frames - frames0, c.fpdus_tx - fpdus0);
    let threads = match run.cores {
        None => "both on one thread".to_string(),
        Some([x, y]) => format!("sender on core {x}, receiver on core {y}, polling busy"),
    };
    let threads = format!("{threads}, {}{}", work_path(run.rings), idle_note(run.idle));
    let per = |n: u64| n as f64 / moved.messages.max(1) as f64;
    match run.op {
        RateOp::Sends => println!(
            "node-pair: 64 B Sends over the {link}, {threads}: {:.2} M msg/s, {:.3} frames and \
             {:.3} FPDUs from A per message",
            moved.units as f64 / moved.seconds / 1e6,
            per(frames),
            per(fpdus),
        ),
        RateOp::Writes => println!(
            "node-pair: 64 KiB RDMA Writes over the {link}, {threads}: {:.2} Gbit/s, {:.1} frames \
             and {:.1} FPDUs from A per Write",
            moved.units as f64 * 8.0 / moved.seconds / 1e9,
            per(frames),
            per(fpdus),
        ),
    }
    if let Some([sender, receiver]) = moved.busy {
        println!(
            "node-pair: time in turns that moved something: sender core {:.0} %, receiver core \
             {:.0} %",
            sender * 100.0,
            receiver * 100.0
        );
    }
}

/// Time in turns that did work. The clock is read only on idle turns (a run of busy turns
/// is timed from the end of the idle turn before it to the end of the idle turn after it),
/// so measuring costs a loop that is kept busy nothing.
struct Load {
    start: Instant,
    busy: Duration,
    idle_end: Instant,
    in_busy: bool,
}

impl Load {
    fn new() -> Load {
        let now = Instant::now();
        Load {
            start: now,
            busy: Duration::ZERO,
            idle_end: now,
            in_busy: false,
        }
    }

    fn turn(&mut self, worked: bool) {
        if worked {
            self.in_busy = true;
            return;
        }
        let now = Instant::now();
        if self.in_busy {
            self.busy += now - self.idle_end;
            self.in_busy = false;
        }
        self.idle_end = now;
    }

    /// The busy share of the time from the start to `now`.
    fn share(&self, now: Instant) -> f64 {
        let open = if self.in_busy {
            now - self.idle_end
        } else {
            Duration::ZERO
        };
        (self.busy + open).as_secs_f64() / (now - self.start).as_secs_f64().max(1e-9)
    }
}

/// The stream with a pinned thread per node, each polling only its own, for `seconds`:
/// Sends as credit-based applications send them (never more in flight than the receiver has
/// receives posted, each receive posted again as it completes), or 64 KiB Writes with
/// `WRITES` in flight, each posted as one completes. Ends with nothing in flight.
fn stream<P: Port + Send + 'static>(
    mut a: End<P>,
    mut b: End<P>,
    op: RateOp,
    seconds: f64,
    cores: [usize; 2],
) -> (End<P>, Moved) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let stop = Arc::new(AtomicBool::new(false));
    // Receives completed at B (Sends only).
    let received = Arc::new(AtomicU64::new(0));
    if op == RateOp::Sends {
        for slot in 0..STREAM_RECVS {
            b.post_recv_slot(slot);
        }
    }
    let peer = (b.stag, b.buf.as_ptr() as u64);
    let (stop_b, received_b) = (stop.clone(), received.clone());
    let receiver = std::thread::spawn(move || {
        pin(cores[1]);
        let mut wcs = vec![WorkCompletion::default(); 256];
        let mut load = Load::new();
        let mut total = 0u64;
        while !stop_b.load(Ordering::Relaxed) {
            let mut worked = b.poll();
            let n = b.reap(&mut wcs);
            for wc in &wcs[..n] {
                b.post_recv_slot(wc.wr_id as usize);
            }
            if n > 0 {
                worked = true;
                total += n as u64;
                // SYNC POINT: Release pairs with the sender's Acquire: its credit.
                received_b.store(total, Ordering::Release);
            }
            load.turn(worked);
        }
        let share = load.share(Instant::now());
        (b, share)
    });
    pin(cores[0]);
    let mut wcs = vec![WorkCompletion::default(); 256];
    let mut load = Load::new();
    let start = load.start;
    let deadline = start + Duration::from_secs_f64(seconds);
    // Posted, and Writes completed at A (each signalled; of the Sends every 64th is, so
    // that their completions are reaped as they go, but B's receives count them).
    let (mut posted, mut completed) = (0u64, 0u64);
    // At the deadline: messages that had arrived, seconds, the sender's busy share.
    let mut counted: Option<(u64, f64, f64)> = None;
    let mut turns: u64 = 0;
    // Started at the deadline: the drain after it.
    let mut drain: Option<Patience> = None;
    loop {
        let mut worked = false;
        let in_flight_limit = match op {
            RateOp::Sends => received.load(Ordering::Acquire) + STREAM_RECVS as u64,
            RateOp::Writes => completed + WRITES as u64,
        };
        while counted.is_none() && posted < in_flight_limit {
            let wr = match op {
                RateOp::Sends => {
                    let mut wr = a.send_wr(posted, (posted % STREAM_RECVS as u64) as usize);
                    wr.signaled = posted % 64 == 63;
                    wr
                }
                RateOp::Writes => a.write_wr(posted, (posted % WRITES as u64) as usize, peer),
            };
            match a.post(wr) {
                Ok(()) => posted += 1,
                Err(iwarp_engine::VerbsError::QueueFull) => break,
                Err(e) => panic!("post: {e:?}"),
            }
            worked = true;
        }
        worked |= a.poll();
        let n = a.reap(&mut wcs);
        if n > 0 {
            worked = true;
            if op == RateOp::Writes {
                completed += n as u64;
            }
        }
        load.turn(worked);
        turns += 1;
        if turns.is_multiple_of(1024) && receiver.is_finished() {
            // It only ends when told to: it failed, and its panic says why.
            let _ = receiver.join();
            eprintln!("node-pair: the receiving thread stopped");
            std::process::exit(1);
        }
        if counted.is_none() && turns.is_multiple_of(16) {
            let now = Instant::now();
            if now >= deadline {
                // What arrived by the deadline is what counts; then the rest drains.
                let arrived = match op {
                    RateOp::Sends => received.load(Ordering::Acquire),
                    RateOp::Writes => completed,
                };
                counted = Some((arrived, (now - start).as_secs_f64(), load.share(now)));
            }
        }
        let drained = match op {
            RateOp::Sends => received.load(Ordering::Acquire) == posted,
            RateOp::Writes => completed == posted,
        };
        if counted.is_some() && drained {
            break;
        }
        if counted.is_some() {
            drain
                .get_or_insert_with(|| Patience::new("the drain after the deadline"))
                .turn();
        }
    }
    let (messages, seconds, sender) = counted.unwrap_or_default();
    // Writes: a Read behind them returns only once they are placed at B.
    if op == RateOp::Writes {
        a.post(a.fence_read(peer)).expect("post read");
        let mut wait = Patience::new("the closing Read");
        while a.reap(&mut wcs) == 0 {
            a.poll();
            wait.turn();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (_b, receiver) = receiver.join().expect("receiver thread");
    let units = match op {
        RateOp::Sends => messages,
        RateOp::Writes => messages * WRITE_LEN as u64,
    };
    let moved = Moved {
        units,
        messages,
        seconds,
        busy: Some([sender, receiver]),
    };
    (a, moved)
}

struct Streams {
    qps: usize,
    window: usize,
    size: usize,
    seconds: f64,
    tcp: TcpSettings,
}

/// A zeroed region of `len` octets registered in `pd` at its own address, that lives for the
/// run: its STag and first octet.
fn leaked_region(rnic: &mut Rnic, pd: PdId, len: usize) -> (u32, NonNull<u8>) {
    let mem = Box::leak(vec![0u64; len.div_ceil(8)].into_boxed_slice());
    let buf = NonNull::new(mem.as_mut_ptr() as *mut u8).expect("non-null");
    // SAFETY: leaked, so valid for the whole run; only the thread that owns `rnic` places
    // into it or reads it.
    let stag = unsafe { rnic.register_mr(pd, buf, len, Access::ALL, buf.as_ptr() as u64) }
        .expect("valid rights");
    (stag, buf)
}

/// `streams`: B writes into A on every one of `qps` QP pairs, `window` Writes of `size`
/// octets in flight on each, each posted again on its QP as it completes; both nodes polled
/// in turn on this thread, so the rate is what one core does running both ends, every QP
/// busy. Prints the Writes per second, the frames each side sent per Write, and the
/// slowest QP's Writes against the fastest's.
fn streams<P: Port>(pa: P, pb: P, link: &str, run: &Streams) {
    let (ip_a, ip_b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let mut a = End::new(pa, ip_a, run.tcp, LEN, false);
    let mut b = End::new(pb, ip_b, run.tcp, LEN, false);
    let caps = QpCaps {
        sq_depth: run.window,
        rq_depth: 1,
        srq: None,
    };
    let pairs = connect_pairs(&mut a, &mut b, ip_a, run.qps, caps, run.qps * run.window);
    // Each QP writes a slot of its own on A, from the same octets on B.
    let len = run.size;
    let (dst_stag, dst) = leaked_region(&mut a.rnic, pairs.pd.0, run.qps * len);
    let (src_stag, src) = leaked_region(&mut b.rnic, pairs.pd.1, len);
    let (dst_va, src_va) = (dst.as_ptr() as u64, src.as_ptr() as u64);
    let write = |k: usize| {
        let op = SendOp::Write {
            remote_stag: dst_stag,
            remote_to: dst_va + (k * len) as u64,
        };
        let sge = Sge {
            stag: src_stag,
            to: src_va,
            len: len as u32,
        };
        SendWr::new(k as u64, op, &[sge])
    };
    for (k, &(_, qb)) in pairs.qps.iter().enumerate() {
        for _ in 0..run.window {
            b.rnic.post_send(qb, write(k)).expect("post");
        }
    }
    let mut wcs = vec![WorkCompletion::default(); 256];
    // Writes completed on each QP, to tell whether every stream moves.
    let mut per_qp = vec![0u64; run.qps];
    // The application empties the CQ each step, as one on cores of its own keeps up with
    // the daemon: a step that reposted at most one batch of 256 would hold back the
    // windows of every QP past 256 / window (64 at window 4), and the rate would be the
    // benchmark's.
    let mut step = |a: &mut End<P>, b: &mut End<P>, per_qp: &mut [u64]| -> u64 {
        a.poll();
        b.poll();
        let mut done = 0;
        loop {
            let n = b.rnic.poll_cq(pairs.cq.1, &mut wcs).expect("poll CQ");
            for wc in &wcs[..n] {
                assert_eq!(wc.status, iwarp_engine::Status::Success, "{wc:?}");
                let k = wc.wr_id as usize;
                per_qp[k] += 1;
                b.rnic.post_send(pairs.qps[k].1, write(k)).expect("post");
            }
            done += n as u64;
            if n < wcs.len() {
                return done;
            }
        }
    };
    let warmup = Instant::now();
    while warmup.elapsed().as_secs_f64() < run.seconds / 4.0 {
        step(&mut a, &mut b, &mut per_qp);
    }
    let (frames_b, fpdus_b) = (b.node.counters().tx_frames, b.node.counters().fpdus_tx);
    let frames_a = a.node.counters().tx_frames;
    let t = Instant::now();
    let mut writes = 0u64;
    per_qp.fill(0);
    while t.elapsed().as_secs_f64() < run.seconds {
        writes += step(&mut a, &mut b, &mut per_qp);
    }
    let secs = t.elapsed().as_secs_f64();
    let (cb, ca) = (b.node.counters(), a.node.counters());
    let per = |n: u64| n as f64 / writes.max(1) as f64;
    let (slowest, fastest) = (
        per_qp.iter().copied().min().unwrap_or(0),
        per_qp.iter().copied().max().unwrap_or(0),
    );
    println!(
        "{} QP pairs streaming {} B RDMA Writes, {} in flight on each, one thread, {link}: \
         {:.3} M writes/s, {:.2} Gbit/s; per Write {:.3} frames and {:.3} FPDUs sent, \
         {:.3} frames back; the slowest QP at {:.2} of the fastest",
        run.qps,
        len,
        run.window,
        writes as f64 / secs / 1e6,
        (writes * len as u64 * 8) as f64 / secs / 1e9,
        per(cb.tx_frames - frames_b),
        per(cb.fpdus_tx - fpdus_b),
        per(ca.tx_frames - frames_a),
        slowest as f64 / fastest.max(1) as f64,
    );
}
