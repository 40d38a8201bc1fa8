//! `tshark_check` counts FPDUs, not frames. A TCP segment may carry several complete FPDUs
//! (RFC 5044 section 8), and Linux's TCP under siw packs them so: a frame count once fell one
//! short of the CRCs Wireshark checked. This test builds such a segment from a real siw capture.
//! And it decodes retransmitted segments too: a retransmission may carry an FPDU sent for the
//! first time, which Wireshark's sequence analysis would skip with the rest of the segment.

use iwarp_testkit::{capture_frames, tshark_check, tshark_fields};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::path::Path;
use std::time::Duration;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../dataplane/wire/testdata/captures/siw-rping-crc.pcap"
);

/// A TCP segment of an Ethernet/IPv4 frame: its 4-tuple, sequence number and payload offset.
struct Segment {
    tuple: [u8; 12],
    seq: u32,
    payload: usize,
}

fn segment(frame: &[u8]) -> Segment {
    let ihl = (frame[14] & 0x0f) as usize * 4;
    let tcp = 14 + ihl;
    let mut tuple = [0; 12];
    tuple[..8].copy_from_slice(&frame[26..34]);
    tuple[8..].copy_from_slice(&frame[tcp..tcp + 4]);
    Segment {
        tuple,
        seq: u32::from_be_bytes(frame[tcp + 4..tcp + 8].try_into().unwrap()),
        payload: tcp + (frame[tcp + 12] >> 4) as usize * 4,
    }
}

/// The capture with the first two back-to-back data segments of one direction (after the MPA
/// exchange) joined into a single segment, as the peer's TCP would send them.
fn with_two_fpdus_in_one_frame() -> Vec<Vec<u8>> {
    let mut frames = capture_frames(Path::new(CAPTURE));
    for i in 8..frames.len() {
        let a = segment(&frames[i]);
        if frames[i].len() == a.payload {
            continue;
        }
        let next = (i + 1..frames.len()).find(|&j| {
            let b = segment(&frames[j]);
            b.tuple == a.tuple && frames[j].len() > b.payload
        });
        let Some(j) = next else { continue };
        let b = segment(&frames[j]);
        if b.seq != a.seq.wrapping_add((frames[i].len() - a.payload) as u32) {
            continue;
        }
        let tail = frames.remove(j)[b.payload..].to_vec();
        let joined = &mut frames[i];
        joined.extend_from_slice(&tail);
        let ip_len = (joined.len() - 14) as u16;
        joined[16..18].copy_from_slice(&ip_len.to_be_bytes());
        return frames;
    }
    panic!("no two back-to-back data segments in {CAPTURE}");
}

#[test]
fn a_frame_carrying_two_fpdus_counts_as_two() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("joined.pcap");
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        snaplen: 65535,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(&pcap).unwrap(), header).unwrap();
    for (n, frame) in with_two_fpdus_in_one_frame().iter().enumerate() {
        let ts = Duration::from_millis(n as u64);
        w.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame))
            .unwrap();
    }
    drop(w);
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
    tshark_check(pcap, 10, true);
}
