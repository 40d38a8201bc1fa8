//! Helpers shared by the node tests: an RNIC end with a QP, registered memory, and
//! polling loops.
#![allow(dead_code)]

pub mod streams;

use iwarp_engine::{Access, QpCaps, QpId, Rnic, SendOp, SendWr, Sge, Status, WorkCompletion};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, Node, TcpSettings};
use iwarpd::port::Port;
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

pub struct Mem {
    pub ptr: NonNull<u8>,
    pub len: usize,
    pub stag: u32,
}

impl Mem {
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            stag: self.stag,
            to: self.ptr.as_ptr() as u64 + off as u64,
            len: len as u32,
        }
    }
    pub fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        // SAFETY: in bounds of a leaked buffer; the engine is not running concurrently.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len).to_vec() }
    }
    pub fn fill(&self, seed: u8) {
        for i in 0..self.len {
            // SAFETY: as in `bytes`.
            unsafe { *self.ptr.as_ptr().add(i) = seed.wrapping_add((i * 13 + i / 509) as u8) };
        }
    }
    pub fn u64_at(&self, off: usize) -> u64 {
        // SAFETY: in bounds and 8-aligned (buffers are u64 arrays).
        unsafe { *(self.ptr.as_ptr().add(off) as *const u64) }
    }
}

/// A node and its engine, side by side as a worker holds them.
pub struct End<P: Port> {
    pub node: Node<P>,
    pub rnic: Rnic,
    pub qp: iwarp_engine::QpId,
    pub cq: iwarp_engine::CqId,
    pub pd: iwarp_engine::PdId,
    pub conn: usize,
}

impl<P: Port> End<P> {
    pub fn new(port: P, ip: Ipv4Addr) -> End<P> {
        End::with_tcp(port, ip, TcpSettings::default())
    }
    pub fn with_tcp(port: P, ip: Ipv4Addr, tcp: TcpSettings) -> End<P> {
        let node = Node::new(port, ip, 24, tcp);
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let cq = rnic.create_cq(4096);
        let qp = rnic
            .create_qp(
                pd,
                cq,
                cq,
                QpCaps {
                    sq_depth: 256,
                    rq_depth: 256,
                    srq: None,
                },
            )
            .unwrap();
        End {
            node,
            rnic,
            qp,
            cq,
            pd,
            conn: usize::MAX,
        }
    }
    pub fn mem(&mut self, len: usize, access: Access) -> Mem {
        let words = Box::leak(vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice());
        let ptr = NonNull::new(words.as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: leaked, valid for the rest of the test.
        let stag = unsafe {
            self.rnic
                .register_mr(self.pd, ptr, len, access, ptr.as_ptr() as u64)
        }
        .expect("the test's rights are valid");
        Mem { ptr, len, stag }
    }
    /// Posts RDMA Write `id` of `src` (this end's memory) to the peer's `dst` at `dst_off`.
    pub fn post_write(&mut self, id: u64, src: Sge, dst: &Mem, dst_off: usize) {
        let op = SendOp::Write {
            remote_stag: dst.stag,
            remote_to: dst.sge(dst_off, 0).to,
        };
        self.rnic
            .post_send(self.qp, SendWr::new(id, op, &[src]))
            .unwrap();
    }
    pub fn wcs(&mut self) -> Vec<WorkCompletion> {
        let mut out = vec![WorkCompletion::default(); 64];
        let n = self.rnic.poll_cq(self.cq, &mut out).unwrap();
        out.truncate(n);
        out
    }
}

pub const A_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 11);

/// TCP settings for tests that count resends as the port's losses: a user timeout no pause of
/// a loaded machine reaches, and a retransmission floor of a second (a debug build's reader
/// may take hundreds of milliseconds to drain a socket buffer), so that a resend is a frame
/// the port lost, not the test's speed.
pub fn patient_tcp() -> TcpSettings {
    TcpSettings {
        user_timeout: Duration::from_secs(600),
        min_rto_us: 1_000_000,
        ..TcpSettings::default()
    }
}

pub fn pair<P: Port, Q: Port>(pa: P, pb: Q, settings: Settings) -> (End<P>, End<Q>) {
    pair_tcp(pa, pb, settings, TcpSettings::default())
}

pub fn pair_tcp<P: Port, Q: Port>(
    pa: P,
    pb: Q,
    settings: Settings,
    tcp: TcpSettings,
) -> (End<P>, End<Q>) {
    pair_tcps(pa, pb, settings, tcp, tcp)
}

/// [`pair_tcp`] with TCP settings of each end's own.
pub fn pair_tcps<P: Port, Q: Port>(
    pa: P,
    pb: Q,
    settings: Settings,
    tcp_a: TcpSettings,
    tcp_b: TcpSettings,
) -> (End<P>, End<Q>) {
    let mut a = End::with_tcp(pa, A_IP, tcp_a);
    let mut b = End::with_tcp(pb, B_IP, tcp_b);
    a.conn = a.node.listen(7174, a.qp, settings.clone()).unwrap();
    b.conn = b.node.connect(A_IP, 7174, 40000, b.qp, settings).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(a.node.state(a.conn) == Some(&ConnState::Rts)
        && b.node.state(b.conn) == Some(&ConnState::Rts))
    {
        assert!(
            Instant::now() < deadline,
            "setup: {:?} / {:?}",
            a.node.state(a.conn),
            b.node.state(b.conn)
        );
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    (a, b)
}

/// `n` connections from B to A, the first on each end's own QP and the others on new QPs
/// of `caps`; A listens on `port`, `port + 1`, ..., B connects from `local_port` on. Polls
/// both nodes until every one is in RTS. Returns (A's connection, B's connection, B's QP).
pub fn connect_many<P: Port, Q: Port>(
    a: &mut End<P>,
    b: &mut End<Q>,
    n: usize,
    caps: QpCaps,
    port: u16,
    local_port: u16,
) -> Vec<(usize, usize, QpId)> {
    let mut conns = Vec::new();
    for i in 0..n {
        let (qa, qb) = if i == 0 {
            (a.qp, b.qp)
        } else {
            let qa = a.rnic.create_qp(a.pd, a.cq, a.cq, caps).unwrap();
            let qb = b.rnic.create_qp(b.pd, b.cq, b.cq, caps).unwrap();
            (qa, qb)
        };
        let ca = a
            .node
            .listen(port + i as u16, qa, Settings::default())
            .unwrap();
        let cb = b
            .node
            .connect(
                A_IP,
                port + i as u16,
                local_port + i as u16,
                qb,
                Settings::default(),
            )
            .unwrap();
        conns.push((ca, cb, qb));
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    while !conns.iter().all(|&(ca, cb, _)| {
        a.node.state(ca) == Some(&ConnState::Rts) && b.node.state(cb) == Some(&ConnState::Rts)
    }) {
        assert!(Instant::now() < deadline, "setup of {n} connections");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    conns
}

/// Polls both nodes until `done` or the deadline.
pub fn until<P: Port, Q: Port>(
    a: &mut End<P>,
    b: &mut End<Q>,
    secs: u64,
    mut done: impl FnMut(&mut End<P>, &mut End<Q>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done(a, b) {
        assert!(Instant::now() < deadline, "timed out");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
}

/// Polls both nodes for `d` of real time.
pub fn poll_for<P: Port, Q: Port>(a: &mut End<P>, b: &mut End<Q>, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
}

/// B RDMA-Writes `len` octets (a pattern from `seed`) into A's memory, waits for its
/// completion and for the last octets to be placed, and checks every octet.
pub fn write_b_to_a<P: Port, Q: Port>(a: &mut End<P>, b: &mut End<Q>, len: usize, seed: u8) {
    let a_mem = a.mem(len, Access::ALL);
    let b_mem = b.mem(len, Access::ALL);
    b_mem.fill(seed);
    b.post_write(1, b_mem.sge(0, len), &a_mem, 0);
    let mut done = false;
    until(a, b, 60, |_, b| {
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            done = true;
        }
        // Segments are placed in order: the last 4 KiB arrive last.
        done && a_mem.bytes(len - 4096, 4096) == b_mem.bytes(len - 4096, 4096)
    });
    assert!(
        a_mem.bytes(0, len) == b_mem.bytes(0, len),
        "placed bytes differ"
    );
}

pub fn segment_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(name).tempdir().unwrap()
}

/// Runs `cmd` with `sh -c`; whether it succeeded.
pub fn sh(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

/// A bridge with two TAP ports; removed (with any loss rule) when dropped.
pub struct Bridge {
    name: &'static str,
    table: Option<&'static str>,
}

impl Bridge {
    pub fn new(name: &'static str, taps: &[&str]) -> Bridge {
        let _ = sh(&format!("ip link del {name} 2>/dev/null"));
        assert!(
            sh(&format!(
                "ip link add {name} type bridge && ip link set {name} up"
            )),
            "bridge"
        );
        for t in taps {
            assert!(
                sh(&format!(
                    "ip link set {t} master {name} && ip link set {t} up"
                )),
                "tap {t}"
            );
        }
        Bridge { name, table: None }
    }

    /// Drops one forwarded frame in a hundred, at random, both ways.
    pub fn lossy(&mut self, table: &'static str) {
        assert!(sh(&format!(
            "nft add table bridge {table} && \
             nft add chain bridge {table} lossy '{{ type filter hook forward priority 0; }}' && \
             nft add rule bridge {table} lossy numgen random mod 100 0 drop"
        )));
        self.table = Some(table);
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(t) = self.table {
            let _ = sh(&format!("nft delete table bridge {t}"));
        }
        let _ = sh(&format!("ip link del {}", self.name));
    }
}
