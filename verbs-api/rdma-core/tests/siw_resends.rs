//! A Linux peer must not see our data twice: 1,000 RDMA Writes of 64 B, each posted as the
//! last completes (Debian's `ib_write_bw -t 1`, with our libraries), to Linux soft-iWARP in
//! the QEMU guest of `scripts/siw-guest`. Linux delays its ACKs (40 ms and more for a lone
//! segment), and a guest's ACKs come late whenever its virtual CPU waits for the host's, so
//! a retransmission timer that does not allow for either resends data the peer holds. The
//! link is a bridge on this machine and loses nothing: any data segment we send twice is
//! spurious. Counted in the capture (our own reading of the sequence numbers, and
//! Wireshark's TCP analysis) and in our daemon's counters.
//!
//! Root only (TAP and a bridge), and only where the guest is built, unless
//! `IWARP_REQUIRE_SIW=1` (CI), where a missing piece fails the test.

mod common;

use iwarp_testkit::{self as testkit, tcp_segment};
use std::collections::HashMap;
use std::path::Path;

const WRITES: &str = "1000";
/// The bridge's number in `testkit::siw::run` (10.79.0.0/24, bridge brsiw9): one no other
/// siw test uses, as they may run at the same time.
const N: u8 = 9;

/// Our data segments (sent from `ours`) that repeat octets sent before, each as (connection's
/// port, offset in its stream, length), and the SYNs sent again for the same connection.
/// A keep-alive (one octet just below the highest sent, RFC 9293 section 3.8.4) is none.
fn resent(pcap: &Path, ours: [u8; 4]) -> (Vec<(u16, u32, usize)>, usize) {
    // Per connection: the end of the highest sequence sent, and whether a SYN was seen.
    let mut sent: HashMap<(u16, u16), (Option<u32>, bool, u32)> = HashMap::new();
    let (mut data, mut syns) = (Vec::new(), 0);
    for frame in testkit::capture_frames(pcap) {
        let Some(s) = tcp_segment(&frame) else {
            continue;
        };
        if s.src.0 != ours {
            continue;
        }
        let conn = sent.entry((s.src.1, s.dst.1)).or_default();
        if s.syn {
            syns += usize::from(conn.1);
            conn.1 = true;
            conn.2 = s.seq;
            continue;
        }
        if s.payload.is_empty() {
            continue;
        }
        let end = s.seq.wrapping_add(s.payload.len() as u32);
        match conn.0 {
            // Sequence arithmetic (RFC 9293 section 3.4): before the highest end sent.
            Some(high) if s.payload.len() == 1 && end == high => {}
            Some(high) if (s.seq.wrapping_sub(high) as i32) < 0 => {
                data.push((s.src.1, s.seq.wrapping_sub(conn.2), s.payload.len()));
                if (end.wrapping_sub(high) as i32) > 0 {
                    conn.0 = Some(end);
                }
            }
            _ => conn.0 = Some(end),
        }
    }
    (data, syns)
}

#[test]
fn a_thousand_small_writes_to_siw_are_not_resent() {
    let program = "/usr/bin/ib_write_bw";
    let Some(guest) = testkit::siw::guest_with(program) else {
        return;
    };
    if !common::have(program) {
        return;
    }
    let their_ip = format!("10.7{N}.0.2");
    let args = ["-R", "-s", "64", "-n", WRITES, "-t", "1"];
    let run = || {
        testkit::siw::run(
            &guest,
            N,
            |rt| {
                // Our client, once siw's server listens (`UNTIL_GUEST_LISTENS`); then the
                // daemon's counters, once it has rewritten its stats file (each second) after
                // the last Write.
                let script = format!(
                    "{}; \"$0\" \"$@\" || exit 1; sleep 2; echo; cat \"$IWARP_RUNTIME_DIR/stats\"",
                    testkit::siw::UNTIL_GUEST_LISTENS
                );
                let mut c = common::with_our_libs("sh");
                c.args(["-c", &script, program])
                    .args(args)
                    .arg(&their_ip)
                    .env("IWARP_RUNTIME_DIR", rt);
                c
            },
            &[&["ib_write_bw"][..], &args[..]].concat(),
        )
    };
    // A client that connected before perftest's server listened again
    // (`Run::perftest_beat_the_relisten`): the guest's timing, not the transfer, and on a
    // loaded host likely run after run.
    let r = testkit::siw::rerun_for(testkit::siw::OUTSIDE_RACE_RUNS, run, |r| {
        (!r.ours.status.success() && r.perftest_beat_the_relisten())
            .then_some("perftest's client connected before its server listened again")
    });
    let said = r.ours_said();
    assert!(
        r.ours.status.success(),
        "{}",
        r.ours_failed("our ib_write_bw")
    );
    assert!(
        r.guest.contains("guest: exit 0"),
        "siw's ib_write_bw failed"
    );
    assert!(said.contains("#bytes"), "{said}");

    let ours = [10, 70 + N, 0, 1];
    let (data, syns) = resent(&r.pcap, ours);
    let wireshark = testkit::tshark_analysed(
        &r.pcap,
        &format!(
            "ip.src == 10.7{N}.0.1 && tcp.len > 0 && (tcp.analysis.retransmission || \
             tcp.analysis.fast_retransmission || tcp.analysis.spurious_retransmission)"
        ),
    );
    let counter = |k: &str| testkit::stat(&said, k);
    println!(
        "{WRITES} Writes of 64 B to siw: data segments resent {} {data:?} (port, offset, \
         length; Wireshark finds {:?}), SYNs resent {syns}; our counters: retransmits {:?}, \
         rtos {:?}, spurious {:?}",
        data.len(),
        wireshark.as_ref().map(|f| f.len()),
        counter("retransmits"),
        counter("rtos"),
        counter("spurious_retransmits"),
    );
    assert_eq!(
        data.len(),
        0,
        "data segments sent twice to a peer that lost nothing"
    );
    if let Some(frames) = wireshark {
        assert!(frames.is_empty(), "Wireshark's retransmissions: {frames:?}");
    }
    // The counters count data segments resent (SYNs apart).
    assert_eq!(counter("retransmits"), Some(0), "our counters: {said}");
}
