//! Two nodes over the in-memory port pair: TCP setup, MPA, and a 4 MiB RDMA Write whose
//! bytes are compared — the node path with no socket or file at all; FPDUs kept whole in
//! their segments when the peer's window or MSS is the limit, and packed several to a
//! segment when small; ARP pacing; neighbour entries that outlast an idle spell.

mod common;

use common::{pair, pair_tcps, until, write_b_to_a};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::memory::MemoryPort;
use std::path::Path;

const B_MAC: [u8; 6] = [2, 0, 0, 0, 8, 0x0b];

/// The FPDU lengths of every data segment B sent after its MPA Request, one list per
/// segment; a segment that is not whole FPDUs fails the test.
fn b_segments(pcap: &Path) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for frame in iwarp_testkit::capture_frames(pcap) {
        let Some(seg) = iwarp_testkit::tcp_segment(&frame) else {
            continue;
        };
        let payload = seg.payload;
        if seg.src_mac != B_MAC || payload.is_empty() || payload.starts_with(b"MPA ID Req Frame") {
            continue;
        }
        out.push(fpdus_in(payload).unwrap_or_else(|e| panic!("segment at {}: {e}", seg.seq)));
    }
    out
}

#[test]
fn rdma_write_over_the_in_memory_link() {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], [2, 0, 0, 0, 8, 0x0b], 1500);
    let (mut a, mut b) = pair(pa, pb, Settings::default());
    write_b_to_a(&mut a, &mut b, 4 << 20, 11);
    assert_eq!(a.node.counters().drops + b.node.counters().drops, 0);
}

/// A neighbour that never answers ARP (a host still booting, a dead peer being dialled)
/// gets ten requests a second, not the thousand smoltcp would send on the dilated clock.
#[test]
fn an_unanswered_neighbour_gets_paced_arp_requests() {
    use iwarpd::node::{Node, TcpSettings};
    use iwarpd::port::Port;
    use std::time::{Duration, Instant};

    let (pa, mut silent) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], [2, 0, 0, 0, 8, 0x0b], 1500);
    let mut node = Node::new(pa, "10.8.0.1".parse().unwrap(), 24, TcpSettings::default());
    let mut rnic = iwarp_engine::Rnic::new();
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(16);
    let caps = iwarp_engine::QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq: None,
    };
    let qp = rnic.create_qp(pd, cq, cq, caps).unwrap();
    node.connect(
        "10.8.0.2".parse().unwrap(),
        7000,
        40000,
        qp,
        Settings::default(),
    )
    .unwrap();
    let (start, mut requests) = (Instant::now(), 0);
    while start.elapsed() < Duration::from_millis(350) {
        node.poll(&mut rnic);
        silent
            .rx_burst(32, |f| {
                requests += usize::from(f.len() >= 22 && f[12..14] == [8, 6] && f[20..22] == [0, 1])
            })
            .unwrap();
    }
    // At 0, 100, 200 and 300 ms (one more if the clock read straddles an interval).
    assert!(
        (3..=5).contains(&requests),
        "{requests} ARP requests in 350 ms"
    );
    // The repeats held back are counted, for the stats line.
    assert!(
        node.counters().arp_paced > 10,
        "{} repeats paced",
        node.counters().arp_paced
    );
}

/// A memory port that counts the ARP requests it sends.
struct CountingArp {
    inner: MemoryPort,
    requests: std::rc::Rc<std::cell::Cell<usize>>,
}

impl iwarpd::port::Port for CountingArp {
    type Frame = Vec<u8>;
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn rx_burst<F: FnMut(Vec<u8>)>(&mut self, max: usize, f: F) -> std::io::Result<usize> {
        self.inner.rx_burst(max, f)
    }
    fn tx(&mut self, frame: &[u8]) -> std::io::Result<()> {
        if frame.len() >= 22 && frame[12..14] == [8, 6] && frame[20..22] == [0, 1] {
            self.requests.set(self.requests.get() + 1);
        }
        self.inner.tx(frame)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A connection idle for longer than smoltcp's neighbour entries last on the dilated clock
/// (60 ms) still reaches its peer at once: the next Write goes out with no ARP exchange
/// first (`neighbours.rs` renews the entries while the peer was heard within a minute).
#[test]
fn an_idle_peer_is_reached_without_asking_arp_again() {
    use iwarp_engine::{Access, Status};
    use std::time::{Duration, Instant};

    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], B_MAC, 1500);
    let requests = std::rc::Rc::new(std::cell::Cell::new(0));
    let pb = CountingArp {
        inner: pb,
        requests: requests.clone(),
    };
    let (mut a, mut b) = pair(pa, pb, Settings::default());
    let asked_during_setup = requests.get();
    assert!(
        asked_during_setup >= 1,
        "B asked for A's address to connect"
    );
    let idle = Instant::now();
    while idle.elapsed() < Duration::from_millis(200) {
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    let (ma, mb) = (a.mem(64, Access::ALL), b.mem(64, Access::ALL));
    mb.fill(7);
    b.post_write(1, mb.sge(0, 64), &ma, 0);
    let mut done = false;
    until(&mut a, &mut b, 10, |_, b| {
        done |= b.wcs().iter().any(|w| w.status == Status::Success);
        done && ma.bytes(0, 64) == mb.bytes(0, 64)
    });
    assert_eq!(
        requests.get(),
        asked_during_setup,
        "B asked ARP again after the idle spell"
    );
}

/// The lengths of the FPDUs that make up a TCP payload, or why it is not whole FPDUs
/// (MPA with CRC and no markers: length field, ULPDU, pad to 4 octets, CRC).
fn fpdus_in(payload: &[u8]) -> Result<Vec<usize>, String> {
    let mut at = 0;
    let mut lengths = Vec::new();
    while at < payload.len() {
        let Some(field) = payload.get(at..at + 2) else {
            return Err(format!("a length field cut at {at} of {}", payload.len()));
        };
        let ulpdu = usize::from(u16::from_be_bytes([field[0], field[1]]));
        let fpdu = (2 + ulpdu).next_multiple_of(4) + 4;
        lengths.push(fpdu);
        at += fpdu;
    }
    if at == payload.len() {
        Ok(lengths)
    } else {
        Err(format!(
            "an FPDU of {} octets runs {} past the segment's end",
            lengths.last().unwrap(),
            at - payload.len()
        ))
    }
}

/// The peer's receive buffer (8000 octets: five segments and a bit) is far below what the
/// sender may have in flight (256 KiB). smoltcp alone sends up to the window's edge and cuts
/// the FPDU there; the node queues an FPDU only when the peer's window takes it whole, so
/// every segment of a 1 MiB RDMA Write holds whole FPDUs (RFC 5044 section 8).
#[test]
fn fpdus_stay_whole_when_the_peers_window_is_the_limit() {
    use iwarpd::node::TcpSettings;
    use iwarpd::port::pcap::PcapPort;

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("b.pcap");
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], [2, 0, 0, 0, 8, 0x0b], 1500);
    let small = TcpSettings {
        rx_buffer: 8000,
        ..TcpSettings::default()
    };
    let pb = PcapPort::new(pb, &pcap).unwrap();
    let (mut a, mut b) = pair_tcps(pa, pb, Settings::default(), small, TcpSettings::default());
    let len = 1 << 20;
    write_b_to_a(&mut a, &mut b, len, 5);
    drop(b);

    // B's data segments after its MPA Request: FPDUs only.
    let segments = b_segments(&pcap);
    let octets: usize = segments.iter().flatten().sum();
    // At least the Write's 1 MiB went by in whole FPDUs.
    assert!(
        octets > len,
        "{octets} octets of FPDUs in {} segments",
        segments.len()
    );
}

/// A peer behind a smaller MTU (1200: MSS 1160) gets segments of its MSS, not ours (1460),
/// and FPDUs no larger: each segment still whole FPDUs.
#[test]
fn fpdus_fit_the_peers_mss_when_it_is_below_ours() {
    use iwarpd::node::TcpSettings;
    use iwarpd::port::pcap::PcapPort;

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("b.pcap");
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], B_MAC, 1500);
    // The daemon's settings for port.mtu 1200.
    let narrow =
        TcpSettings::from_config(&iwarp_config::Config::parse("[port]\nmtu = 1200\n").unwrap());
    assert_eq!(narrow.mss, 1160);
    let pb = PcapPort::new(pb, &pcap).unwrap();
    let (mut a, mut b) = pair_tcps(
        pa.with_mtu(1200),
        pb,
        Settings::default(),
        narrow,
        TcpSettings::default(),
    );
    let len = 256 << 10;
    write_b_to_a(&mut a, &mut b, len, 9);
    drop(b);
    let segments = b_segments(&pcap);
    let octets: usize = segments.iter().flatten().sum();
    assert!(octets > len, "{octets} octets of FPDUs");
    let largest = segments.iter().flatten().max().copied().unwrap();
    assert_eq!(
        largest, 1160,
        "the largest FPDU fills the peer's MSS exactly"
    );
}

/// A link that carries 9000-octet frames with both nodes' segment size at 1460 (a `tcp.mss`
/// set below `port.mtu` - 40): smoltcp must cut segments at 1460 too, not at what the link
/// would carry, or it would merge full-size FPDUs into longer segments and split them.
#[test]
fn segments_follow_our_mss_where_the_link_carries_more() {
    use iwarpd::node::TcpSettings;
    use iwarpd::port::pcap::PcapPort;

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("b.pcap");
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], B_MAC, 9000);
    let pb = PcapPort::new(pb, &pcap).unwrap();
    let tcp = TcpSettings::default();
    assert_eq!(tcp.mss, 1460);
    let (mut a, mut b) = pair_tcps(pa, pb, Settings::default(), tcp, tcp);
    let len = 256 << 10;
    write_b_to_a(&mut a, &mut b, len, 13);
    drop(b);
    let segments = b_segments(&pcap);
    let octets: usize = segments.iter().flatten().sum();
    assert!(octets > len, "{octets} octets of FPDUs");
    let longest = segments.iter().map(|s| s.iter().sum::<usize>()).max();
    assert_eq!(longest, Some(1460), "segments of our MSS, full FPDUs");
}

/// Jumbo frames: with a segment size of 8960 (`port.mtu` 9000), a Write goes in FPDUs of
/// 8960 octets, one to a segment.
#[test]
fn jumbo_frames_carry_jumbo_fpdus() {
    use iwarpd::node::TcpSettings;
    use iwarpd::port::pcap::PcapPort;

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("b.pcap");
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], B_MAC, 9000);
    let pb = PcapPort::new(pb, &pcap).unwrap();
    // The daemon's settings for 9000-octet frames: 8960-octet segments, 64 in flight.
    let jumbo =
        TcpSettings::from_config(&iwarp_config::Config::parse("[port]\nmtu = 9000\n").unwrap());
    assert_eq!((jumbo.mss, jumbo.max_inflight), (8960, 64 * 8960));
    let (mut a, mut b) = pair_tcps(pa, pb, Settings::default(), jumbo, jumbo);
    let len = 1 << 20;
    write_b_to_a(&mut a, &mut b, len, 17);
    drop(b);
    let segments = b_segments(&pcap);
    let full = segments.iter().filter(|s| s[..] == [8960]).count();
    assert!(
        full >= len / 8960,
        "{full} segments of one 8960-octet FPDU among {}",
        segments.len()
    );
}

/// A burst of small Sends leaves several FPDUs to a segment (never more than one MSS, each
/// whole), and every message arrives, in order, byte for byte.
#[test]
fn small_fpdus_are_packed_several_to_a_segment() {
    use iwarp_engine::{Access, RecvWr, SendOp, SendWr, Status};
    use iwarpd::port::pcap::PcapPort;

    const N: usize = 200;
    const LEN: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("b.pcap");
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 8, 0x0a], B_MAC, 1500);
    let pb = PcapPort::new(pb, &pcap).unwrap();
    let (mut a, mut b) = pair(pa, pb, Settings::default());
    let a_mem = a.mem(N * LEN, Access::ALL);
    let b_mem = b.mem(N * LEN, Access::ALL);
    b_mem.fill(3);
    for i in 0..N {
        let wr = RecvWr::new(i as u64, &[a_mem.sge(i * LEN, LEN)]);
        a.rnic.post_recv(a.qp, wr).unwrap();
    }
    for i in 0..N {
        let send = SendOp::Send {
            solicited: false,
            invalidate: None,
        };
        let wr = SendWr::new(i as u64, send, &[b_mem.sge(i * LEN, LEN)]);
        b.rnic.post_send(b.qp, wr).unwrap();
    }
    let mut received = Vec::new();
    until(&mut a, &mut b, 20, |a, b| {
        b.wcs();
        received.extend(a.wcs().into_iter().map(|w| {
            assert_eq!(w.status, Status::Success);
            w.wr_id
        }));
        received.len() == N
    });
    assert_eq!(received, (0..N as u64).collect::<Vec<_>>());
    assert!(a_mem.bytes(0, N * LEN) == b_mem.bytes(0, N * LEN));
    drop(b);
    let segments = b_segments(&pcap);
    let fpdus: usize = segments.iter().map(Vec::len).sum();
    assert_eq!(fpdus, N, "one FPDU per Send");
    assert!(
        segments.iter().all(|s| s.iter().sum::<usize>() <= 1460),
        "a segment over the MSS"
    );
    // 64 octets of payload make an 88-octet FPDU: 16 fit in 1460.
    let most = segments.iter().map(Vec::len).max().unwrap();
    assert_eq!(most, 16, "FPDUs in the fullest segment");
    assert!(
        segments.len() <= N.div_ceil(8),
        "{} segments for {N} Sends",
        segments.len()
    );
    // Wireshark reads every FPDU of a packed segment, CRCs good.
    if let Some(d) = iwarp_testkit::tshark_check(&pcap, N, true) {
        assert!(d.left_out.is_empty(), "retransmissions: {:?}", d.left_out);
    }
}
