//! Root only: two nodes on TAP interfaces joined by a Linux bridge, the kernel forwarding
//! every frame; then the same with 1 % of forwarded frames dropped by nftables (this
//! machine's kernel has no netem). Skipped, saying so, when not run as root.

mod common;

use common::{pair, sh, Bridge, End, A_IP};
use iwarp_engine::{Access, SendOp, SendWr, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::tap::TapPort;
use std::time::{Duration, Instant};

fn transfer(a: &mut End<TapPort>, b: &mut End<TapPort>, total: usize) -> Duration {
    let chunk = 1 << 20;
    let a_mem = a.mem(chunk, Access::ALL);
    let b_mem = b.mem(chunk, Access::ALL);
    b_mem.fill(5);
    let (mut sent, mut done) = (0, 0);
    let mut last = Instant::now();
    let mut worst = Duration::ZERO;
    let mut last_rx = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while done < total / chunk {
        assert!(Instant::now() < deadline, "stalled at {done}");
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
        let rx = a.node.counters().stream_bytes_rx;
        if rx > last_rx {
            worst = worst.max(last.elapsed());
            last = Instant::now();
            last_rx = rx;
        }
    }
    // Every byte: a final Read brings A's copy back to compare.
    let check = b.mem(chunk, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let op = SendOp::Read {
        remote_stag: a_mem.stag,
        remote_to: a_mem.sge(0, 0).to,
    };
    b.rnic
        .post_send(b.qp, SendWr::new(99, op, &[check.sge(0, chunk)]))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline);
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        if b.wcs().iter().any(|w| w.wr_id == 99) {
            break;
        }
    }
    assert!(
        check.bytes(0, chunk) == b_mem.bytes(0, chunk),
        "data intact"
    );
    worst
}

#[test]
fn two_nodes_over_tap_and_a_bridge_with_and_without_loss() {
    if !iwarp_testkit::root_or_skip("two_nodes_over_tap_and_a_bridge") {
        return;
    }
    let ta =
        TapPort::open("iwtapA", [2, 0, 0, 0, 9, 0x0a], 1500).expect("TAP (needs /dev/net/tun)");
    let tb = TapPort::open("iwtapB", [2, 0, 0, 0, 9, 0x0b], 1500).unwrap();
    let mut bridge = Bridge::new("iwbr0", &["iwtapA", "iwtapB"]);
    let (mut a, mut b) = pair(ta, tb, Settings::default());
    assert_eq!(a.node.negotiated(a.conn).unwrap().revision, 2);
    let _ = A_IP;
    let worst = transfer(&mut a, &mut b, 16 << 20);
    println!("16 MiB over TAP + bridge: worst stall {worst:?}");
    bridge.lossy("iwarp_loss");
    let t = Instant::now();
    let worst = transfer(&mut a, &mut b, 256 << 20);
    println!(
        "256 MiB over TAP + bridge with 1 % loss (nftables): {:?}, worst stall {worst:?}",
        t.elapsed()
    );
}

/// Jumbo frames through the kernel: the TAPs' kernel sides take the ports' MTU of 9000
/// (the bridge follows its ports), segments and FPDUs are 8960 octets, and 4 MiB of RDMA
/// Write arrives intact in about one frame per 8960 octets.
#[test]
fn jumbo_frames_over_tap_and_a_bridge() {
    use iwarpd::node::TcpSettings;
    if !iwarp_testkit::root_or_skip("jumbo_frames_over_tap_and_a_bridge") {
        return;
    }
    let ta = TapPort::open("iwtapJ", [2, 0, 0, 0, 9, 0x2a], 9000).expect("TAP");
    let tb = TapPort::open("iwtapK", [2, 0, 0, 0, 9, 0x2b], 9000).unwrap();
    for t in ["iwtapJ", "iwtapK"] {
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{t}/mtu")).unwrap();
        assert_eq!(mtu.trim(), "9000", "{t}'s kernel side");
    }
    let _bridge = Bridge::new("iwbr2", &["iwtapJ", "iwtapK"]);
    let tcp =
        TcpSettings::from_config(&iwarp_config::Config::parse("[port]\nmtu = 9000\n").unwrap());
    assert_eq!(tcp.mss, 8960);
    let (mut a, mut b) = common::pair_tcp(ta, tb, Settings::default(), tcp);
    let frames = b.node.counters().tx_frames;
    let len = 4 << 20;
    common::write_b_to_a(&mut a, &mut b, len, 29);
    let sent = (b.node.counters().tx_frames - frames) as usize;
    assert!(
        (len / 8960..len / 8000).contains(&sent),
        "{sent} frames for {len} octets"
    );
}

/// Two workers on a multi-queue TAP interface (a queue each; the kernel hashes each flow to
/// one of them), a peer on another TAP behind the bridge. Worker 1 opens a connection to the
/// peer from an ephemeral port that steers to it, and worker 0 accepts one from the peer:
/// each connection's frames reach its worker whichever queue the kernel put them on, and
/// 1 MiB of RDMA Write goes over each, bytes compared.
#[test]
fn two_workers_on_a_multi_queue_tap() {
    use common::B_IP;
    use iwarpd::node::ConnState;
    use iwarpd::port::steer::Steering;
    if !iwarp_testkit::root_or_skip("two_workers_on_a_multi_queue_tap") {
        return;
    }
    let _ = sh("ip link del iwtapM 2>/dev/null");
    let queues =
        TapPort::open_queues("iwtapM", [2, 0, 0, 0, 9, 0x1a], 1500, 2).expect("multi-queue TAP");
    let tb = TapPort::open("iwtapN", [2, 0, 0, 0, 9, 0x1b], 1500).unwrap();
    let _bridge = Bridge::new("iwbr1", &["iwtapM", "iwtapN"]);
    let mut views = Steering::share(queues, true).unwrap();
    let mut a1 = End::new(views.pop().unwrap(), A_IP);
    let mut a0 = End::new(views.pop().unwrap(), A_IP);
    let mut b = End::new(tb, B_IP);
    let caps = iwarp_engine::QpCaps {
        sq_depth: 256,
        rq_depth: 256,
        srq: None,
    };
    let b_qp2 = b.rnic.create_qp(b.pd, b.cq, b.cq, caps).unwrap();
    let s = Settings::default;
    // Worker 1 connects out (local port 50001 steers to worker 1 of two); worker 0 listens.
    let b_in = b.node.listen(7300, b.qp, s()).unwrap();
    let a1_out = a1.node.connect(B_IP, 7300, 50001, a1.qp, s()).unwrap();
    let a0_in = a0.node.listen(7301, a0.qp, s()).unwrap();
    let b_out = b.node.connect(A_IP, 7301, 40001, b_qp2, s()).unwrap();
    let t = Instant::now();
    let rts = |e: &End<_>, c| e.node.state(c) == Some(&ConnState::Rts);
    while !(rts(&a1, a1_out)
        && rts(&a0, a0_in)
        && b.node.state(b_in) == Some(&ConnState::Rts)
        && b.node.state(b_out) == Some(&ConnState::Rts))
    {
        assert!(t.elapsed() < Duration::from_secs(20), "connections not up");
        a0.node.poll(&mut a0.rnic);
        a1.node.poll(&mut a1.rnic);
        b.node.poll(&mut b.rnic);
    }
    let len = 1 << 20;
    let (m1, m0) = (a1.mem(len, Access::ALL), a0.mem(len, Access::ALL));
    let (mb1, mb0) = (b.mem(len, Access::ALL), b.mem(len, Access::ALL));
    m1.fill(21);
    mb0.fill(42);
    // Worker 1 writes into B; B writes into worker 0.
    a1.post_write(1, m1.sge(0, len), &mb1, 0);
    let to_worker_0 = SendOp::Write {
        remote_stag: m0.stag,
        remote_to: m0.sge(0, 0).to,
    };
    b.rnic
        .post_send(b_qp2, SendWr::new(2, to_worker_0, &[mb0.sge(0, len)]))
        .unwrap();
    let t = Instant::now();
    while mb1.bytes(len - 8, 8) != m1.bytes(len - 8, 8)
        || m0.bytes(len - 8, 8) != mb0.bytes(len - 8, 8)
    {
        assert!(t.elapsed() < Duration::from_secs(30), "writes not placed");
        a0.node.poll(&mut a0.rnic);
        a1.node.poll(&mut a1.rnic);
        b.node.poll(&mut b.rnic);
    }
    assert!(
        mb1.bytes(0, len) == m1.bytes(0, len),
        "worker 1's Write intact"
    );
    assert!(
        m0.bytes(0, len) == mb0.bytes(0, len),
        "the Write to worker 0 intact"
    );
    let ok =
        |wcs: Vec<iwarp_engine::WorkCompletion>| wcs.iter().all(|w| w.status == Status::Success);
    assert!(ok(a1.wcs()) && ok(b.wcs()));
    println!(
        "two workers on a multi-queue TAP: frames received by worker 0 {}, worker 1 {}; \
         handed over by worker 0 {}, worker 1 {}",
        a0.node.counters().rx_frames,
        a1.node.counters().rx_frames,
        a0.node.port().forwarded,
        a1.node.port().forwarded
    );
}
