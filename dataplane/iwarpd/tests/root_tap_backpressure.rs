//! Root only: many streams over TAP interfaces and a Linux bridge to a node that reads more
//! slowly than they send. Linux gives a TAP's writer no back-pressure; frames wait in the
//! reader's TAP queue, which the port sizes for the streams' windows, and what that queue
//! drops the port counts. Skipped, saying so, when not run as root.

mod common;

use common::streams::{slow_reader, Streams};
use common::{sh, Bridge, End, A_IP, B_IP};
use iwarpd::port::tap::{TapPort, TAP_QUEUE};
use iwarpd::port::Port;

/// The interface's count of frames the kernel dropped on their way to the port.
fn kernel_drops(tap: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{tap}/statistics/tx_dropped"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// 24 streams × 256 KiB windows are about 4,300 frames in flight to the slow reader, four
/// times a TAP's default queue (which dropped about 2,200 of them here, and the sender
/// resent 2,500): with the port's queue of [`TAP_QUEUE`] frames none is dropped and every
/// byte arrives. Resends are printed, not judged: the sender's frames are out of its hands
/// and timed while they wait in that queue, so a reader as slow as a debug build on a loaded
/// machine can hold them past the retransmission timeout (a hundred or so resends here) —
/// what only back-pressure at the sender avoids, and Linux gives a TAP's writer none.
#[test]
fn many_streams_over_tap_to_a_slow_reader_lose_no_frame() {
    if !iwarp_testkit::root_or_skip("many_streams_over_tap_to_a_slow_reader") {
        return;
    }
    let ta = TapPort::open("iwtapP", [2, 0, 0, 0, 9, 0x3a], 1500).expect("TAP");
    let tb = TapPort::open("iwtapQ", [2, 0, 0, 0, 9, 0x3b], 1500).unwrap();
    let qlen = std::fs::read_to_string("/sys/class/net/iwtapP/tx_queue_len").unwrap();
    assert!(
        qlen.trim().parse::<u32>().unwrap() >= TAP_QUEUE,
        "queue {qlen}"
    );
    let _bridge = Bridge::new("iwbrP", &["iwtapP", "iwtapQ"]);
    let before = kernel_drops("iwtapP");
    let tcp = common::patient_tcp();
    let mut a = End::with_tcp(ta, A_IP, tcp);
    let mut b = End::with_tcp(tb, B_IP, tcp);
    let s = Streams {
        streams: 24,
        writes: 24,
        write: 64 << 10,
        depth: 8,
        slower: 3,
        port: 7300,
        local_port: 42000,
    };
    let out = slow_reader(&mut a, &mut b, s, |_| 0);
    let dropped = kernel_drops("iwtapP") - before;
    a.node.set_asleep(true);
    let c = b.node.counters();
    println!(
        "24 streams over TAP: {out:?}, dropped for the reader {dropped}, counted by its \
         port {}, sender's drops {}; sender: retransmits {} fast {} rtos {} spurious {} \
         dsack {}",
        a.node.port().dropped(),
        kernel_drops("iwtapQ"),
        c.retransmits,
        c.fast_retransmits,
        c.rtos,
        c.spurious_retransmits,
        c.dsack_spurious
    );
    assert_eq!(dropped, 0, "frames the kernel dropped for the reader");
    assert_eq!(a.node.port().dropped(), 0, "the reader's port count");
    assert_eq!(out.dropped, 0, "frames the sender's port dropped");
}

/// A reader whose TAP queue is too short for the streams (16 frames, set after the port
/// opened): the kernel drops frames for it, TCP resends them, every byte still arrives, and
/// the port's drop count (the node's `drops`) is the interface's.
#[test]
fn frames_the_kernel_drops_for_a_tap_port_are_counted() {
    if !iwarp_testkit::root_or_skip("frames_the_kernel_drops_for_a_tap_port_are_counted") {
        return;
    }
    let ta = TapPort::open("iwtapR", [2, 0, 0, 0, 9, 0x4a], 1500).expect("TAP");
    // Read while the interface is down, as the port read its own starting point: the
    // kernel drops nothing for it before it is up.
    let before = kernel_drops("iwtapR");
    let tb = TapPort::open("iwtapS", [2, 0, 0, 0, 9, 0x4b], 1500).unwrap();
    let _bridge = Bridge::new("iwbrR", &["iwtapR", "iwtapS"]);
    assert!(sh("ip link set iwtapR txqueuelen 16"));
    let mut a = End::new(ta, A_IP);
    let mut b = End::new(tb, B_IP);
    let s = Streams {
        streams: 4,
        writes: 16,
        write: 64 << 10,
        depth: 4,
        slower: 2,
        port: 7300,
        local_port: 42000,
    };
    let out = slow_reader(&mut a, &mut b, s, |_| 0);
    let dropped = kernel_drops("iwtapR") - before;
    a.node.set_asleep(true);
    println!("4 streams into a 16-frame TAP queue: {out:?}, dropped {dropped}");
    assert!(dropped > 0, "the short queue dropped nothing");
    assert_eq!(a.node.port().dropped(), dropped);
    assert_eq!(a.node.counters().drops, dropped);
}
