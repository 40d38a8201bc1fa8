//! DPDK's `net_af_packet` on a veth pair, with the Linux kernel in a network namespace as the
//! peer: a node on DPDK answers the kernel's ARP and takes its TCP through smoltcp.
//!
//! veth hands its peer TCP segments whose checksum is left to an offload that never happens
//! (the kernel's default for veth). A node drops each one and counts it in `bad_checksums`;
//! this is what the daemon warns about. With `ethtool -K tx off` on the kernel's side the
//! checksums are right:
//! - a connection to a port nobody listens on is refused (our RST);
//! - one to the node's listener completes its handshake, and the bytes the kernel then
//!   sends, not an MPA Request, fail the connection's setup.
//!
//! Needs the `dpdk` feature, root and `ethtool` (CI installs it); skipped, saying so,
//! otherwise.
#![cfg(feature = "dpdk")]

mod common;

use common::{sh, End};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, Node};
use iwarpd::port::dpdk::{eal_init, DpdkPort};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const OURS: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 2);
const KERNEL: &str = "10.79.0.1";
const LISTEN: u16 = 7174;

/// A veth pair whose peer end is in a namespace of its own; both removed on drop.
struct Veth {
    ns: String,
    host: String,
    peer: String,
}

impl Veth {
    fn new() -> Veth {
        let id = std::process::id() % 100_000;
        let v = Veth {
            ns: format!("iwaf{id}"),
            host: format!("iwafh{id}"),
            peer: format!("iwafp{id}"),
        };
        let (ns, host, peer) = (&v.ns, &v.host, &v.peer);
        for cmd in [
            format!("ip netns add {ns}"),
            format!("ip link add {host} type veth peer name {peer}"),
            format!("ip link set {peer} netns {ns}"),
            // The host end belongs to DPDK: no address, no IPv6 chatter from the kernel.
            format!("sysctl -qw net.ipv6.conf.{host}.disable_ipv6=1"),
            format!("ip link set {host} up"),
            format!("ip -n {ns} addr add {KERNEL}/24 dev {peer}"),
            format!("ip -n {ns} link set {peer} up"),
        ] {
            assert!(sh(&cmd), "{cmd}");
        }
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = sh(&format!("ip link del {} 2>/dev/null", self.host));
        let _ = sh(&format!("ip netns del {} 2>/dev/null", self.ns));
    }
}

/// Opens a TCP connection from the kernel in `ns` to the node at `port` and sends a line,
/// polling the node meanwhile; whether the kernel's connect succeeded, and its error text.
fn kernel_connects<P: iwarpd::port::Port>(
    node: &mut Node<P>,
    rnic: &mut iwarp_engine::Rnic,
    ns: &str,
    port: u16,
) -> (bool, String) {
    let script =
        format!("exec 3<>/dev/tcp/{OURS}/{port} && echo GET / HTTP/1.1, not an MPA Request >&3");
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "timeout", "3", "bash", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        node.poll(rnic);
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the kernel's connect hung");
    };
    // Let the node take what the kernel sent last.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(100) {
        node.poll(rnic);
    }
    let err = child
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    (status.success(), err)
}

#[test]
fn the_kernel_behind_a_veth_reaches_a_node_on_dpdk_af_packet() {
    if !iwarp_testkit::root_or_skip("the_kernel_behind_a_veth_reaches_a_node_on_dpdk_af_packet") {
        return;
    }
    if !sh("command -v ethtool >/dev/null") {
        eprintln!(
            "the_kernel_behind_a_veth_reaches_a_node_on_dpdk_af_packet: skipped (needs ethtool)"
        );
        return;
    }
    let veth = Veth::new();
    let args: Vec<String> = ["--no-pci", "--no-telemetry", "--log-level=3"]
        .map(String::from)
        .into_iter()
        .chain([format!("--file-prefix=iwarp-afp-{}", std::process::id())])
        .chain(iwarp_testkit::eal_memory_args("dpdk_af_packet", 128))
        .chain([format!("--vdev=net_af_packet0,iface={}", veth.host)])
        .collect();
    eal_init(&args).expect("EAL init");
    let port = DpdkPort::open("net_af_packet0", 1500).expect("net_af_packet0");
    let mac = port.mac;
    let End {
        mut node,
        mut rnic,
        qp,
        ..
    } = End::new(port, OURS);
    let conn = node.listen(LISTEN, qp, Settings::default()).unwrap();

    // Checksums left to an offload: every SYN dropped and counted; the connect times out.
    let (connected, _) = kernel_connects(&mut node, &mut rnic, &veth.ns, LISTEN);
    assert!(!connected, "a SYN with an unfilled checksum was taken");
    let bad = node.counters().bad_checksums;
    assert!(bad >= 1, "no segment counted as bad");
    assert_eq!(node.state(conn), Some(&ConnState::Connecting));

    // Right checksums: refused where nobody listens, handshake where the node does.
    assert!(sh(&format!(
        "ip netns exec {} ethtool -K {} tx off >/dev/null",
        veth.ns, veth.peer
    )));
    let (connected, err) = kernel_connects(&mut node, &mut rnic, &veth.ns, LISTEN + 1);
    assert!(!connected && err.contains("refused"), "not refused: {err}");
    let (connected, err) = kernel_connects(&mut node, &mut rnic, &veth.ns, LISTEN);
    assert!(connected, "the kernel could not connect: {err}");
    // The node ends the setup once it has read the kernel's line, which on a loaded machine
    // may take longer than `kernel_connects` polls after the kernel is done.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !matches!(node.state(conn), Some(ConnState::Failed(_))) && Instant::now() < deadline {
        node.poll(&mut rnic);
    }
    assert!(
        matches!(node.state(conn), Some(ConnState::Failed(why)) if why.contains("MPA")),
        "{:?}",
        node.state(conn)
    );
    assert_eq!(node.counters().bad_checksums, bad, "no bad checksum since");
    // The kernel learned our MAC from our ARP reply.
    let neigh = Command::new("ip")
        .args(["-n", &veth.ns, "neigh", "show", &OURS.to_string()])
        .output()
        .expect("ip neigh");
    let mac_text = mac.map(|b| format!("{b:02x}")).join(":");
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains(&mac_text),
        "the kernel's neighbour table: {}",
        String::from_utf8_lossy(&neigh.stdout)
    );
    println!("kernel peer over net_af_packet: {:?}", node.counters());
    // The device stays open for the process's life, as in the other DPDK tests.
    std::mem::forget(node);
}
