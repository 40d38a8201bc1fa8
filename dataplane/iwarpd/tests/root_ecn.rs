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
    /// Marks what the bridge forwards from `taps` only (the rule's hook sees every bridge).
    fn new(taps: [&str; 2]) -> Marker {
        let _ = sh(&format!("nft delete table bridge {TABLE} 2>/dev/null"));
        assert!(
            sh(&format!(
                "nft add table bridge {TABLE} && \
                 nft add chain bridge {TABLE} marking '{{ type filter hook forward priority 0; }}' && \
                 nft add rule bridge {TABLE} marking iifname {{ {}, {} }} ip protocol tcp \
                 ip ecn ect0 counter numgen random mod 20 0 ip ecn set ce counter",
                taps[0], taps[1]
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
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
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
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    cuts
}

fn marked_run(congestion: Algorithm, ecn: bool, mac: u8) {
    let (ta, tb) = (format!("iwecA{mac}"), format!("iwecB{mac}"));
    let pa = TapPort::open(&ta, [2, 0, 0, 0, mac, 0x0a], 1500).expect("TAP");
    let pb = TapPort::open(&tb, [2, 0, 0, 0, mac, 0x0b], 1500).unwrap();
    let _bridge = Bridge::new("iwecbr", &[&ta, &tb]);
    let marker = Marker::new([&ta, &tb]);
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

/// A kernel TCP in a namespace (`net.ipv4.tcp_ecn = 1`: it asks for ECN and grants it),
/// bridged to our TAP ports; removed when dropped.
struct LinuxPeer;

impl LinuxPeer {
    fn new(taps: &[&str]) -> LinuxPeer {
        LinuxPeer::clean();
        let mut script = "set -e
            ip netns add iweclx
            ip link add iweclbr type bridge && ip link set iweclbr up
            ip link add iweclv0 type veth peer name iweclv1
            ip link set iweclv0 netns iweclx
            ip netns exec iweclx ip addr add 10.77.9.21/24 dev iweclv0
            ip netns exec iweclx ip link set iweclv0 up
            ip netns exec iweclx ip link set lo up
            ip netns exec iweclx sysctl -qw net.ipv4.tcp_ecn=1
            ip link set iweclv1 master iweclbr && ip link set iweclv1 up
            "
        .to_string();
        for t in taps {
            script.push_str(&format!(
                "ip link set {t} master iweclbr && ip link set {t} up\n"
            ));
        }
        assert!(sh(&script), "namespace and bridge");
        LinuxPeer
    }

    fn clean() {
        let _ = sh(
            "ip netns del iweclx 2>/dev/null; ip link del iweclbr 2>/dev/null; \
             ip link del iweclv1 2>/dev/null",
        );
    }
}

impl Drop for LinuxPeer {
    fn drop(&mut self) {
        LinuxPeer::clean();
    }
}

/// How many packets of the capture match the display filter.
fn matching(pcap: &std::path::Path, filter: &str) -> usize {
    iwarp_testkit::tshark_fields(pcap, filter, "frame.number")
        .expect("tshark")
        .len()
}

/// Polls `end` until `done` or `secs` pass; whether `done` came.
fn poll_until<P: iwarpd::port::Port>(
    end: &mut End<P>,
    secs: u64,
    mut done: impl FnMut(&mut End<P>) -> bool,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        end.node.poll(&mut end.rnic);
        if done(end) {
            return true;
        }
    }
    false
}

#[test]
fn ecn_is_negotiated_with_linux_both_ways_as_a_capture_shows() {
    if !iwarp_testkit::root_or_skip("ecn_is_negotiated_with_linux_both_ways_as_a_capture_shows") {
        return;
    }
    if !sh("command -v iperf3 >/dev/null && command -v tshark >/dev/null") {
        eprintln!("ecn_is_negotiated_with_linux: skipped (no iperf3 or tshark)");
        return;
    }
    use iwarpd::port::pcap::PcapPort;
    use std::process::{Command, Stdio};
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (out_pcap, in_pcap) = (
        dir.join("ecn-linux-out.pcap"),
        dir.join("ecn-linux-in.pcap"),
    );
    let tcp = TcpSettings {
        ecn: true,
        ..TcpSettings::default()
    };
    let ta = TapPort::open("iwecLo", [2, 0, 0, 0, 0x33, 0x0a], 1500).expect("TAP");
    let tb = TapPort::open("iwecLi", [2, 0, 0, 0, 0x33, 0x0b], 1500).unwrap();
    let _net = LinuxPeer::new(&["iwecLo", "iwecLi"]);
    let linux: std::net::Ipv4Addr = "10.77.9.21".parse().unwrap();

    // We connect to Linux (an iperf3 server: a TCP listener that speaks no MPA, enough for
    // the handshake and our first data).
    let mut out = End::with_tcp(
        PcapPort::new(ta, &out_pcap).unwrap(),
        "10.77.9.10".parse().unwrap(),
        tcp,
    );
    let server = Command::new("ip")
        .args([
            "netns", "exec", "iweclx", "iperf3", "-s", "-1", "-p", "5301",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3 server");
    let _server = iwarp_testkit::Proc(server);
    let listening = || sh("ip netns exec iweclx ss -ltn | grep -q ':5301 '");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listening() {
        assert!(Instant::now() < deadline, "iperf3 server never listened");
    }
    let conn = out
        .node
        .connect(linux, 5301, 40007, out.qp, Settings::default())
        .unwrap();
    assert!(
        poll_until(&mut out, 20, |e| e.node.conn_tcp(conn).is_some()),
        "TCP to Linux established"
    );
    let sent = out.node.counters().tx_frames;
    // Our MPA Request follows at once: the first new data.
    poll_until(&mut out, 2, |e| e.node.counters().tx_frames > sent + 1);
    let ecn = out.node.conn_tcp(conn).unwrap().ecn;
    drop(out);

    // Linux connects to us (iperf3's client; its first data is its cookie).
    let mut inb = End::with_tcp(
        PcapPort::new(tb, &in_pcap).unwrap(),
        "10.77.9.11".parse().unwrap(),
        tcp,
    );
    let lconn = inb.node.listen(5302, inb.qp, Settings::default()).unwrap();
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            "iweclx",
            "iperf3",
            "-c",
            "10.77.9.11",
            "-p",
            "5302",
        ])
        .args(["-t", "1", "--connect-timeout", "5000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 client");
    let _client = iwarp_testkit::Proc(client);
    // Established, then its first data (the cookie) ends our wait for an MPA Request.
    assert!(
        poll_until(&mut inb, 20, |e| e.node.conn_tcp(lconn).is_some()),
        "TCP from Linux established"
    );
    let lecn = inb.node.conn_tcp(lconn).map(|t| t.ecn);
    poll_until(&mut inb, 5, |e| {
        e.node.state(lconn) != Some(&iwarpd::node::ConnState::AwaitRequest)
    });
    drop(inb);

    let ours = "ip.src==10.77.9.10";
    let theirs = "ip.src==10.77.9.21";
    let out_counts = [
        // RFC 3168 section 6.1.1: our ECN-setup SYN, Linux's ECN-setup SYN-ACK.
        matching(&out_pcap, &format!("{ours} && tcp.flags.syn==1 && tcp.flags.ack==0 && tcp.flags.ece==1 && tcp.flags.cwr==1 && ip.dsfield.ecn==0")),
        matching(&out_pcap, &format!("{theirs} && tcp.flags.syn==1 && tcp.flags.ack==1 && tcp.flags.ece==1 && tcp.flags.cwr==0")),
        // Our first data ECN-capable (ECT(0)), no segment without data so.
        matching(&out_pcap, &format!("{ours} && tcp.len>0 && ip.dsfield.ecn==2")),
        matching(&out_pcap, &format!("{ours} && tcp.len==0 && ip.dsfield.ecn!=0")),
    ];
    let ours = "ip.src==10.77.9.11";
    let in_counts = [
        matching(&in_pcap, &format!("{theirs} && tcp.flags.syn==1 && tcp.flags.ack==0 && tcp.flags.ece==1 && tcp.flags.cwr==1")),
        matching(&in_pcap, &format!("{ours} && tcp.flags.syn==1 && tcp.flags.ack==1 && tcp.flags.ece==1 && tcp.flags.cwr==0 && ip.dsfield.ecn==0")),
        // Linux took our SYN-ACK as ECN-setup: its data goes ECT(0) (or CE, were a router
        // to mark it).
        matching(&in_pcap, &format!("{theirs} && tcp.len>0 && ip.dsfield.ecn>=2")),
    ];
    println!(
        "we connect: {out_counts:?} (ECN-setup SYN, SYN-ACK, our ECT(0) data, ECT without \
         data), ECN agreed {ecn}; Linux connects: {in_counts:?} (its ECN-setup SYN, our \
         SYN-ACK, its ECT(0) data), ECN agreed {lecn:?}"
    );
    assert!(ecn, "our side agreed with Linux");
    assert!(out_counts[0] >= 1 && out_counts[1] >= 1, "{out_counts:?}");
    assert!(out_counts[2] >= 1 && out_counts[3] == 0, "{out_counts:?}");
    assert_eq!(lecn, Some(true), "our side agreed with Linux");
    assert!(in_counts.iter().all(|&n| n >= 1), "{in_counts:?}");
    let _ = std::fs::remove_file(&out_pcap);
    let _ = std::fs::remove_file(&in_pcap);
}
