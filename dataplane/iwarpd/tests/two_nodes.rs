//! Two RNIC nodes, each with its own MAC and IP, on the embedded Unix-socket Ethernet:
//! ARP, TCP (smoltcp), MPA setup, then every RDMA operation through the engine, bytes
//! compared. Runs unprivileged everywhere.

mod common;

use common::{pair, segment_dir, until, End, A_IP, B_IP};
use iwarp_engine::{Access, QpCaps, RecvWr, SendOp, SendWr, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::ConnState;
use iwarpd::port::lossy::LossyPort;
use iwarpd::port::pcap::PcapPort;
use iwarpd::port::unix::UnixPort;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

#[test]
fn every_rdma_operation_over_the_default_port() {
    let dir = segment_dir("iwarp-seg");
    // Kept after the test, for tshark below and for people to open in Wireshark.
    let pcap = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("two-nodes.pcap");
    let pa = PcapPort::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 0, 0x0a], 1500).unwrap(),
        &pcap,
    )
    .unwrap();
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 0, 0x0b], 1500).unwrap();
    let (mut a, mut b) = pair(pa, pb, Settings::default());
    let n = a.node.negotiated(a.conn).unwrap().clone();
    assert!(n.tx.crc && n.revision == 2);

    let big = 1 << 20;
    let a_mem = a.mem(big, Access::ALL);
    let b_mem = b.mem(big, Access::ALL);
    b_mem.fill(7);
    // Write B -> A, 1 MiB.
    b.post_write(1, b_mem.sge(0, big), &a_mem, 0);
    let mut got = Vec::new();
    until(&mut a, &mut b, 30, |_, b| {
        got.extend(b.wcs());
        !got.is_empty()
    });
    assert_eq!((got[0].wr_id, got[0].status), (1, Status::Success));
    // A Write completes at the sender before it is placed; a Send after it arrives after it
    // is placed (RDMAP ordering), so its receive completion is the signal.
    let a_rx = a.mem(64, Access::LOCAL_WRITE);
    a.rnic
        .post_recv(a.qp, RecvWr::new(2, &[a_rx.sge(0, 64)]))
        .unwrap();
    b.rnic
        .post_send(
            b.qp,
            SendWr::new(
                3,
                SendOp::Send {
                    solicited: false,
                    invalidate: None,
                },
                &[b_mem.sge(0, 8)],
            ),
        )
        .unwrap();
    let mut aw = Vec::new();
    until(&mut a, &mut b, 30, |a, _| {
        aw.extend(a.wcs());
        !aw.is_empty()
    });
    assert_eq!(aw[0].wr_id, 2);
    assert_eq!(b.wcs().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![3]);
    assert!(
        a_mem.bytes(0, big) == b_mem.bytes(0, big),
        "1 MiB Write placed intact"
    );

    // Send A -> B.
    let b_rx = b.mem(4096, Access::LOCAL_WRITE);
    b.rnic
        .post_recv(b.qp, RecvWr::new(5, &[b_rx.sge(0, 4096)]))
        .unwrap();
    a.rnic
        .post_send(
            a.qp,
            SendWr::new(
                6,
                SendOp::Send {
                    solicited: true,
                    invalidate: None,
                },
                &[a_mem.sge(100, 3000)],
            ),
        )
        .unwrap();
    let mut bw = Vec::new();
    until(&mut a, &mut b, 10, |_, b| {
        bw.extend(b.wcs());
        !bw.is_empty()
    });
    assert_eq!((bw[0].wr_id, bw[0].byte_len), (5, 3000));
    assert_eq!(b_rx.bytes(0, 3000), a_mem.bytes(100, 3000));

    // Read A <- B, 200 KiB.
    let sink = a.mem(200 << 10, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let op = SendOp::Read {
        remote_stag: b_mem.stag,
        remote_to: b_mem.sge(4096, 0).to,
    };
    a.rnic
        .post_send(a.qp, SendWr::new(7, op, &[sink.sge(0, 200 << 10)]))
        .unwrap();
    let mut aw = Vec::new();
    until(&mut a, &mut b, 10, |a, _| {
        aw.extend(a.wcs());
        aw.iter().any(|w| w.wr_id == 7)
    });
    assert!(aw.iter().all(|w| w.status == Status::Success));
    assert!(
        sink.bytes(0, 200 << 10) == b_mem.bytes(4096, 200 << 10),
        "Read intact"
    );

    // Atomics A -> B: FetchAdd then CmpSwap.
    let target = b.mem(64, Access::REMOTE_ATOMIC | Access::LOCAL_WRITE);
    let result = a.mem(8, Access::LOCAL_WRITE);
    let to = target.sge(8, 0).to;
    let fa = SendOp::FetchAdd {
        remote_stag: target.stag,
        remote_to: to,
        add: 41,
        add_mask: 0,
    };
    let cs = SendOp::CmpSwap {
        remote_stag: target.stag,
        remote_to: to,
        compare: 41,
        compare_mask: u64::MAX,
        swap: 1000,
        swap_mask: u64::MAX,
    };
    a.rnic
        .post_send(a.qp, SendWr::new(8, fa, &[result.sge(0, 8)]))
        .unwrap();
    a.rnic
        .post_send(a.qp, SendWr::new(9, cs, &[result.sge(0, 8)]))
        .unwrap();
    let mut aw = Vec::new();
    until(&mut a, &mut b, 10, |a, _| {
        aw.extend(a.wcs());
        aw.iter().any(|w| w.wr_id == 9)
    });
    assert!(aw.iter().all(|w| w.status == Status::Success));
    assert_eq!(
        result.u64_at(0),
        41,
        "CmpSwap returned the value FetchAdd left"
    );
    assert_eq!(target.u64_at(8), 1000);

    // Immediate Data A -> B.
    b.rnic.post_recv(b.qp, RecvWr::new(10, &[])).unwrap();
    a.rnic
        .post_send(
            a.qp,
            SendWr::new(
                11,
                SendOp::Immediate {
                    imm: 0xfeed_f00d,
                    solicited: false,
                },
                &[],
            ),
        )
        .unwrap();
    let mut bw = Vec::new();
    until(&mut a, &mut b, 10, |_, b| {
        bw.extend(b.wcs());
        !bw.is_empty()
    });
    assert_eq!(bw[0].imm, Some(0xfeed_f00d));

    let c = a.node.counters();
    assert!(c.rx_frames > 700 && c.tx_frames > 0, "{c:?}");
    drop(a);
    assert!(std::fs::metadata(&pcap).unwrap().len() > (1 << 20));
    iwarp_testkit::tshark_check(&pcap, 701, true);
}

#[test]
fn loss_recovery_at_one_percent() {
    let dir = segment_dir("iwarp-loss");
    let pa = LossyPort::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 1, 0x0a], 1500).unwrap(),
        100,
        0x1234_5678,
    );
    let pb = LossyPort::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 1, 0x0b], 1500).unwrap(),
        100,
        0x8765_4321,
    );
    let (mut a, mut b) = pair(pa, pb, Settings::default());
    let chunk = 1 << 20;
    let total: usize = 256 << 20;
    let a_mem = a.mem(chunk, Access::ALL);
    let b_mem = b.mem(chunk, Access::ALL);
    b_mem.fill(3);
    let start = Instant::now();
    let mut last_progress = Instant::now();
    let mut worst = Duration::ZERO;
    let mut last_rx = 0;
    let mut sent = 0usize;
    let mut done = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut report = Instant::now();
    while done < total / chunk || a.node.counters().stream_bytes_rx < (total as u64) {
        assert!(Instant::now() < deadline, "transfer stalled");
        if sent < total / chunk && sent - done < 4 {
            b.post_write(sent as u64, b_mem.sge(0, chunk), &a_mem, 0);
            sent += 1;
        }
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            done += 1;
        }
        if std::env::var_os("IWARP_DEBUG").is_some() && report.elapsed() > Duration::from_secs(2) {
            report = Instant::now();
            eprintln!(
                "sent {sent} done {done} a {:?} b {:?}",
                a.node.counters(),
                b.node.counters()
            );
        }
        let rx = a.node.counters().stream_bytes_rx;
        if rx > last_rx {
            worst = worst.max(last_progress.elapsed());
            last_progress = Instant::now();
            last_rx = rx;
        }
    }
    assert!(a_mem.bytes(0, chunk) == b_mem.bytes(0, chunk));
    println!(
        "256 MiB through 1 % loss each way: {:?}, frames dropped {} + {}, worst stall {:?}",
        start.elapsed(),
        a.node.port().dropped,
        b.node.port().dropped,
        worst
    );
    assert!(a.node.port().dropped + b.node.port().dropped > 0);
}

#[test]
fn a_dead_peer_is_reported_and_the_others_keep_being_served() {
    let dir = segment_dir("iwarp-kill");
    let port = |last: u8| UnixPort::open(dir.path(), [2, 0, 0, 0, 2, last], 1500).unwrap();
    let mut a = End::new(port(0x0a), A_IP);
    let qp2 = a
        .rnic
        .create_qp(
            a.pd,
            a.cq,
            a.cq,
            QpCaps {
                sq_depth: 64,
                rq_depth: 64,
                srq: None,
            },
        )
        .unwrap();
    let mut b = End::new(port(0x0b), B_IP);
    let mut c = End::new(port(0x0c), Ipv4Addr::new(10, 77, 0, 12));
    a.conn = a.node.listen(7174, a.qp, Settings::default()).unwrap();
    let a_conn2 = a.node.listen(7175, qp2, Settings::default()).unwrap();
    b.conn = b
        .node
        .connect(A_IP, 7174, 40001, b.qp, Settings::default())
        .unwrap();
    c.conn = c
        .node
        .connect(A_IP, 7175, 40002, c.qp, Settings::default())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(b.node.state(b.conn) == Some(&ConnState::Rts)
        && c.node.state(c.conn) == Some(&ConnState::Rts))
    {
        assert!(Instant::now() < deadline);
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        c.node.poll(&mut c.rnic);
    }
    // C starts a transfer to A, then dies (its node and port vanish without a word).
    let a_mem = a.mem(1 << 20, Access::ALL);
    let c_mem = c.mem(1 << 20, Access::ALL);
    c.post_write(1, c_mem.sge(0, 1 << 20), &a_mem, 0);
    for _ in 0..20 {
        a.node.poll(&mut a.rnic);
        c.node.poll(&mut c.rnic);
    }
    drop(c);
    // A notices within its user timeout and moves that QP to Error; B is unaffected.
    let b_mem = b.mem(4096, Access::ALL);
    b_mem.fill(9);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lost = false;
    let mut served = 0;
    while !(lost && served >= 20) {
        assert!(Instant::now() < deadline, "lost {lost} served {served}");
        if !lost {
            lost = a
                .node
                .state(a_conn2)
                .is_some_and(|s| matches!(s, ConnState::Closed | ConnState::Failed(_)));
        }
        // Keep B's traffic going: a Read of A's memory every round.
        if b.wcs().iter().any(|w| w.status == Status::Success) || served == 0 {
            let op = SendOp::Read {
                remote_stag: a_mem.stag,
                remote_to: a_mem.sge(0, 0).to,
            };
            b.rnic
                .post_send(b.qp, SendWr::new(2, op, &[b_mem.sge(0, 4096)]))
                .unwrap();
            served += 1;
        }
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    assert_eq!(a.rnic.qp_state(qp2), Some(iwarp_engine::QpState::Error));
    assert_eq!(a.rnic.qp_state(a.qp), Some(iwarp_engine::QpState::Rts));
    let mut events = Vec::new();
    while let Some(e) = a.rnic.poll_event() {
        events.push(e);
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e, iwarp_engine::AsyncEvent::QpError { qp } if *qp == qp2)),
        "{events:?}"
    );
}

#[test]
fn an_idle_connection_stays_up() {
    let dir = segment_dir("iwarp-idle");
    let pa = UnixPort::open(dir.path(), [2, 0, 0, 0, 3, 0x0a], 1500).unwrap();
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 3, 0x0b], 1500).unwrap();
    let (mut a, mut b) = pair(pa, pb, Settings::default());
    // Longer than the 2 s user timeout, with no RDMA traffic at all.
    let until_t = Instant::now() + Duration::from_millis(3500);
    while Instant::now() < until_t {
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(a.node.state(a.conn), Some(&ConnState::Rts));
    assert_eq!(b.node.state(b.conn), Some(&ConnState::Rts));
}
