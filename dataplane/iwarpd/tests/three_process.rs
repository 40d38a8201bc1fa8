//! The three-process RNIC with real processes: two `iwarpd` on the embedded Unix-socket
//! Ethernet, an `iwarp-control` beside each, and this test as the application on both,
//! talking control's socket protocol directly and the shared rings through iwarp-verbs'
//! fast path. Connection setup runs MPA in control over the daemon's relay; the data path
//! runs in the daemons.

use iwarp_abi::app::{decode_to_app, encode_request, message_len, ToApp};
use iwarp_abi::app::{ConnSettings, ConnectRequest, Established, Event, QpAttrs, Reply, Request};
use iwarp_abi::command::ShmPath;
use iwarp_abi::doorbell;
use iwarp_abi::id::{CqId, PdId, QpId, Stag};
use iwarp_abi::qp::{QpState, Terminated};
use iwarp_abi::ring;
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use iwarp_abi::wqe::{access, Cqe, RecvWqe, SendWqe};
use iwarp_testkit::{self as testkit, Proc};
use iwarp_verbs::{
    CompletionQueue, MemoryRegion, QueuePair, RecvWr, SendWr, Sg, WcStatus, WrOpcode,
};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Endpoint {
    runtime: PathBuf,
    _daemon: Proc,
    control: Proc,
    sock: UnixStream,
    /// Bytes read from control beyond the last whole message.
    inbuf: Vec<u8>,
    events: Vec<Event>,
}

/// iwarp-control on runtime directory `rt`, and an application connection to it.
fn start_control(rt: &Path) -> (Proc, UnixStream) {
    let control = testkit::start_control(rt);
    let t = Instant::now();
    let sock = loop {
        match UnixStream::connect(rt.join("control.sock")) {
            Ok(s) => break s,
            Err(_) if t.elapsed() < testkit::START => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("iwarp-control never listened at {}: {e}", rt.display()),
        }
    };
    (control, sock)
}

fn start(dir: &Path, name: &str, n: u8) -> Endpoint {
    start_with(dir, name, n, &[])
}

/// [`start`] with more arguments for `iwarpd`.
fn start_with(dir: &Path, name: &str, n: u8, extra: &[&str]) -> Endpoint {
    let rt = dir.join(name);
    let args = [&["--stage-timing"], extra].concat();
    let daemon = testkit::start_daemon(dir, name, n, 99, &args);
    let (control, sock) = start_control(&rt);
    Endpoint {
        runtime: rt,
        _daemon: daemon,
        control,
        sock,
        inbuf: Vec::new(),
        events: Vec::new(),
    }
}

impl Endpoint {
    fn recv(&mut self) -> ToApp {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(n) = message_len(&self.inbuf).unwrap() {
                let r = decode_to_app(&self.inbuf[4..n]).unwrap();
                self.inbuf.drain(..n);
                return r;
            }
            let k = self.sock.read(&mut chunk).unwrap();
            assert!(k > 0, "control closed the socket");
            self.inbuf.extend_from_slice(&chunk[..k]);
        }
    }

    fn call(&mut self, r: &Request) -> Reply {
        self.sock.write_all(&encode_request(r)).unwrap();
        loop {
            match self.recv() {
                ToApp::Event(e) => self.events.push(e),
                ToApp::Reply(r) => return r,
            }
        }
    }

    fn id(&mut self, r: &Request) -> u32 {
        match self.call(r) {
            Reply::Id(i) => i,
            other => panic!("{r:?}: {other:?}"),
        }
    }

    fn event(&mut self) -> Event {
        if !self.events.is_empty() {
            return self.events.remove(0);
        }
        self.sock
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        match self.recv() {
            ToApp::Event(e) => e,
            other => panic!("expected an event: {other:?}"),
        }
    }
}

impl Endpoint {
    /// Reads events until one matches.
    fn event_matching(&mut self, what: &str, f: impl Fn(&Event) -> bool) -> Event {
        for _ in 0..16 {
            let e = self.event();
            if f(&e) {
                return e;
            }
        }
        panic!("no {what} event")
    }

    /// The next connection-setup event, past the ends and errors of earlier ones.
    fn setup_event(&mut self) -> Event {
        loop {
            match self.event() {
                Event::Disconnected { .. }
                | Event::QpTerminated(_)
                | Event::QpError { .. }
                | Event::CqOverflow { .. } => continue,
                e => return e,
            }
        }
    }
}

fn segment(tag: &str, kind: SegmentKind, bytes: usize) -> Arc<Segment> {
    let name = testkit::unique(tag);
    Arc::new(Segment::create_sealed(&name, kind, bytes, HugePolicy::Off).unwrap())
}

fn path(s: &Segment) -> ShmPath {
    ShmPath::new(s.path().unwrap()).unwrap()
}

/// One side's resources: a CQ, a QP and a registered 64 KiB buffer.
struct Side {
    qp: QueuePair,
    cq: Arc<CompletionQueue>,
    mr: MemoryRegion,
    mem: Arc<Segment>,
    qp_num: u32,
}

fn resources(e: &mut Endpoint, tag: &str) -> Side {
    resources_with(e, tag, 256)
}

fn resources_with(e: &mut Endpoint, tag: &str, cq_depth: u32) -> Side {
    resources_belled(e, tag, cq_depth, None)
}

/// [`resources_with`], the QP's rings naming slot 0 of doorbell segment `bell` when given:
/// the daemon then reads them only when that slot is rung (this `QueuePair` never rings).
fn resources_belled(e: &mut Endpoint, tag: &str, cq_depth: u32, bell: Option<&Segment>) -> Side {
    let pd = e.id(&Request::AllocPd);
    let cq_seg = segment(
        &format!("{tag}-cq"),
        SegmentKind::CompletionQueue,
        ring::ring_bytes::<Cqe>(cq_depth as usize),
    );
    let (_, cq_ring) = ring::init_segment::<Cqe>(&cq_seg, cq_depth as usize).unwrap();
    let cq = e.id(&Request::CreateCq {
        depth: cq_depth,
        ring: path(&cq_seg),
    });
    let cq = Arc::new(CompletionQueue::from_ring(CqId(cq), cq_ring));
    let sq_len = ring::ring_bytes::<SendWqe>(64);
    let sq_seg = segment(
        &format!("{tag}-sq"),
        SegmentKind::SendQueue,
        doorbell::with_bell_ref(sq_len),
    );
    if let Some(b) = bell {
        let r = doorbell::BellRef {
            slot: 0,
            path: path(b),
        };
        assert!(r.write(&sq_seg, sq_len));
    }
    let rq_seg = segment(
        &format!("{tag}-rq"),
        SegmentKind::RecvQueue,
        ring::ring_bytes::<RecvWqe>(64),
    );
    let (sq, _) = ring::init_segment::<SendWqe>(&sq_seg, 64).unwrap();
    let (rq, _) = ring::init_segment::<RecvWqe>(&rq_seg, 64).unwrap();
    let attrs = QpAttrs {
        pd: PdId(pd),
        send_cq: cq.cq_num(),
        recv_cq: cq.cq_num(),
        srq: None,
        sq_depth: 64,
        rq_depth: 64,
        max_sge: 4,
        max_inline: 64,
        ird: 8,
        ord: 8,
    };
    let qp_num = e.id(&Request::CreateQp {
        attrs,
        sq: path(&sq_seg),
        rq: path(&rq_seg),
    });
    let qp = QueuePair::from_rings(QpId(qp_num), sq, Some(rq), cq.clone(), cq.clone(), 4, 64);
    let mem = segment(&format!("{tag}-mem"), SegmentKind::Memory, 1 << 16);
    let seg = e.id(&Request::AttachSegment { path: path(&mem) });
    let stag = e.id(&Request::RegMr {
        pd: PdId(pd),
        access: access::LOCAL_WRITE
            | access::REMOTE_READ
            | access::REMOTE_WRITE
            | access::REMOTE_ATOMIC,
        segment: seg,
        offset: 0,
        len: 1 << 16,
    });
    Side {
        qp,
        cq,
        mr: MemoryRegion::from_registration(Stag(stag), 0, 1 << 16),
        mem,
        qp_num,
    }
}

fn wait_cqe(cq: &CompletionQueue) -> iwarp_verbs::WorkCompletion {
    let t = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one().unwrap() {
            return wc;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no completion");
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn mem_write(s: &Segment, off: usize, b: &[u8]) {
    // SAFETY: test-only; the range lies in the data area and no work request uses it now.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), s.data().as_ptr().add(off), b.len());
    }
}

fn mem_read(s: &Segment, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(s.data().as_ptr().add(off), v.as_mut_ptr(), len) };
    v
}

/// Two endpoints, one QP each, connected: A initiates with `sa`, B accepts with `sb`.
/// Returns the Established events (A's, B's).
struct Pair {
    a: Endpoint,
    b: Endpoint,
    sa: Side,
    sb: Side,
    ea: Event,
    eb: Event,
    _dir: tempfile::TempDir,
}

fn pair(port: u16, set_a: ConnSettings, set_b: ConnSettings) -> Pair {
    pair_with(port, set_a, set_b, &[])
}

/// [`pair`] with more arguments for both `iwarpd`s.
fn pair_with(port: u16, set_a: ConnSettings, set_b: ConnSettings, extra: &[&str]) -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let mut a = start_with(dir.path(), "a", 1, extra);
    let mut b = start_with(dir.path(), "b", 2, extra);
    let sa = resources(&mut a, "a");
    let sb = resources(&mut b, "b");
    let (ea, eb) = connect(&mut a, &mut b, &sa, &sb, port, set_a, set_b);
    Pair {
        a,
        b,
        sa,
        sb,
        ea,
        eb,
        _dir: dir,
    }
}

/// B listens on `port` and accepts A's connection; the Established events of A and B.
fn connect(
    a: &mut Endpoint,
    b: &mut Endpoint,
    sa: &Side,
    sb: &Side,
    port: u16,
    set_a: ConnSettings,
    set_b: ConnSettings,
) -> (Event, Event) {
    assert!(matches!(
        b.call(&Request::Listen {
            port,
            settings: ConnSettings::default()
        }),
        Reply::Done
    ));
    let conn_a = a.id(&Request::Connect {
        qp: QpId(sa.qp_num),
        remote: format!("10.99.0.2:{port}").parse().unwrap(),
        settings: set_a,
    });
    let Event::ConnectRequest(ConnectRequest { conn, .. }) = b.setup_event() else {
        panic!("no connect request")
    };
    assert!(matches!(
        b.call(&Request::Accept {
            conn,
            qp: QpId(sb.qp_num),
            settings: set_b
        }),
        Reply::Done
    ));
    let ea = a.setup_event();
    assert!(
        matches!(ea, Event::Established(Established { conn, .. }) if conn == conn_a),
        "{ea:?}"
    );
    let eb = b.setup_event();
    assert!(
        matches!(eb, Event::Established(Established { .. })),
        "{eb:?}"
    );
    (ea, eb)
}

fn post(qp: &QueuePair, wr_id: u64, op: WrOpcode, mr: &MemoryRegion, offset: u64, len: u32) {
    let sg = [Sg { mr, offset, len }];
    qp.post_send(&SendWr::new(wr_id, op, &sg)).unwrap();
}

fn recv(qp: &QueuePair, wr_id: u64, mr: &MemoryRegion, offset: u64) {
    let sg = [Sg {
        mr,
        offset,
        len: 4096,
    }];
    qp.post_recv(&RecvWr {
        wr_id,
        sg_list: &sg,
    })
    .unwrap();
}

fn ok(cq: &CompletionQueue, wr_id: u64) -> iwarp_verbs::WorkCompletion {
    let wc = wait_cqe(cq);
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
    wc
}

/// Every RDMA operation from `x` to `y`, each with its data checked where it lands.
fn every_operation(x: &Side, y: &Side, seed: u8) {
    let data: Vec<u8> = (0..2000u32).map(|i| (i as u8).wrapping_mul(seed)).collect();
    mem_write(&x.mem, 0, &data);
    // Send and Send with Immediate (RDMAP v2, negotiated by both).
    recv(&y.qp, 10, &y.mr, 0);
    post(&x.qp, 1, WrOpcode::Send, &x.mr, 0, 2000);
    ok(&x.cq, 1);
    assert_eq!(ok(&y.cq, 10).byte_len, 2000);
    assert_eq!(mem_read(&y.mem, 0, 2000), data);
    recv(&y.qp, 11, &y.mr, 4096);
    post(
        &x.qp,
        2,
        WrOpcode::SendWithImm { imm: 0xfeed },
        &x.mr,
        0,
        100,
    );
    ok(&x.cq, 2);
    let wc = ok(&y.cq, 11);
    assert_eq!((wc.byte_len, wc.imm_data), (100, Some(0xfeed)));
    // RDMA Write, and Write with Immediate (RFC 7306), which consumes a receive.
    let at = 8192 + u64::from(seed) * 8;
    post(
        &x.qp,
        3,
        WrOpcode::RdmaWrite {
            rkey: y.mr.stag(),
            remote_addr: at,
        },
        &x.mr,
        0,
        2000,
    );
    ok(&x.cq, 3);
    recv(&y.qp, 12, &y.mr, 4096);
    post(
        &x.qp,
        4,
        WrOpcode::RdmaWriteWithImm {
            rkey: y.mr.stag(),
            remote_addr: at + 4000,
            imm: 0x1234_5678,
        },
        &x.mr,
        0,
        64,
    );
    ok(&x.cq, 4);
    let wc = ok(&y.cq, 12);
    assert_eq!(wc.imm_data, Some(0x1234_5678));
    assert_eq!(mem_read(&y.mem, at as usize, 2000), data);
    assert_eq!(mem_read(&y.mem, at as usize + 4000, 64), data[..64]);
    // RDMA Read back what was written.
    post(
        &x.qp,
        5,
        WrOpcode::RdmaRead {
            rkey: y.mr.stag(),
            remote_addr: at,
        },
        &x.mr,
        20000,
        2000,
    );
    ok(&x.cq, 5);
    assert_eq!(mem_read(&x.mem, 20000, 2000), data);
    // Atomics on an aligned word at 40000 of y: FetchAdd then CmpSwap.
    mem_write(&y.mem, 40000, &100u64.to_le_bytes());
    post(
        &x.qp,
        6,
        WrOpcode::FetchAdd {
            rkey: y.mr.stag(),
            remote_addr: 40000,
            add: 23,
        },
        &x.mr,
        30000,
        8,
    );
    ok(&x.cq, 6);
    assert_eq!(mem_read(&x.mem, 30000, 8), 100u64.to_le_bytes());
    assert_eq!(mem_read(&y.mem, 40000, 8), 123u64.to_le_bytes());
    post(
        &x.qp,
        7,
        WrOpcode::CmpSwap {
            rkey: y.mr.stag(),
            remote_addr: 40000,
            compare: 123,
            swap: 7,
        },
        &x.mr,
        30008,
        8,
    );
    ok(&x.cq, 7);
    assert_eq!(mem_read(&x.mem, 30008, 8), 123u64.to_le_bytes());
    assert_eq!(mem_read(&y.mem, 40000, 8), 7u64.to_le_bytes());
}

#[test]
fn every_operation_both_ways_with_ird_ord_negotiated_per_side() {
    let set_a = ConnSettings {
        ird: 2,
        ord: 6,
        rdmap_v2: true,
        ..ConnSettings::default()
    };
    let set_b = ConnSettings {
        ird: 4,
        ord: 1,
        rdmap_v2: true,
        ..ConnSettings::default()
    };
    let p = pair(7001, set_a, set_b);
    // Each side's ORD is at most the other's IRD (RFC 6581 section 7).
    let Event::Established(Established {
        ird: ird_a,
        ord: ord_a,
        rdmap_version: va,
        ..
    }) = p.ea
    else {
        unreachable!()
    };
    let Event::Established(Established {
        ird: ird_b,
        ord: ord_b,
        rdmap_version: vb,
        ..
    }) = p.eb
    else {
        unreachable!()
    };
    assert_eq!((va, vb), (2, 2), "both asked for RDMAP version 2");
    assert!(
        ord_a <= ird_b && ord_b <= ird_a,
        "a {ird_a}/{ord_a}, b {ird_b}/{ord_b}"
    );
    assert_eq!((ird_a, ord_b), (2, 1));
    every_operation(&p.sa, &p.sb, 3);
    every_operation(&p.sb, &p.sa, 5);
    // More Reads at once than B's ORD of 1: the engine holds them back, all complete.
    for i in 0..6u64 {
        post(
            &p.sb.qp,
            100 + i,
            WrOpcode::RdmaRead {
                rkey: p.sa.mr.stag(),
                remote_addr: 0,
            },
            &p.sb.mr,
            50000 + i * 256,
            256,
        );
    }
    for i in 0..6u64 {
        ok(&p.sb.cq, 100 + i);
    }
    // With stage timing on, each daemon publishes where its busy time went.
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(p.a.runtime.join("stats")).unwrap_or_default();
        let stage = |k: &str| testkit::stat(&text, k).unwrap_or(0);
        let all = [
            "stage_port_ns",
            "stage_tcp_ns",
            "stage_engine_ns",
            "stage_ring_ns",
        ];
        // And each connection's TCP sending side, on a line of its own.
        let conn = text
            .lines()
            .any(|l| l.starts_with("conn core=") && l.contains(" cwnd=") && l.contains(" rtos="));
        if all.iter().all(|k| stage(k) > 0) && conn {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no stage times: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_rejected_connection_carries_its_private_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(dir.path(), "a", 1);
    let mut b = start(dir.path(), "b", 2);
    let sa = resources(&mut a, "a");
    assert!(matches!(
        b.call(&Request::Listen {
            port: 7002,
            settings: ConnSettings::default()
        }),
        Reply::Done
    ));
    a.id(&Request::Connect {
        qp: QpId(sa.qp_num),
        remote: "10.99.0.2:7002".parse().unwrap(),
        settings: ConnSettings::default(),
    });
    let Event::ConnectRequest(ConnectRequest { conn, .. }) = b.event() else {
        panic!("no connect request")
    };
    assert!(matches!(
        b.call(&Request::Reject {
            conn,
            private_data: b"busy, try later".to_vec()
        }),
        Reply::Done
    ));
    match a.event() {
        Event::Rejected { private_data, .. } => assert_eq!(private_data, b"busy, try later"),
        other => panic!("{other:?}"),
    }
}

/// A passive side at its `limits.max_qp` answers a further connection's MPA Request with a
/// reject whose private data names the limit (RFC 5044 section 7.1.2: a Reply with the Rej
/// bit set; MPA has no reason code), and the active side's application is shown it, not a
/// bare reset.
#[test]
fn a_passive_side_at_its_qp_limit_rejects_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(dir.path(), "a", 1);
    // B's control takes one connection at most.
    let rt = dir.path().join("b");
    let daemon = testkit::start_daemon(dir.path(), "b", 2, 99, &[]);
    let cfg = dir.path().join("b-control.toml");
    std::fs::write(&cfg, "[limits]\nmax_qp = 1\n").unwrap();
    let _ = std::fs::remove_file(rt.join("control.sock"));
    let control = Proc(
        std::process::Command::new(testkit::binary("iwarp-control"))
            .arg("--config")
            .arg(&cfg)
            .arg("--runtime-dir")
            .arg(&rt)
            .spawn()
            .expect("spawn iwarp-control"),
    );
    testkit::wait_for(&rt.join("control.sock"));
    let sock = UnixStream::connect(rt.join("control.sock")).unwrap();
    let mut b = Endpoint {
        runtime: rt,
        _daemon: daemon,
        control,
        sock,
        inbuf: Vec::new(),
        events: Vec::new(),
    };
    assert!(matches!(
        b.call(&Request::Listen {
            port: 7010,
            settings: ConnSettings::default()
        }),
        Reply::Done
    ));
    let (first, second) = (resources(&mut a, "lim1"), resources(&mut a, "lim2"));
    a.id(&Request::Connect {
        qp: QpId(first.qp_num),
        remote: "10.99.0.2:7010".parse().unwrap(),
        settings: ConnSettings::default(),
    });
    // The first request waits for B's application: B holds its one connection.
    let Event::ConnectRequest(_) = b.event() else {
        panic!("no connect request")
    };
    let refused = a.id(&Request::Connect {
        qp: QpId(second.qp_num),
        remote: "10.99.0.2:7010".parse().unwrap(),
        settings: ConnSettings::default(),
    });
    match a.event() {
        Event::Rejected { conn, private_data } => {
            assert_eq!(conn, refused);
            assert_eq!(private_data, iwarp_control::conn_manager::LIMIT_REJECT);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_application_that_goes_away_ends_its_peers_connection_with_flushed_work() {
    let mut p = pair(7003, ConnSettings::default(), ConnSettings::default());
    for i in 0..3 {
        recv(&p.sb.qp, 200 + i, &p.sb.mr, 0);
    }
    // A's application exits: its control socket closes (as on SIGKILL).
    drop(p.sa);
    drop(p.a.sock);
    // (B's QP may report its Error first: the stream ended under it.)
    p.b.event_matching("disconnect", |e| matches!(e, Event::Disconnected { .. }));
    for i in 0..3 {
        let wc = wait_cqe(&p.sb.cq);
        assert_eq!((wc.wr_id, wc.status), (200 + i, WcStatus::WrFlushed));
    }
}

#[test]
fn bad_work_requests_get_verbs_statuses_and_the_daemons_keep_serving() {
    let mut p = pair(7004, ConnSettings::default(), ConnSettings::default());
    // A Write to an STag B never registered: B answers with a Terminate (RFC 5041
    // section 7.2: invalid STag), and A's work completes in error.
    post(
        &p.sa.qp,
        1,
        WrOpcode::RdmaWrite {
            rkey: Stag(p.sb.mr.stag().0 ^ 0x100),
            remote_addr: 0,
        },
        &p.sa.mr,
        0,
        64,
    );
    // (The Write completes at A when handed to TCP: iWARP has no acknowledgement.)
    ok(&p.sa.cq, 1);
    let t = Instant::now();
    // Each daemon counts the Terminate in its per-core statistics.
    let counted = |e: &Endpoint, key: &str| {
        let text = std::fs::read_to_string(e.runtime.join("stats")).unwrap_or_default();
        testkit::stat(&text, key).is_some_and(|v| v > 0)
    };
    while !(counted(&p.b, "terminates_sent") && counted(&p.a, "terminates_received")) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "Terminates not counted: a {:?} b {:?}",
            std::fs::read_to_string(p.a.runtime.join("stats")),
            std::fs::read_to_string(p.b.runtime.join("stats"))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Both applications hear of it: the Terminate's cause (DDP layer 1, tagged buffer
    // error 1, invalid STag 0) and which side sent it.
    let qp_a = p.sa.qp_num;
    let e = p.a.event_matching(
        "Terminate",
        |e| matches!(e, Event::QpTerminated(t) if t.qp == QpId(qp_a)),
    );
    assert_eq!(
        e,
        Event::QpTerminated(Terminated {
            qp: QpId(qp_a),
            received: true,
            layer: 1,
            etype: 1,
            code: 0
        })
    );
    let qp_b = p.sb.qp_num;
    p.b.event_matching(
        "Terminate",
        |e| matches!(e, Event::QpTerminated(t) if t.qp == QpId(qp_b) && !t.received),
    );
    // A's QP is in Error now: new work is flushed.
    post(&p.sa.qp, 2, WrOpcode::Send, &p.sa.mr, 0, 8);
    let wc = wait_cqe(&p.sa.cq);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushed));

    // The daemons keep serving: a new pair of QPs on the same endpoints works, and a
    // local SGE past its region completes with a local protection error on it alone.
    let sa2 = resources(&mut p.a, "a2");
    let sb2 = resources(&mut p.b, "b2");
    connect(
        &mut p.a,
        &mut p.b,
        &sa2,
        &sb2,
        7005,
        ConnSettings::default(),
        ConnSettings::default(),
    );
    recv(&sb2.qp, 5, &sb2.mr, 0);
    mem_write(&sa2.mem, 0, b"still serving");
    post(&sa2.qp, 6, WrOpcode::Send, &sa2.mr, 0, 13);
    ok(&sa2.cq, 6);
    assert_eq!(ok(&sb2.cq, 5).byte_len, 13);
    assert_eq!(mem_read(&sb2.mem, 0, 13), b"still serving");
    let past = MemoryRegion::from_registration(sa2.mr.stag(), 0, 1 << 20);
    post(&sa2.qp, 7, WrOpcode::Send, &past, 1 << 17, 100);
    let wc = wait_cqe(&sa2.cq);
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::LocalProtectionError));
}

#[test]
fn an_stag_of_another_pd_and_a_cq_never_polled_get_their_verbs_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(dir.path(), "a", 1);
    let mut b = start(dir.path(), "b", 2);
    let sa = resources(&mut a, "a");
    let other_pd = resources(&mut a, "a-other");
    let sb = resources(&mut b, "b");
    connect(
        &mut a,
        &mut b,
        &sa,
        &sb,
        7006,
        ConnSettings::default(),
        ConnSettings::default(),
    );
    // A local SGE naming a region of another PD: a local protection error.
    post(&sa.qp, 1, WrOpcode::Send, &other_pd.mr, 0, 8);
    let wc = wait_cqe(&sa.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocalProtectionError));
    // A QP whose CQ holds 8 completions (and the engine's 8 more) that nobody polls: 40
    // receives, then Modify QP to Error flushes them all into it, and the CQ overflows; the
    // owner hears of it.
    let small = resources_with(&mut a, "a-small", 8);
    for i in 0..40 {
        recv(&small.qp, 100 + i, &small.mr, 0);
    }
    // The receives reach the daemon before the modify (each turn pumps the rings first).
    std::thread::sleep(Duration::from_millis(50));
    match a.call(&Request::ModifyQp {
        qp: QpId(small.qp_num),
        state: QpState::Error,
    }) {
        Reply::Qp { .. } | Reply::Done => {}
        other => panic!("{other:?}"),
    }
    let cq_num = small.cq.cq_num();
    a.event_matching(
        "CQ overflow",
        |e| matches!(e, Event::CqOverflow { cq } if *cq == cq_num),
    );
}

#[test]
fn a_restarted_control_plane_is_noticed_by_applications_daemon_and_peers() {
    let mut p = pair(7007, ConnSettings::default(), ConnSettings::default());
    recv(&p.sb.qp, 1, &p.sb.mr, 0);
    // A's control plane dies: A's application sees its socket end (never a silent hang).
    p.a.control.0.kill().unwrap();
    let _ = p.a.control.0.wait();
    let mut buf = [0u8; 64];
    p.a.sock
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(
        p.a.sock.read(&mut buf).unwrap(),
        0,
        "EOF for the application"
    );
    // A new control plane attaches to the same daemon: the daemon drops what the old one
    // created, so B's QP sees its connection end with its receive flushed...
    let (control, sock) = start_control(&p.a.runtime);
    p.a.control = control;
    p.a.sock = sock;
    p.a.inbuf.clear();
    p.a.events.clear();
    p.b.event_matching("disconnect", |e| matches!(e, Event::Disconnected { .. }));
    let wc = wait_cqe(&p.sb.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WrFlushed));
    // ...and the new control plane serves applications from a clean daemon.
    let sa = resources(&mut p.a, "a-again");
    let sb = resources(&mut p.b, "b-again");
    connect(
        &mut p.a,
        &mut p.b,
        &sa,
        &sb,
        7008,
        ConnSettings::default(),
        ConnSettings::default(),
    );
    recv(&sb.qp, 2, &sb.mr, 0);
    post(&sa.qp, 3, WrOpcode::Send, &sa.mr, 0, 16);
    ok(&sa.cq, 3);
    ok(&sb.cq, 2);
}

#[test]
fn two_endpoints_connect_through_control_and_move_data_through_the_daemons() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(dir.path(), "a", 1);
    let mut b = start(dir.path(), "b", 2);
    let sa = resources(&mut a, "a");
    let sb = resources(&mut b, "b");

    assert!(matches!(
        b.call(&Request::Listen {
            port: 7000,
            settings: ConnSettings::default()
        }),
        Reply::Done
    ));
    let conn_a = a.id(&Request::Connect {
        qp: QpId(sa.qp_num),
        remote: "10.99.0.2:7000".parse().unwrap(),
        settings: ConnSettings {
            private_data: b"hello".to_vec(),
            ..ConnSettings::default()
        },
    });
    let Event::ConnectRequest(ConnectRequest {
        conn, private_data, ..
    }) = b.event()
    else {
        panic!("no connect request")
    };
    assert_eq!(private_data, b"hello");
    assert!(matches!(
        b.call(&Request::Accept {
            conn,
            qp: QpId(sb.qp_num),
            settings: ConnSettings::default()
        }),
        Reply::Done
    ));
    let ea = a.event();
    assert!(
        matches!(ea, Event::Established(Established { conn, .. }) if conn == conn_a),
        "{ea:?}"
    );
    let eb = b.event();
    assert!(
        matches!(eb, Event::Established(Established { .. })),
        "{eb:?}"
    );

    // Send: B posts a receive, A sends.
    let rsg = [Sg {
        mr: &sb.mr,
        offset: 0,
        len: 4096,
    }];
    sb.qp
        .post_recv(&RecvWr {
            wr_id: 1,
            sg_list: &rsg,
        })
        .unwrap();
    mem_write(&sa.mem, 0, b"a message through three processes");
    let ssg = [Sg {
        mr: &sa.mr,
        offset: 0,
        len: 33,
    }];
    sa.qp
        .post_send(&SendWr::new(2, WrOpcode::Send, &ssg))
        .unwrap();
    let wc = wait_cqe(&sa.cq);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    let wc = wait_cqe(&sb.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 33)
    );
    assert_eq!(
        mem_read(&sb.mem, 0, 33),
        b"a message through three processes"
    );

    // RDMA Write A -> B at offset 8192, then Read it back into A at 16384.
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    mem_write(&sa.mem, 4096, &payload);
    let wsg = [Sg {
        mr: &sa.mr,
        offset: 4096,
        len: 3000,
    }];
    sa.qp
        .post_send(&SendWr::new(
            3,
            WrOpcode::RdmaWrite {
                rkey: sb.mr.stag(),
                remote_addr: 8192,
            },
            &wsg,
        ))
        .unwrap();
    assert_eq!(wait_cqe(&sa.cq).status, WcStatus::Success);
    let rsg = [Sg {
        mr: &sa.mr,
        offset: 16384,
        len: 3000,
    }];
    sa.qp
        .post_send(&SendWr::new(
            4,
            WrOpcode::RdmaRead {
                rkey: sb.mr.stag(),
                remote_addr: 8192,
            },
            &rsg,
        ))
        .unwrap();
    let wc = wait_cqe(&sa.cq);
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::Success));
    assert_eq!(mem_read(&sb.mem, 8192, 3000), payload);
    assert_eq!(mem_read(&sa.mem, 16384, 3000), payload);
}

#[test]
fn a_corrupted_ring_entry_completes_in_its_turn_and_the_daemon_keeps_serving() {
    let mut p = pair(7009, ConnSettings::default(), ConnSettings::default());
    // A second QP of A's application whose SQ ring this test writes by hand.
    let e = &mut p.a;
    let pd = e.id(&Request::AllocPd);
    let cq_seg = segment(
        "raw-cq",
        SegmentKind::CompletionQueue,
        ring::ring_bytes::<Cqe>(16),
    );
    let (_, cq_ring) = ring::init_segment::<Cqe>(&cq_seg, 16).unwrap();
    let cq = e.id(&Request::CreateCq {
        depth: 16,
        ring: path(&cq_seg),
    });
    let cq = CompletionQueue::from_ring(CqId(cq), cq_ring);
    let sq_seg = segment(
        "raw-sq",
        SegmentKind::SendQueue,
        ring::ring_bytes::<SendWqe>(16),
    );
    let rq_seg = segment(
        "raw-rq",
        SegmentKind::RecvQueue,
        ring::ring_bytes::<RecvWqe>(16),
    );
    let (mut sq, _) = ring::init_segment::<SendWqe>(&sq_seg, 16).unwrap();
    let _rq = ring::init_segment::<RecvWqe>(&rq_seg, 16).unwrap();
    let attrs = QpAttrs {
        pd: PdId(pd),
        send_cq: cq.cq_num(),
        recv_cq: cq.cq_num(),
        srq: None,
        sq_depth: 16,
        rq_depth: 16,
        max_sge: 4,
        max_inline: 64,
        ird: 8,
        ord: 8,
    };
    let qp = e.id(&Request::CreateQp {
        attrs,
        sq: path(&sq_seg),
        rq: path(&rq_seg),
    });
    // An entry no library would write (an unknown opcode and an impossible SGE count), then
    // a good one. The QP is in Idle, where posted WRs wait unprocessed (Verbs figure 7);
    // Modify QP to Error flushes both, in posting order (section 6.2.1.1): the bad entry
    // took its place in the SQ like any other.
    let mut bad = SendWqe::new(66, iwarp_abi::wqe::SendOpcode::Send, &[]).unwrap();
    bad.opcode = 0xee;
    bad.num_sge = 200;
    sq.push(bad).unwrap();
    sq.push(SendWqe::new(67, iwarp_abi::wqe::SendOpcode::Send, &[]).unwrap())
        .unwrap();
    match e.call(&Request::ModifyQp {
        qp: QpId(qp),
        state: QpState::Error,
    }) {
        Reply::Qp { .. } | Reply::Done => {}
        other => panic!("{other:?}"),
    }
    for id in [66, 67] {
        let wc = wait_cqe(&cq);
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::WrFlushed), "{wc:?}");
    }
    // The connected pair of the same daemons still moves data.
    recv(&p.sb.qp, 1, &p.sb.mr, 0);
    mem_write(&p.sa.mem, 0, b"after the bad entry");
    post(&p.sa.qp, 2, WrOpcode::Send, &p.sa.mr, 0, 19);
    ok(&p.sa.cq, 2);
    ok(&p.sb.cq, 1);
    assert_eq!(mem_read(&p.sb.mem, 0, 19), b"after the bad entry");
}

#[test]
fn a_refused_connection_leaves_its_qp_ready_for_another_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(dir.path(), "a", 1);
    let mut b = start(dir.path(), "b", 2);
    let sa = resources(&mut a, "a");
    let sb = resources(&mut b, "b");
    // Nobody listens on 7010 yet: refused, with a reason.
    a.id(&Request::Connect {
        qp: QpId(sa.qp_num),
        remote: "10.99.0.2:7010".parse().unwrap(),
        settings: ConnSettings::default(),
    });
    let e = a.event_matching("failure", |e| matches!(e, Event::ConnectFailed { .. }));
    assert!(matches!(e, Event::ConnectFailed { .. }), "{e:?}");
    // The same QP connects once the peer listens, and carries data.
    connect(
        &mut a,
        &mut b,
        &sa,
        &sb,
        7010,
        ConnSettings::default(),
        ConnSettings::default(),
    );
    recv(&sb.qp, 1, &sb.mr, 0);
    post(&sa.qp, 2, WrOpcode::Send, &sa.mr, 0, 8);
    ok(&sa.cq, 2);
    ok(&sb.cq, 1);
}

#[test]
fn peer_to_peer_rtr_then_a_graceful_disconnect_delivers_what_was_sent_before_it() {
    // RFC 6581 peer-to-peer mode, the RTR a zero-length RDMA Write both sides agreed on.
    let p2p = ConnSettings {
        peer_to_peer: Some(iwarp_abi::app::Rtr {
            send: false,
            write: true,
            read: false,
        }),
        rdmap_v2: true,
        ..ConnSettings::default()
    };
    let mut p = pair(7010, p2p.clone(), p2p);
    every_operation(&p.sa, &p.sb, 3);
    every_operation(&p.sb, &p.sa, 5);

    // Graceful disconnect right after a Send: the Send still arrives and completes (Verbs
    // Closing: the send queue drains before the FIN), then the peer sees the end, and its
    // receives left over are flushed.
    for i in 0..3 {
        recv(&p.sb.qp, 300 + i, &p.sb.mr, i * 4096);
    }
    mem_write(&p.sa.mem, 0, b"last words before FIN");
    post(&p.sa.qp, 30, WrOpcode::Send, &p.sa.mr, 0, 21);
    let Event::Established(Established { conn, .. }) = p.ea else {
        unreachable!()
    };
    assert!(matches!(
        p.a.call(&Request::Disconnect { conn, abort: false }),
        Reply::Done
    ));
    ok(&p.sa.cq, 30);
    let query = Request::QueryQp {
        qp: QpId(p.sa.qp_num),
    };
    // Verbs section 6.2.5: the disconnect moved A's QP to Closing, which it leaves for Idle
    // once the peer's end of the stream arrives. B's daemon answers the FIN on its own, at
    // times before this query reaches A's: either state is the graceful path, Error is not.
    assert!(matches!(
        p.a.call(&query),
        Reply::Qp {
            state: QpState::Closing | QpState::Idle
        }
    ));
    assert_eq!(ok(&p.sb.cq, 300).byte_len, 21);
    assert_eq!(mem_read(&p.sb.mem, 0, 21), b"last words before FIN");
    match p
        .b
        .event_matching("disconnect", |e| matches!(e, Event::Disconnected { .. }))
    {
        Event::Disconnected { reason, .. } => assert_eq!(reason, "Graceful"),
        _ => unreachable!(),
    }
    for i in 1..3 {
        let wc = wait_cqe(&p.sb.cq);
        assert_eq!((wc.wr_id, wc.status), (300 + i, WcStatus::WrFlushed));
    }
    // Verbs section 6.2.5: once A's stream has ended, its QP leaves Closing for Idle, and
    // Modify QP, refused in Closing, may move it on again (Idle -> Error, figure 4).
    let idle = |a: &mut Endpoint| {
        matches!(
            a.call(&query),
            Reply::Qp {
                state: QpState::Idle
            }
        )
    };
    let t = Instant::now();
    while !idle(&mut p.a) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "A's QP never left Closing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let to_error = Request::ModifyQp {
        qp: QpId(p.sa.qp_num),
        state: QpState::Error,
    };
    assert!(matches!(p.a.call(&to_error), Reply::Done));
    assert!(matches!(
        p.a.call(&query),
        Reply::Qp {
            state: QpState::Error
        }
    ));
}

/// `kill -SIG pid`: stops or continues one of our daemons.
fn signal(p: &Proc, sig: &str) {
    let pid = p.0.id().to_string();
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

#[test]
fn a_graceful_disconnect_holds_the_qp_in_closing_until_the_peer_ends_its_half() {
    // Verbs section 6.2.5: a graceful disconnect moves the QP to Closing, which it leaves
    // for Idle only once the LLP stream has closed at both ends. B's daemon is stopped
    // (SIGSTOP) before A disconnects, so nothing answers A's FIN: A's QP must stay in
    // Closing, neither Idle (the close is not done) nor Error (nothing failed), for as long
    // as B is away. The daemons' TCP user timeout is raised to 30 s so that A's
    // unanswered FIN does not end the connection while the test looks.
    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cfg.path(), "[tcp]\nuser_timeout_ms = 30000\n").unwrap();
    let extra = ["--config", cfg.path().to_str().unwrap()];
    let d = ConnSettings::default;
    let mut p = pair_with(7014, d(), d(), &extra);
    let Event::Established(Established { conn, .. }) = p.ea else {
        unreachable!()
    };
    recv(&p.sb.qp, 1, &p.sb.mr, 0);
    post(&p.sa.qp, 2, WrOpcode::Send, &p.sa.mr, 0, 8);
    ok(&p.sa.cq, 2);
    ok(&p.sb.cq, 1);

    signal(&p.b._daemon, "STOP");
    assert!(matches!(
        p.a.call(&Request::Disconnect { conn, abort: false }),
        Reply::Done
    ));
    let query = Request::QueryQp {
        qp: QpId(p.sa.qp_num),
    };
    let held = Instant::now();
    while held.elapsed() < Duration::from_millis(500) {
        let r = p.a.call(&query);
        assert!(
            matches!(
                r,
                Reply::Qp {
                    state: QpState::Closing
                }
            ),
            "A's QP left Closing with its peer stopped: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&p.b._daemon, "CONT");

    // B's daemon reads the FIN, B's application hears a graceful disconnect, and A's QP
    // moves on to Idle once B's end of the stream arrives.
    match p
        .b
        .event_matching("disconnect", |e| matches!(e, Event::Disconnected { .. }))
    {
        Event::Disconnected { reason, .. } => assert_eq!(reason, "Graceful"),
        _ => unreachable!(),
    }
    let t = Instant::now();
    loop {
        match p.a.call(&query) {
            Reply::Qp {
                state: QpState::Idle,
            } => break,
            Reply::Qp {
                state: QpState::Closing,
            } => {}
            r => panic!("A's QP left Closing for {r:?}, not Idle"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "A's QP never left Closing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_receive_posted_before_a_disconnect_is_flushed_with_the_rest() {
    // Verbs section 6.2.5: the QP leaves Closing for Idle with its receives flushed, and a
    // receive posted before the disconnect was asked for is one of them, whichever the
    // daemon meets first: the ring, or the command control relays (under load the command
    // can come between a turn's reading of the rings and its commands). Here it always
    // comes first: A's rings name a doorbell this test never rings, so only the disconnect
    // makes the daemon read them. A receive left in the ring would reach the QP in Idle,
    // where it waits for an RTS that never comes, and its completion with it (rping's
    // client waits for that flush before it exits).
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(dir.path(), "a", 1);
    let mut b = start(dir.path(), "b", 2);
    let bell = segment("a-bell", SegmentKind::Doorbell, doorbell::bell_bytes(1));
    doorbell::Ringer::init_segment(&bell).unwrap();
    let sa = resources_belled(&mut a, "a", 256, Some(&bell));
    let sb = resources(&mut b, "b");
    let (ea, _) = connect(
        &mut a,
        &mut b,
        &sa,
        &sb,
        7012,
        ConnSettings::default(),
        ConnSettings::default(),
    );
    let Event::Established(Established { conn, .. }) = ea else {
        unreachable!()
    };
    recv(&sa.qp, 400, &sa.mr, 0);
    assert!(matches!(
        a.call(&Request::Disconnect { conn, abort: false }),
        Reply::Done
    ));
    let wc = wait_cqe(&sa.cq);
    assert_eq!((wc.wr_id, wc.status), (400, WcStatus::WrFlushed));
}

#[test]
fn an_mpa_revision_1_peer_connects_and_moves_data() {
    // RFC 5044 revision 1: no enhanced connection data; the responder answers in revision 1.
    let rev1 = ConnSettings {
        revision: 1,
        ..ConnSettings::default()
    };
    let p = pair(7011, rev1, ConnSettings::default());
    let Event::Established(Established { rdmap_version, .. }) = p.ea else {
        unreachable!()
    };
    assert_eq!(rdmap_version, 1);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    mem_write(&p.sa.mem, 0, &data);
    recv(&p.sb.qp, 40, &p.sb.mr, 0);
    post(&p.sa.qp, 1, WrOpcode::Send, &p.sa.mr, 0, 3000);
    ok(&p.sa.cq, 1);
    assert_eq!(ok(&p.sb.cq, 40).byte_len, 3000);
    assert_eq!(mem_read(&p.sb.mem, 0, 3000), data);
    // And back: B reads what A holds.
    let read = WrOpcode::RdmaRead {
        rkey: p.sa.mr.stag(),
        remote_addr: 0,
    };
    post(&p.sb.qp, 2, read, &p.sb.mr, 8192, 3000);
    ok(&p.sb.cq, 2);
    assert_eq!(mem_read(&p.sb.mem, 8192, 3000), data);
}
