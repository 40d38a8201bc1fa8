//! DPDK's `net_tap` (a TAP interface driven by DPDK), for what memif cannot show.
//!
//! TCP checksum offload on a DPDK device that offers it: DPDK's `net_tap` (which computes
//! the checksums it is handed in software, in the driver, and flags each received frame's)
//! on one side of a Linux bridge, our own TAP port (smoltcp computing and checking every
//! checksum itself) on the other. A checksum the offload path got wrong would be dropped by
//! the other side, so data placed intact both ways shows it right; a segment with a wrong
//! checksum written into the `net_tap`'s kernel side is dropped and counted by the DPDK port
//! (the device checked it), one written towards our TAP port by the device layer (checked in
//! software).
//!
//! Received frames in their mbufs: one kept after its port is gone still holds what was sent
//! (it keeps the device's pools alive).
//!
//! Needs the `dpdk` feature and root; skipped, saying so, otherwise.
#![cfg(feature = "dpdk")]

mod common;

use common::{pair, sh, write_b_to_a, Bridge, End, A_IP, B_IP};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::dpdk::{eal_init, DpdkPort};
use iwarpd::port::tap::TapPort;
use iwarpd::port::{Port, TcpChecksumOffload};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Address,
    Ipv4Packet, TcpPacket, TcpSeqNumber,
};
use std::time::{Duration, Instant};

const DTAP: &str = "iwdtap0";
const DTAP_LIFE: &str = "iwdtap1";
const KTAP: &str = "iwktap0";
const BRIDGE: &str = "iwbrck";

/// Held by each test for its whole run: DPDK's control path is not thread-safe.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Starts EAL (once per process) with every test's device.
fn eal() {
    let args: Vec<String> = ["--no-pci", "--no-telemetry", "--log-level=3"]
        .map(String::from)
        .into_iter()
        .chain([format!("--file-prefix=iwarp-dtap-{}", std::process::id())])
        .chain(iwarp_testkit::eal_memory_args("dpdk_tap", 256))
        .chain([
            format!("--vdev=net_tap0,iface={DTAP}"),
            format!("--vdev=net_tap1,iface={DTAP_LIFE}"),
        ])
        .collect();
    eal_init(&args).expect("EAL init");
}

/// A TCP SYN to `to_mac`, `dst` (an address of a node), its TCP checksum wrong.
fn bad_syn(to_mac: [u8; 6], dst: Ipv4Address) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 20];
    {
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        eth.set_dst_addr(EthernetAddress(to_mac));
        eth.set_src_addr(EthernetAddress([2, 0, 0, 0, 9, 0x99]));
        eth.set_ethertype(EthernetProtocol::Ipv4);
    }
    let src = Ipv4Address::new(10, 77, 0, 99);
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_version(4);
        ip.set_header_len(20);
        ip.set_total_len(40);
        ip.set_hop_limit(64);
        ip.set_next_header(IpProtocol::Tcp);
        ip.set_src_addr(src);
        ip.set_dst_addr(dst);
        ip.fill_checksum();
    }
    let mut tcp = TcpPacket::new_unchecked(&mut f[34..]);
    tcp.set_src_port(40999);
    tcp.set_dst_port(7174);
    tcp.set_seq_number(TcpSeqNumber(1));
    tcp.set_header_len(20);
    tcp.set_syn(true);
    tcp.set_window_len(1024);
    tcp.fill_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst));
    let wrong = tcp.checksum() ^ 0x0101;
    tcp.set_checksum(wrong);
    f
}

/// Sends `frame` out of the kernel side of interface `ifname` (to whatever reads the TAP).
fn send_raw(ifname: &str, frame: &[u8]) {
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: plain socket calls on a descriptor we own and close; the address and the
    // frame are live buffers of the lengths given.
    unsafe {
        let index = libc::if_nametoindex(name.as_ptr());
        assert!(index != 0, "{ifname}");
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        assert!(fd >= 0, "AF_PACKET socket");
        let mut addr: libc::sockaddr_ll = std::mem::zeroed();
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = index as i32;
        addr.sll_halen = 6;
        addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        let n = libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        libc::close(fd);
        assert_eq!(n, frame.len() as isize, "sendto");
    }
}

#[test]
fn tcp_checksums_offloaded_to_a_dpdk_device_are_right_both_ways() {
    if !iwarp_testkit::root_or_skip("tcp_checksums_offloaded_to_a_dpdk_device") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    eal();
    let pa = DpdkPort::open("net_tap0", 1500).unwrap();
    assert_eq!(
        pa.tcp_checksum_offload(),
        TcpChecksumOffload { tx: true, rx: true },
        "net_tap offers TCP checksum offload both ways"
    );
    let mac_a = pa.mac;
    let mac_b = [2, 0, 0, 0, 9, 0x3b];
    let pb = TapPort::open(KTAP, mac_b, 1500).expect("TAP");
    assert_eq!(pb.tcp_checksum_offload(), TcpChecksumOffload::default());
    // net_tap gives its kernel side the DPDK port's own MAC, which would make the bridge keep
    // frames to that MAC for the host: the kernel side gets one of its own.
    assert!(sh(&format!("ip link set {DTAP} address 02:00:00:00:09:3c")));
    let _bridge = Bridge::new(BRIDGE, &[DTAP, KTAP]);
    let (mut a, mut b): (End<DpdkPort>, End<TapPort>) = pair(pa, pb, Settings::default());
    // B's segments checked by the device for A, A's filled in by the device for B.
    write_b_to_a(&mut a, &mut b, 4 << 20, 41);
    write_b_to_a(&mut b, &mut a, 4 << 20, 42);
    assert_eq!(a.node.counters().bad_checksums, 0);
    assert_eq!(b.node.counters().bad_checksums, 0);

    // Checked by the device for A, in software for B; each dropped and counted once.
    send_raw(DTAP, &bad_syn(mac_a, A_IP));
    send_raw(KTAP, &bad_syn(mac_b, B_IP));
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.node.counters().bad_checksums == 0 || b.node.counters().bad_checksums == 0 {
        assert!(Instant::now() < deadline, "a bad segment never arrived");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    assert_eq!(a.node.port().bad_checksums(), 1, "A's device dropped it");
    assert_eq!(a.node.counters().bad_checksums, 1);
    assert_eq!(b.node.port().bad_checksums(), 0, "B's port does not check");
    assert_eq!(
        b.node.counters().bad_checksums,
        1,
        "B's device layer dropped it"
    );
    // And the connection goes on.
    write_b_to_a(&mut a, &mut b, 1 << 20, 43);
    println!("net_tap with TCP checksum offload: {:?}", a.node.counters());
    // The DPDK device is left open for the process's life, as in `dpdk_memif.rs`.
    std::mem::forget(a);
}

/// A frame read in its mbuf after the port that received it was dropped: the frame keeps the
/// device's pools (and the device) alive until it goes, so its octets are still what was sent.
#[test]
fn a_received_frame_outlives_its_port() {
    if !iwarp_testkit::root_or_skip("a_received_frame_outlives_its_port") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    eal();
    let mut port = DpdkPort::open("net_tap1", 1500).unwrap();
    assert!(sh(&format!("ip link set {DTAP_LIFE} up")));
    // An Ethernet frame to the port, of the local experimental ethertype, with a pattern.
    let mut sent = vec![0u8; 200];
    sent[..6].copy_from_slice(&port.mac);
    sent[6..12].copy_from_slice(&[2, 0, 0, 0, 9, 0x77]);
    sent[12..14].copy_from_slice(&[0x88, 0xb5]);
    for (i, b) in sent[14..].iter_mut().enumerate() {
        *b = i as u8;
    }
    send_raw(DTAP_LIFE, &sent);
    let mut kept = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while kept.is_none() {
        assert!(Instant::now() < deadline, "the frame never arrived");
        // Everything else the kernel sends (IPv6 neighbour discovery) is freed here.
        port.rx_burst(32, |f| {
            if f[..] == sent[..] {
                kept = Some(f);
            }
        })
        .unwrap();
    }
    drop(port);
    let frame = kept.unwrap();
    assert_eq!(&frame[..], &sent[..]);
    drop(frame);
}
