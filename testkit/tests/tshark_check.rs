//! `tshark_check` counts FPDUs, not frames. A TCP segment may carry several complete FPDUs
//! (RFC 5044 section 8), and Linux's TCP under siw packs them so: a frame count once fell one
//! short of the CRCs Wireshark checked. This test builds such a segment from a real siw capture.
//! And it decodes retransmitted segments too: a retransmission may carry an FPDU sent for the
//! first time, which Wireshark's sequence analysis would skip with the rest of the segment;
//! but a retransmission that smoltcp re-cut across FPDUs is left out, not failed.

use iwarp_testkit::{capture_frames, tcp_segment, tshark_check, tshark_fields};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::path::Path;
use std::time::Duration;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../dataplane/wire/testdata/captures/siw-rping-crc.pcap"
);
const RECUT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/testdata/siw-fast-retransmit-recut.pcap"
);

/// The capture with the first two back-to-back data segments of one direction (after the MPA
/// exchange) joined into a single segment, as the peer's TCP would send them.
fn with_two_fpdus_in_one_frame() -> Vec<Vec<u8>> {
    let mut frames = capture_frames(Path::new(CAPTURE));
    for i in 8..frames.len() {
        let Some(a) = tcp_segment(&frames[i]).filter(|a| !a.payload.is_empty()) else {
            continue;
        };
        let next = (i + 1..frames.len()).find(|&j| {
            tcp_segment(&frames[j])
                .is_some_and(|b| (b.src, b.dst) == (a.src, a.dst) && !b.payload.is_empty())
        });
        let Some(j) = next else { continue };
        let b = tcp_segment(&frames[j]).unwrap();
        if b.seq != a.seq.wrapping_add(a.payload.len() as u32) {
            continue;
        }
        let tail = frames[j][b.payload_at..].to_vec();
        frames.remove(j);
        let joined = &mut frames[i];
        joined.extend_from_slice(&tail);
        let ip_len = (joined.len() - 14) as u16;
        joined[16..18].copy_from_slice(&ip_len.to_be_bytes());
        return frames;
    }
    panic!("no two back-to-back data segments in {CAPTURE}");
}

/// `frames` as a pcap file at `path`, a millisecond apart.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        snaplen: 65535,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), header).unwrap();
    for (n, frame) in frames.iter().enumerate() {
        let ts = Duration::from_millis(n as u64);
        w.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame))
            .unwrap();
    }
}

#[test]
fn a_frame_carrying_two_fpdus_counts_as_two() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("joined.pcap");
    write_pcap(&pcap, &with_two_fpdus_in_one_frame());
    let Some(lengths) = tshark_fields(&pcap, "iwarp_ddp_rdmap", "iwarp_mpa.ulpdulength") else {
        eprintln!("skipped: tshark not installed");
        return;
    };
    // The join worked: one frame now holds two FPDUs, 21 in 20 frames.
    assert_eq!(lengths.len(), 20, "{lengths:?}");
    assert_eq!(lengths.iter().filter(|l| l.contains(',')).count(), 1);
    tshark_check(&pcap, 21, true);
}

/// Our daemon's own capture from a loaded machine (three test processes on two cores): the
/// peer's ACK came late, our TCP retransmitted the RDMA Write twice, and the second time it
/// appended the Send queued behind it, so the Send's only copy is in a retransmission (frame
/// 14, 112 octets from sequence 25). Sequence analysis found 7 of the 8 FPDUs here.
#[test]
fn an_fpdu_first_sent_in_a_retransmission_is_decoded() {
    let pcap = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/retransmit-appends-queued-send.pcap"
    ));
    let Some(lengths) = tshark_fields(pcap, "frame.number == 14", "iwarp_mpa.ulpdulength") else {
        eprintln!("skipped: tshark not installed");
        return;
    };
    // The Write (49 octets of ULPDU) and the Send (50).
    assert_eq!(lengths, ["49,50"]);
    // Write, its two retransmissions (the second with the Send), Read Request and Response,
    // two atomic Requests and Responses: 10 FPDUs, every CRC good.
    let decoded = tshark_check(pcap, 10, true).unwrap();
    assert_eq!((decoded.fpdus, decoded.left_out), (10, vec![]));
}

/// Part of a run against siw (the handshake, then one rping iteration's 64 KiB RDMA Write
/// with the Send behind it, from a sender that cut FPDUs at the edge of siw's window): siw's
/// TCP acknowledged part of an FPDU (frame 59 ended mid-FPDU), and our fast retransmission,
/// frame 112, started at that acknowledgement, mid-FPDU. Decoded alone it is malformed, and
/// it is a retransmission: left out, and every other frame decodes with good CRCs.
#[test]
fn a_retransmission_recut_across_fpdus_is_left_out() {
    let Some(decoded) = tshark_check(Path::new(RECUT), 90, true) else {
        eprintln!("skipped: tshark not installed");
        return;
    };
    assert_eq!(decoded.left_out, [112]);
    assert_eq!(decoded.good_crcs, decoded.fpdus);
}

/// Leaving re-cut retransmissions out forgives nothing else: the same capture with one CRC
/// octet of a first transmission (frame 13, siw's Send) changed fails.
#[test]
fn a_bad_crc_in_a_first_transmission_fails() {
    let mut frames = capture_frames(Path::new(RECUT));
    *frames[12].last_mut().unwrap() ^= 1;
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("bad-crc.pcap");
    write_pcap(&pcap, &frames);
    match std::panic::catch_unwind(|| tshark_check(&pcap, 90, true)) {
        Ok(None) => eprintln!("skipped: tshark not installed"),
        Ok(Some(decoded)) => panic!("a bad CRC passed: {decoded:?}"),
        Err(e) => {
            let why = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(
                why.contains("frame 13, a first transmission: 1 FPDUs, 0 CRCs good, 1 bad"),
                "{why}"
            );
        }
    }
}
