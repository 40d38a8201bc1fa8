//! Root only: two nodes on TAP interfaces behind a Linux bridge whose nftables rule marks one
//! in twenty forwarded ECN-capable packets CE (`ip ecn set ce`; this kernel has no RED or
//! fq_codel to mark them). Both ends negotiate ECN, the marks are echoed back, the sender's
//! window comes down for them (no loss involved), and the data arrives intact. Skipped, saying
//! so, when not run as root.

mod common;

use common::{pair_tcp, sh, Bridge, End};
use iwarp_engine::{Access, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::cc::Algorithm;
use iwarpd::node::TcpSettings;
use iwarpd::port::tap::TapPort;
use std::time::{Duration, Instant};

const TABLE: &str = "iwecnmark";

/// The marking rule, with a counter of the packets it marked; removed when dropped.
struct Marker;

impl Marker {
    fn new() -> Marker {
        let _ = sh(&format!("nft delete table bridge {TABLE} 2>/dev/null"));
        assert!(
            sh(&format!(
                "nft add table bridge {TABLE} && \
                 nft add chain bridge {TABLE} marking '{{ type filter hook forward priority 0; }}' && \
                 nft add rule bridge {TABLE} marking ip protocol tcp ip ecn ect0 counter \
                 numgen random mod 20 0 ip ecn set ce counter"
            )),
            "nft rule (ip ecn set ce)"
        );
        Marker
    }

    /// (ECT(0) packets seen, of them marked CE), from the rule's two counters.
    fn counts(&self) -> (u64, u64) {
        let out = std::process::Command::new("nft")
            .args(["list", "table", "bridge", TABLE])
            .output()
            .expect("nft list");
        let text = String::from_utf8_lossy(&out.stdout);
        let n: Vec<u64> = text
            .split("counter packets ")
            .skip(1)
            .filter_map(|s| s.split_whitespace().next()?.parse().ok())
            .collect();
        assert_eq!(n.len(), 2, "{text}");
        (n[0], n[1])
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = sh(&format!("nft delete table bridge {TABLE}"));
    }
}

/// B Writes `total` octets into A in 1 MiB chunks; returns how often B's window came down
/// between two polls in which an ECN-Echo came and nothing was resent.
fn write_counting_cuts(a: &mut End<TapPort>, b: &mut End<TapPort>, total: usize) -> u64 {
    let chunk = 1 << 20;
    let a_mem = a.mem(chunk, Access::ALL);
    let b_mem = b.mem(chunk, Access::ALL);
    b_mem.fill(23);
    let (mut sent, mut done, mut cuts) = (0, 0, 0);
    let mut last = b.node.conn_tcp(b.conn).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while done < total / chunk {
        assert!(Instant::now() < deadline, "stalled at {done} MiB");
        if sent < total / chunk && sent - done < 4 {
            b.post_write(sent as u64, b_mem.sge(0, chunk), &a_mem, 0);
            sent += 1;
        }
        a.node.poll();
        b.node.poll();
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success, "no data lost");
            done += 1;
        }
        let now = b.node.conn_tcp(b.conn).unwrap();
        if now.cwnd < last.cwnd
            && now.counters.ecn_marks > last.counters.ecn_marks
            && now.counters.retransmits == last.counters.retransmits
        {
            cuts += 1;
        }
        last = now;
    }
    // Completions come with the data placed: what A holds is what B sent.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a_mem.bytes(0, chunk) != b_mem.bytes(0, chunk) {
        assert!(Instant::now() < deadline, "data intact");
        a.node.poll();
        b.node.poll();
    }
    cuts
}

fn marked_run(congestion: Algorithm, ecn: bool, mac: u8) {
    let (ta, tb) = (format!("iwecA{mac}"), format!("iwecB{mac}"));
    let pa = TapPort::open(&ta, [2, 0, 0, 0, mac, 0x0a], 1500).expect("TAP");
    let pb = TapPort::open(&tb, [2, 0, 0, 0, mac, 0x0b], 1500).unwrap();
    let _bridge = Bridge::new("iwecbr", &[&ta, &tb]);
    let marker = Marker::new();
    let tcp = TcpSettings {
        congestion,
        ecn,
        user_timeout: Duration::from_secs(30),
        ..TcpSettings::default()
    };
    let (mut a, mut b) = pair_tcp(pa, pb, Settings::default(), tcp);
    let (at, bt) = (
        a.node.conn_tcp(a.conn).unwrap(),
        b.node.conn_tcp(b.conn).unwrap(),
    );
    // RFC 3168 section 6.1.1: both ends agreed in the handshake.
    assert!(at.ecn && bt.ecn, "ECN negotiated: {at:?} / {bt:?}");
    let cuts = write_counting_cuts(&mut a, &mut b, 16 << 20);
    let (ect, ce) = marker.counts();
    let (at, bt) = (
        a.node.conn_tcp(a.conn).unwrap(),
        b.node.conn_tcp(b.conn).unwrap(),
    );
    println!(
        "{congestion:?}: {ect} ECT(0) packets forwarded, {ce} marked CE; receiver saw {} \
         marks, sender {} echoes, {cuts} window cuts without loss; sender {bt:?}",
        at.counters.ecn_marks, bt.counters.ecn_marks
    );
    assert!(
        ect > 0 && ce > 0,
        "our data went ECN-capable and some was marked"
    );
    assert!(at.counters.ecn_marks > 0, "the receiver counted CE marks");
    assert!(bt.counters.ecn_marks > 0, "the sender counted ECE echoes");
    assert!(cuts > 0, "the window came down for the marks");
    if congestion == Algorithm::Dctcp {
        // RFC 8257 section 3.2: an ACK per change of CE state, so that the echoes speak for
        // most marks although ACKs cover several segments.
        assert!(
            2 * bt.counters.ecn_marks >= at.counters.ecn_marks,
            "echoes lost: {} of {}",
            bt.counters.ecn_marks,
            at.counters.ecn_marks
        );
    }
}

#[test]
fn ce_marks_are_echoed_and_the_window_comes_down() {
    if !iwarp_testkit::root_or_skip("ce_marks_are_echoed_and_the_window_comes_down") {
        return;
    }
    // One after the other: they share the bridge and the rule.
    marked_run(Algorithm::NewReno, true, 0x31);
    marked_run(Algorithm::Dctcp, true, 0x32);
}
