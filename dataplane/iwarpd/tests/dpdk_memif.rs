//! Two RNIC nodes over DPDK: a `net_memif` server and client in one process (EAL can start
//! once per process, so every test's devices are in one set of EAL arguments), every frame
//! through DPDK's memif shared-memory rings; 1500-octet frames, and 9000-octet jumbo frames.
//! Needs the `dpdk` feature and root (memif's socket, EAL's memory: hugepages where free,
//! else ordinary memory); skipped, saying so, otherwise.
#![cfg(feature = "dpdk")]

mod common;

use common::streams::{slow_reader, Streams};
use common::{pair, pair_tcp, write_b_to_a};
use common::{End, A_IP, B_IP};
use iwarp_engine::{Access, RecvWr, SendOp, SendWr, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::TcpSettings;
use iwarpd::port::dpdk::TX_HOLD;
use iwarpd::port::dpdk::{eal_init, DpdkPort};
use iwarpd::port::{Port, STALL};
use std::time::{Duration, Instant};

/// Held by each test for its whole run: DPDK's control path (configure, start) is not
/// thread-safe.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Leaves both ends of a memif pair open for the process's life. Closing one end makes
/// DPDK's interrupt thread handle the disconnect at the other, which in DPDK 22.11 races
/// with closing that other end from this thread (a crash in the interrupt thread, about one
/// run in ten). Two processes, as two daemons are, each close only their own end.
fn keep_open<T>(ends: T) {
    std::mem::forget(ends);
}

/// Starts EAL with every test's memif pairs, each on its own socket: 0/1 and 4/5 with
/// memif's default buffers, 2/3 with a buffer (`bsize`) per 9000-octet frame, 6/7 and 8/9
/// with rings of 64 slots (`rsize`, log2), which a slow reader fills at once.
fn eal() {
    let pid = std::process::id();
    let mut args: Vec<String> = ["--no-pci", "--no-telemetry", "--log-level=3"]
        .map(String::from)
        .to_vec();
    args.push(format!("--file-prefix=iwarp-memif-{pid}"));
    args.extend(iwarp_testkit::eal_memory_args("dpdk_memif", 512));
    for (pair, extra) in [
        (0, ""),
        (1, ",bsize=9014"),
        (2, ""),
        (3, ",rsize=6"),
        (4, ",rsize=6"),
    ] {
        let sock = format!("/tmp/iwarp-memif-{pid}-{pair}.sock");
        for (i, role) in [(2 * pair, "server"), (2 * pair + 1, "client")] {
            args.push(format!(
                "--vdev=net_memif{i},role={role},socket={sock},id=0{extra}"
            ));
        }
    }
    eal_init(&args).expect("EAL init (see deploy/README.md for the EAL arguments that work)");
}

#[test]
fn two_nodes_over_dpdk_memif() {
    if !iwarp_testkit::root_or_skip("two_nodes_over_dpdk_memif") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    eal();
    let pa = DpdkPort::open("net_memif0", 1500).unwrap();
    let pb = DpdkPort::open("net_memif1", 1500).unwrap();
    assert_ne!(pa.mac, pb.mac);
    let (pa, pb) = frames_built_in_place_cross_unless_held_back(pa, pb);
    let (mut a, mut b) = pair(pa, pb, Settings::default());

    let len = 4 << 20;
    let a_mem = a.mem(len, Access::ALL);
    let b_mem = b.mem(len, Access::ALL);
    b_mem.fill(11);
    b.post_write(1, b_mem.sge(0, len), &a_mem, 0);
    a.rnic
        .post_recv(a.qp, RecvWr::new(2, &[a_mem.sge(0, 64)]))
        .unwrap();
    // The Send after the Write lands after it: its completion says the Write is placed. It
    // overwrites the first 8 octets, so compare from there.
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
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no completion");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        if a.wcs()
            .iter()
            .any(|w| w.wr_id == 2 && w.status == Status::Success)
        {
            break;
        }
    }
    assert!(
        a_mem.bytes(0, len) == b_mem.bytes(0, len),
        "4 MiB over memif intact"
    );
    println!(
        "4 MiB RDMA Write over DPDK net_memif: ok, counters {:?}",
        a.node.counters()
    );
    keep_open((a, b));
}

/// Many streams through a memif ring that fills: the frames `rte_eth_tx_burst` does not
/// take wait in the port, first in line, and the device leaves TCP's segments in TCP while
/// they do, so no frame is dropped and no segment resent however far the streams' windows
/// exceed the ring.
#[test]
fn many_streams_through_a_full_memif_ring_drop_nothing_resend_nothing() {
    if !iwarp_testkit::root_or_skip("many_streams_through_a_full_memif_ring") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    eal();
    let pa = DpdkPort::open("net_memif6", 1500).unwrap();
    let pb = DpdkPort::open("net_memif7", 1500).unwrap();
    let tcp = common::patient_tcp();
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    const STREAMS: usize = 16;
    let s = Streams {
        streams: STREAMS,
        writes: 24,
        write: 64 << 10,
        depth: 4,
        slower: 3,
        port: 7400,
        local_port: 43000,
    };
    let out = slow_reader(&mut a, &mut b, s, DpdkPort::held);
    println!("{STREAMS} streams through a 64-slot memif ring: {out:?}");
    assert!(out.most_held > 0, "the ring never filled");
    assert!(out.most_held <= TX_HOLD, "held {}", out.most_held);
    assert_eq!(out.dropped, 0, "frames dropped by the port");
    assert_eq!(out.resent, 0, "segments resent");
    keep_open((a, b));
}

/// 9000-octet frames: each port's mbufs hold one, the nodes' segments and FPDUs are 8960
/// octets (`port.mtu` - 40, the daemon's default), and 4 MiB of RDMA Writes arrive intact in
/// about one frame per 8960 octets.
#[test]
fn jumbo_frames_over_dpdk_memif() {
    if !iwarp_testkit::root_or_skip("jumbo_frames_over_dpdk_memif") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    eal();
    let mut pa = DpdkPort::open("net_memif2", 9000).unwrap();
    let mut pb = DpdkPort::open("net_memif3", 9000).unwrap();
    // A whole 9014-octet frame crosses.
    let got = first_frames(&mut pa, &mut pb, |p| p.tx(&[0x6b; 9014]).unwrap());
    assert!(got.iter().all(|f| f[..] == [0x6b; 9014]));

    let tcp =
        TcpSettings::from_config(&iwarp_config::Config::parse("[port]\nmtu = 9000\n").unwrap());
    assert_eq!(tcp.mss, 8960);
    let (mut a, mut b) = pair_tcp(pa, pb, Settings::default(), tcp);
    let frames = b.node.counters().tx_frames;
    // Frames sent above while the link came up may have been dropped (TX ring not ready).
    let drops_before = a.node.counters().drops + b.node.counters().drops;
    let len = 4 << 20;
    write_b_to_a(&mut a, &mut b, len, 23);
    let sent = b.node.counters().tx_frames - frames;
    assert!(
        (len / 8960..len / 8000).contains(&(sent as usize)),
        "{sent} frames for {len} octets"
    );
    let drops = a.node.counters().drops + b.node.counters().drops;
    assert_eq!(drops, drops_before, "frames dropped in the transfer");
    keep_open((a, b));
}

/// A frame longer than the receiving port's MTU arrives in a chain of mbufs: it is dropped
/// and counted, not delivered cut to its first mbuf.
#[test]
fn a_frame_beyond_the_mtu_is_dropped_whole() {
    if !iwarp_testkit::root_or_skip("a_frame_beyond_the_mtu_is_dropped_whole") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    eal();
    let mut big = DpdkPort::open("net_memif4", 9000).unwrap();
    let mut small = DpdkPort::open("net_memif5", 1500).unwrap();
    let got = first_frames(&mut big, &mut small, |p| {
        p.tx(&[0x11; 4000]).unwrap();
        p.tx(&[0x22; 1514]).unwrap();
    });
    assert!(
        got.iter().all(|f| f[..] == [0x22; 1514]),
        "only whole frames"
    );
    assert!(small.dropped() >= 1, "the long frame counted");
    keep_open((big, small));
}

/// Frames built straight into mbufs (`Port::tx_with`, smoltcp's transmit path): one held
/// back is freed, never sent; one sent arrives as built. Repeated until the link is up.
fn frames_built_in_place_cross_unless_held_back(
    mut pa: DpdkPort,
    mut pb: DpdkPort,
) -> (DpdkPort, DpdkPort) {
    let mut scratch = Vec::new();
    let got = first_frames(&mut pa, &mut pb, |p| {
        let ((), held) = p.tx_with(60, &mut scratch, |f| {
            f.fill(0xee);
            ((), false)
        });
        let ((), sent) = p.tx_with(60, &mut scratch, |f| {
            f.fill(0x5a);
            ((), true)
        });
        assert!(!held && sent);
    });
    assert!(got.iter().all(|f| f[..] == [0x5a; 60]), "{got:?}");
    (pa, pb)
}

/// What `to` receives of the frames `send` gives `from`, sent again every millisecond until
/// some arrive (the memif link comes up some time after both ends are open).
fn first_frames(
    from: &mut DpdkPort,
    to: &mut DpdkPort,
    mut send: impl FnMut(&mut DpdkPort),
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got: Vec<Vec<u8>> = Vec::new();
    while got.is_empty() {
        assert!(Instant::now() < deadline, "no frame crossed memif");
        send(from);
        from.flush().unwrap();
        std::thread::sleep(Duration::from_millis(1));
        to.rx_burst(32, |f| got.push(f.to_vec())).unwrap();
    }
    got
}

/// A peer that stops reading fills the memif ring; what the ring does not take is held, and
/// the device takes no segments meanwhile (`tx_ready` says no). Once the ring has taken
/// nothing for `STALL`, the held frames are dropped and counted, and the port takes frames
/// again: a vanished peer does not hold the queue for ever.
#[test]
fn frames_held_for_a_peer_that_reads_nothing_are_dropped_after_the_stall() {
    if !iwarp_testkit::root_or_skip(
        "frames_held_for_a_peer_that_reads_nothing_are_dropped_after_the_stall",
    ) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    eal();
    let mut pa = DpdkPort::open("net_memif8", 1500).unwrap();
    let mut pb = DpdkPort::open("net_memif9", 1500).unwrap();
    first_frames(&mut pa, &mut pb, |p| p.tx(&[0x33; 60]).unwrap());
    // B reads nothing from here on.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pa.held() == 0 {
        assert!(Instant::now() < deadline, "the ring never filled");
        pa.tx(&[0x44; 1514]).unwrap();
        pa.flush().unwrap();
    }
    assert!(!pa.tx_ready());
    let (held, dropped) = (pa.held(), pa.dropped());
    std::thread::sleep(STALL / 4);
    pa.flush().unwrap();
    assert_eq!(pa.held(), held, "held, not dropped, before the stall");
    std::thread::sleep(STALL);
    pa.flush().unwrap();
    assert_eq!(pa.held(), 0);
    assert!(pa.tx_ready());
    assert_eq!(
        pa.dropped(),
        dropped + held as u64,
        "each dropped frame counted"
    );
    keep_open((pa, pb));
}
