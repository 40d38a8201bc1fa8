//! A Linux peer must not see our data twice: 1,000 RDMA Writes of 64 B, each posted as the
//! last completes (Debian's `ib_write_bw -t 1`, with our libraries), to Linux soft-iWARP in
//! the QEMU guest of `scripts/siw-guest`. Linux delays its ACKs (40 ms and more for a lone
//! segment), so a retransmission timer that does not allow for that resends data the peer
//! holds. The link is a bridge on this machine and loses nothing: any data segment we send
//! twice is spurious. Counted in the capture (our own reading of the sequence numbers, and
//! Wireshark's TCP analysis) and in our daemon's counters.
//!
//! The guest's virtual CPU is emulated, and on a loaded host it can stall for longer than
//! any ACK delay. Our timer waits the RTT plus `tcp.peer_ack_delay_us` (40 ms, Linux's
//! shortest ACK delay), so a resend is excused when at least that long passed since the
//! original with nothing from the guest on that connection in between. A resend sooner, or
//! while the guest was answering, fails the test; with a timer of RFC 6298 alone (a 1 ms
//! floor here) every delayed ACK would be one.
//!
//! Root only (TAP and a bridge), and only where the guest is built, unless
//! `IWARP_REQUIRE_SIW=1` (CI), where a missing piece fails the test.

mod common;

use iwarp_testkit::{self as testkit, tcp_segment};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

const WRITES: &str = "1000";
/// The bridge's number in `testkit::siw::run` (10.79.0.0/24, bridge brsiw9): one no other
/// siw test uses, as they may run at the same time.
const N: u8 = 9;
/// How long Linux may hold the ACK of a lone segment at least (its `TCP_ATO_MIN`): a resend
/// sooner is spurious whatever the guest does.
const LINUX_ACK_DELAY: Duration = Duration::from_millis(40);

/// A data segment of ours that repeats octets sent before.
struct Resend {
    /// The connection's port, the offset in its stream, the length.
    port: u16,
    offset: u32,
    len: usize,
    /// Since the first copy of these octets was sent.
    after: Duration,
    /// Whether the guest sent nothing on this connection since that first copy.
    guest_silent: bool,
}

/// Our data segments (sent from `ours`) that repeat octets sent before, and the SYNs sent
/// again for the same connection. A keep-alive (one octet just below the highest sent,
/// RFC 9293 section 3.8.4) is none.
fn resent(pcap: &Path, ours: [u8; 4]) -> (Vec<Resend>, usize) {
    #[derive(Default)]
    struct Conn {
        /// The end of the highest sequence sent.
        high: Option<u32>,
        syn: Option<u32>,
        /// Each first copy: its start, end and time.
        firsts: Vec<(u32, u32, Duration)>,
        /// When the guest last sent on this connection.
        guest_at: Option<Duration>,
    }
    let mut conns: HashMap<(u16, u16), Conn> = HashMap::new();
    let (mut data, mut syns) = (Vec::new(), 0);
    for (at, frame) in testkit::capture_frames_timed(pcap) {
        let Some(s) = tcp_segment(&frame) else {
            continue;
        };
        let at = at.expect("our daemon's capture times every frame");
        if s.dst.0 == ours {
            conns.entry((s.dst.1, s.src.1)).or_default().guest_at = Some(at);
            continue;
        }
        if s.src.0 != ours {
            continue;
        }
        let conn = conns.entry((s.src.1, s.dst.1)).or_default();
        if s.syn {
            syns += usize::from(conn.syn.is_some());
            conn.syn = Some(s.seq);
            continue;
        }
        if s.payload.is_empty() {
            continue;
        }
        let end = s.seq.wrapping_add(s.payload.len() as u32);
        // Sequence arithmetic (RFC 9293 section 3.4).
        let before = |a: u32, b: u32| (a.wrapping_sub(b) as i32) < 0;
        match conn.high {
            Some(high) if s.payload.len() == 1 && end == high => {}
            Some(high) if before(s.seq, high) => {
                let first = conn
                    .firsts
                    .iter()
                    .rev()
                    .find(|&&(l, r, _)| !before(s.seq, l) && before(s.seq, r))
                    .map_or(at, |&(_, _, t)| t);
                data.push(Resend {
                    port: s.src.1,
                    offset: s.seq.wrapping_sub(conn.syn.unwrap_or(0)),
                    len: s.payload.len(),
                    after: at.saturating_sub(first),
                    guest_silent: conn.guest_at.is_none_or(|g| g < first),
                });
                if before(high, end) {
                    conn.firsts.push((high, end, at));
                    conn.high = Some(end);
                }
            }
            _ => {
                conn.firsts.push((s.seq, end, at));
                conn.high = Some(end);
            }
        }
    }
    (data, syns)
}

impl std::fmt::Debug for Resend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "port {} offset {} length {}, {:?} after the first copy, {}",
            self.port,
            self.offset,
            self.len,
            self.after,
            if self.guest_silent {
                "the guest silent"
            } else {
                "the guest answering"
            }
        )
    }
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
    // Reruns, each for the guest's timing rather than the transfer, likely on a loaded host:
    // - a client that connected before perftest's server listened again
    //   (`Run::perftest_beat_the_relisten`);
    // - siw's server still completing its last Send when our client, done and exited, reset
    //   the connection (`Run::perftest_guest_lost_its_close`).
    let r = testkit::siw::rerun_for(testkit::siw::OUTSIDE_RACE_RUNS, run, |r| {
        let relisten = (!r.ours.status.success() && r.perftest_beat_the_relisten())
            .then_some("perftest's client connected before its server listened again");
        let close = (!r.guest_exited_0() && r.perftest_guest_lost_its_close())
            .then_some("siw's perftest was still closing when our side reset the connection");
        relisten.or(close)
    });
    let said = r.ours_said();
    assert!(
        r.ours.status.success(),
        "{}",
        r.ours_failed("our ib_write_bw")
    );
    assert!(r.guest_exited_0(), "siw's ib_write_bw failed");
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
        "{WRITES} Writes of 64 B to siw: data segments resent {} {data:?} (Wireshark finds \
         {:?}), SYNs resent {syns}; our counters: retransmits {:?}, rtos {:?}, spurious {:?}",
        data.len(),
        wireshark.as_ref().map(|f| f.len()),
        counter("retransmits"),
        counter("rtos"),
        counter("spurious_retransmits"),
    );
    let early: Vec<&Resend> = data
        .iter()
        .filter(|r| r.after < LINUX_ACK_DELAY || !r.guest_silent)
        .collect();
    assert!(
        early.is_empty(),
        "data sent twice to a peer that lost nothing, before Linux's {LINUX_ACK_DELAY:?} \
         ACK delay or while it was answering: {early:?}"
    );
    if let Some(frames) = wireshark {
        assert_eq!(
            frames.len(),
            data.len(),
            "Wireshark's retransmissions: {frames:?}"
        );
    }
    // The counters count data segments resent (SYNs apart).
    assert_eq!(
        counter("retransmits"),
        Some(data.len() as u64),
        "our counters: {said}"
    );
}
