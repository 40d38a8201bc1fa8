//! Two nodes over the in-memory port pair: TCP setup, MPA, and a 4 MiB RDMA Write whose
//! bytes are compared — the node path with no socket or file at all; FPDUs kept whole in
//! their segments when the peer's window is the limit; ARP pacing.

mod common;

use common::{pair, pair_tcps, write_b_to_a};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::memory::MemoryPort;

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
    let pd = node.rnic.alloc_pd();
    let cq = node.rnic.create_cq(16);
    let caps = iwarp_engine::QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq: None,
    };
    let qp = node.rnic.create_qp(pd, cq, cq, caps).unwrap();
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
        node.poll();
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
    let mut segments = 0;
    let mut octets = 0;
    for frame in iwarp_testkit::capture_frames(&pcap) {
        let Some(seg) = iwarp_testkit::tcp_segment(&frame) else {
            continue;
        };
        let payload = seg.payload;
        if seg.src_mac != [2, 0, 0, 0, 8, 0x0b]
            || payload.is_empty()
            || payload.starts_with(b"MPA ID Req Frame")
        {
            continue;
        }
        let fpdus = fpdus_in(payload).unwrap_or_else(|e| panic!("segment at {}: {e}", seg.seq));
        segments += 1;
        octets += fpdus.iter().sum::<usize>();
    }
    // At least the Write's 1 MiB went by in whole FPDUs.
    assert!(
        octets > len,
        "{octets} octets of FPDUs in {segments} segments"
    );
}
