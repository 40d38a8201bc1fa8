//! Root only: our RDMA Write stream and a kernel TCP CUBIC stream (iperf3, in network
//! namespaces) share a 200 Mbit/s bottleneck: two bridges joined by a veth pair whose
//! egress toward the receivers is shaped by `tbf` (this kernel has no netem or fq_codel).
//! Neither flow may starve: each gets at least a quarter of the link, and our data arrives
//! intact. Our two nodes share the test's one thread (and an unoptimised build may share a
//! busy machine), so our flow alone may not fill the link: it must then keep at least a
//! quarter of what it reached alone, measured first. Skipped, saying so, when not root or
//! without iperf3.
//!
//! ```text
//!  node B (iwfB) ─┐                    ┌─ node A (iwfA)
//!  iperf3 client ─┤ br0 ─[tbf]─ veth ─ br1 ├─ iperf3 server
//! ```

mod common;

use common::{pair_tcp, sh, End};
use iwarp_engine::{Access, Status};
use iwarp_testkit::bottleneck::{iperf3_received_bps, jain, Bottleneck, Spec};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::tap::TapPort;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RATE_MBIT: f64 = 200.0;
const SECS: u64 = 6;

/// B RDMA-Writes 1 MiB chunks into A for `secs`; returns the rate (bit/s) A received at in
/// that time, and checks the chunk's bytes.
fn write_for(a: &mut End<TapPort>, b: &mut End<TapPort>, secs: u64) -> f64 {
    let chunk = 1 << 20;
    let a_mem = a.mem(chunk, Access::ALL);
    let b_mem = b.mem(chunk, Access::ALL);
    b_mem.fill(7);
    let (mut sent, mut done) = (0usize, 0usize);
    let start = Instant::now();
    let rx0 = a.node.counters().stream_bytes_rx;
    let mut rx_at_end = None;
    let deadline = start + Duration::from_secs(secs + 60);
    while rx_at_end.is_none() || done < sent {
        assert!(Instant::now() < deadline, "stalled at {done} of {sent}");
        if rx_at_end.is_none() && start.elapsed() >= Duration::from_secs(secs) {
            rx_at_end = Some(a.node.counters().stream_bytes_rx - rx0);
        }
        if rx_at_end.is_none() && sent - done < 4 {
            b.post_write(sent as u64, b_mem.sge(0, chunk), &a_mem, 0);
            sent += 1;
        }
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success, "no data lost");
            done += 1;
        }
    }
    // Completions come with the data placed (RFC 5040 section 2 Write semantics end to end
    // over TCP): what A holds is what B sent.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a_mem.bytes(0, chunk) != b_mem.bytes(0, chunk) {
        assert!(Instant::now() < deadline, "data intact");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    rx_at_end.unwrap_or(0) as f64 * 8.0 / secs as f64
}

#[test]
fn an_rdma_stream_and_a_kernel_cubic_stream_share_a_bottleneck() {
    if !iwarp_testkit::root_or_skip("an_rdma_stream_and_a_kernel_cubic_stream_share_a_bottleneck") {
        return;
    }
    if !sh("command -v iperf3 >/dev/null") {
        eprintln!(
            "an_rdma_stream_and_a_kernel_cubic_stream_share_a_bottleneck: skipped (no iperf3)"
        );
        return;
    }
    let ta = TapPort::open("iwfA", [2, 0, 0, 0, 8, 0x0a], 1500).expect("TAP");
    let tb = TapPort::open("iwfB", [2, 0, 0, 0, 8, 0x0b], 1500).unwrap();
    let _net = Bottleneck::build(&Spec {
        prefix: "iwf".into(),
        senders: vec!["iwfB".into()],
        receivers: vec!["iwfA".into()],
        rate_mbit: RATE_MBIT as u32,
        client_ip: "10.88.0.20".parse().unwrap(),
        server_ip: "10.88.0.21".parse().unwrap(),
    })
    .expect("building the bottleneck");
    // A congested link may hold a flow's resends back for seconds; the test is about
    // sharing, not dead-peer detection.
    let tcp = iwarpd::node::TcpSettings {
        user_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    let (mut a, mut b) = pair_tcp(ta, tb, Settings::default(), tcp);
    let alone = write_for(&mut a, &mut b, 3);
    let server = Command::new("ip")
        .args(["netns", "exec", "iwfs", "iperf3", "-s", "-1"])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3 server");
    let _server = iwarp_testkit::Proc(server);
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            "iwfc",
            "iperf3",
            "-c",
            "10.88.0.21",
            "-C",
            "cubic",
            "-J",
        ])
        .args(["-t", &SECS.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("iperf3 client");
    let ours = write_for(&mut a, &mut b, SECS);
    let out = client.wait_with_output().expect("iperf3 ran");
    let json = String::from_utf8_lossy(&out.stdout);
    let kernel = iperf3_received_bps(&json).unwrap_or_else(|| panic!("iperf3 report: {json}"));
    let link = RATE_MBIT * 1e6;
    let tcp = b.node.conn_tcp(b.conn).unwrap();
    let jain = jain(&[ours, kernel]);
    println!(
        "{SECS} s through {RATE_MBIT} Mbit/s: ours {:.1} Mbit/s (alone {:.1}), kernel CUBIC \
         {:.1} Mbit/s, Jain {jain:.3}, utilisation {:.0} %; sender {tcp:?}",
        ours / 1e6,
        alone / 1e6,
        kernel / 1e6,
        (ours + kernel) / link * 100.0
    );
    assert!(
        ours >= link.min(alone) / 4.0,
        "ours starved: {:.1} Mbit/s",
        ours / 1e6
    );
    assert!(
        kernel >= link / 4.0,
        "kernel starved: {:.1} Mbit/s",
        kernel / 1e6
    );
}
