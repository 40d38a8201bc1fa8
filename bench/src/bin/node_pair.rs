//! The frame path's own cost: two iwarpd nodes (smoltcp TCP and the RNIC engine, as a
//! worker runs them) on one thread, joined by an in-memory Ethernet link, RDMA Write 64 B
//! ping-pong. No scheduler, no second core, no system call: what remains is the software a
//! frame crosses on its way through a daemon (port, TCP, MPA/DDP/RDMAP, placement) plus the
//! post that starts it, twice per round trip. Percentiles of the round trip and of one hop
//! (half of it), in microseconds.
//!
//!     cargo run --release -p iwarp-bench --bin node-pair [-- ITERATIONS [ACK_DELAY_US]]
//!
//! With an ACK delay (`tcp.ack_delay_us`) the receiver's ACK rides its answer instead of
//! going out alone.

use hdrhistogram::Histogram;
use iwarp_engine::{Access, QpCaps, SendOp, SendWr, Sge, WorkCompletion};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, Node, TcpSettings};
use iwarpd::port::memory::MemoryPort;
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

const LEN: usize = 64;

struct End {
    node: Node<MemoryPort>,
    qp: u32,
    cq: u32,
    stag: u32,
    buf: NonNull<u8>,
    conn: usize,
}

impl End {
    fn new(port: MemoryPort, ip: Ipv4Addr, tcp: TcpSettings) -> End {
        let mut node = Node::new(port, ip, 24, tcp);
        let pd = node.rnic.alloc_pd();
        let cq = node.rnic.create_cq(1024);
        let caps = QpCaps {
            sq_depth: 256,
            rq_depth: 256,
            srq: None,
        };
        let qp = node.rnic.create_qp(pd, cq, cq, caps).expect("QP");
        // Two halves: what this end sends from, and what the other end writes into.
        let mem = Box::leak(vec![0u64; 2 * LEN / 8].into_boxed_slice());
        let buf = NonNull::new(mem.as_mut_ptr() as *mut u8).expect("non-null");
        let va = buf.as_ptr() as u64;
        // SAFETY: leaked, so valid for the whole run.
        let stag = unsafe { node.rnic.register_mr(pd, buf, 2 * LEN, Access::ALL, va) };
        End {
            node,
            qp,
            cq,
            stag,
            buf,
            conn: usize::MAX,
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
        let sge = Sge {
            stag: self.stag,
            to: self.buf.as_ptr() as u64,
            len: LEN as u32,
        };
        let op = SendOp::Write {
            remote_stag: peer_stag,
            remote_to: peer_va + LEN as u64,
        };
        self.node
            .rnic
            .post_send(self.qp, SendWr::new(u64::from(tag), op, &[sge]))
            .expect("post");
    }

    fn reap(&mut self, wcs: &mut [WorkCompletion]) {
        let n = self.node.rnic.poll_cq(self.cq, wcs).expect("poll CQ");
        assert!(wcs[..n]
            .iter()
            .all(|w| w.status == iwarp_engine::Status::Success));
    }
}

fn main() {
    let iterations: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let ack_us: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let tcp = TcpSettings {
        ack_delay: Duration::from_micros(ack_us),
        ..TcpSettings::default()
    };
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
    let (ip_a, ip_b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let mut a = End::new(pa, ip_a, tcp);
    let mut b = End::new(pb, ip_b, tcp);
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
        a.node.poll();
        b.node.poll();
    }
    let (a_va, b_va) = (a.buf.as_ptr() as u64, b.buf.as_ptr() as u64);
    let mut wcs = vec![WorkCompletion::default(); 64];
    let mut rtt = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
    let (frames0, warmup) = (a.node.counters().tx_frames, iterations / 10);
    for i in 0..warmup + iterations {
        let tag = (i % 255) as u8 + 1;
        let start = Instant::now();
        a.write(b.stag, b_va, tag);
        while b.landed() != tag {
            a.node.poll();
            b.node.poll();
        }
        b.write(a.stag, a_va, tag);
        while a.landed() != tag {
            b.node.poll();
            a.node.poll();
        }
        let ns = start.elapsed().as_nanos() as u64;
        if i >= warmup {
            rtt.record(ns.max(1)).expect("record");
        }
        a.reap(&mut wcs);
        b.reap(&mut wcs);
    }
    let frames = a.node.counters().tx_frames - frames0;
    let us =
        |h: &Histogram<u64>, q: f64, div: u64| h.value_at_quantile(q) as f64 / 1e3 / div as f64;
    println!(
        "node-pair: RDMA Write {LEN} B ping-pong, two nodes on one thread, {iterations} round \
         trips, ACK delay {ack_us} us ({:.1} frames from A per round trip)",
        frames as f64 / (warmup + iterations) as f64
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
