//! Interop with Linux soft-iWARP: rdma-core's `rping` in a QEMU guest whose kernel runs `siw`
//! (`scripts/siw-guest/build.sh` makes the guest), against this stack: `iwarpd` on a TAP
//! interface bridged to the guest's, `iwarp-control`, and the `rping` example. Both ways:
//! siw's client validating what our server reads and writes back, and our client validating
//! what siw's server does. Every frame is captured and decoded by Wireshark's dissectors.
//!
//! Root only (TAP and a bridge), and only where the guest is built. CI builds it and sets
//! `IWARP_REQUIRE_SIW=1`, so there a missing piece fails the test instead of skipping it.

use iwarp_testkit::siw::{guest, Run};
use iwarp_testkit::{self as testkit};
use std::path::Path;
use std::process::Command;

/// Our `rping` example on endpoint `n` with `ours`; rdma-core's rping in the guest with
/// `theirs`.
fn run(guest: &Path, n: u8, ours: &[&str], theirs: &[&str]) -> Run {
    let example = testkit::target_dir().join("examples").join("rping");
    assert!(example.exists(), "cargo test builds the examples");
    testkit::siw::run(
        guest,
        n,
        |runtime| {
            let mut c = Command::new(&example);
            c.args(ours).arg("--runtime-dir").arg(runtime);
            c
        },
        theirs,
    )
}

const PINGS: u64 = 10;

#[test]
fn siws_rping_client_validates_our_server() {
    let Some(guest) = guest() else { return };
    let count = PINGS.to_string();
    // 64 KiB pings: the Read Response and the Write span many FPDUs and TCP segments.
    let r = run(
        &guest,
        8,
        &["-s", "-v", "-C", &count],
        &[
            "rping",
            "-c",
            "-a",
            "10.78.0.1",
            "-C",
            &count,
            "-S",
            "65535",
            "-V",
            "-v",
        ],
    );
    assert!(r.guest_exited_0(), "siw's rping failed");
    for i in 0..PINGS {
        // With -V, siw's client prints a ping only after comparing it.
        assert!(
            r.guest.contains(&format!("ping data: rdma-ping-{i}: ")),
            "ping {i} missing on the guest"
        );
    }
    assert!(r.ours.status.success(), "our rping server failed");
    assert!(r
        .ours_said()
        .contains(&format!("rping server: {PINGS} pings")));
    // Each ping: two Sends each way, a Read Request, its Response (many FPDUs) and a Write.
    testkit::tshark_check(&r.pcap, 6 * PINGS as usize, true);
}

#[test]
fn our_rping_client_validates_siws_server_without_crc() {
    let Some(guest) = guest() else { return };
    let count = PINGS.to_string();
    let r = run(
        &guest,
        9,
        &[
            "-c",
            "-a",
            "10.79.0.2",
            "-C",
            &count,
            "-S",
            "1000",
            "-V",
            "-v",
            "--no-crc",
            // The guest boots before its rping listens.
            "--retry",
            "60",
        ],
        &["rping", "-s", "-a", "10.79.0.2", "-S", "1000", "-v"],
    );
    assert!(r.ours.status.success(), "our rping client failed");
    assert!(r
        .ours_said()
        .contains(&format!("rping client: {PINGS} pings")));
    for i in 0..PINGS {
        assert!(
            r.guest
                .contains(&format!("server ping data: rdma-ping-{i}: ")),
            "siw's server did not read ping {i}"
        );
    }
    // siw's server ends when we disconnect, as rping's does: status 0.
    assert!(r.guest_exited_0(), "siw's rping failed");
    testkit::tshark_check(&r.pcap, 6 * PINGS as usize, false);
}

/// The RDMAP opcode of the first FPDU matching the display `filter` (the first of a frame
/// that carries several).
fn first_opcode(pcap: &Path, filter: &str) -> Option<String> {
    let frames =
        testkit::tshark_fields(pcap, filter, "iwarp_rdma.opcode").expect("tshark installed");
    let first = frames.first()?.split(',').next()?;
    Some(first.to_string())
}

/// RFC 6581 peer-to-peer mode: our client offers one RTR message, siw's responder agrees to
/// it, waits for it before it tells its application the connection is up, and then serves.
fn our_client_with_rtr(n: u8, rtr: &str) {
    let Some(guest) = guest() else { return };
    let count = PINGS.to_string();
    let ours_ip = format!("10.7{n}.0.2");
    let r = run(
        &guest,
        n,
        &[
            "-c", "-a", &ours_ip, "-C", &count, "-V", "--rtr", rtr, "--retry", "60",
        ],
        &["rping", "-s", "-a", &ours_ip, "-v"],
    );
    assert!(r.ours.status.success(), "our rping client failed");
    assert!(r
        .ours_said()
        .contains(&format!("rping client: {PINGS} pings")));
    assert!(r.guest_exited_0(), "siw's rping failed");
    // The RTR is the first FPDU of the connection: a zero-length Write or Read Request.
    let want = if rtr == "write" { "0x00" } else { "0x01" };
    assert_eq!(
        first_opcode(&r.pcap, "iwarp_ddp_rdmap").as_deref(),
        Some(want)
    );
    // siw's first FPDU: the zero-length Read Response a Read RTR asks for, or else its
    // server's first RDMA Read of our client's buffer.
    let theirs = format!("iwarp_ddp_rdmap && ip.src == 10.7{n}.0.2");
    let want = if rtr == "read" { "0x02" } else { "0x01" };
    assert_eq!(first_opcode(&r.pcap, &theirs).as_deref(), Some(want));
    testkit::tshark_check(&r.pcap, 6 * PINGS as usize, true);
}

#[test]
fn siws_server_takes_a_zero_length_write_as_the_rtr() {
    our_client_with_rtr(6, "write");
}

/// The Read RTR is answered: siw's zero-length Read Response must reach us before our
/// client's first Send is served. siw's responder race would leave the RTR unread without
/// the initiator's hold before RTS (docs/interop-siw.md).
#[test]
fn siws_server_takes_a_zero_length_read_as_the_rtr() {
    our_client_with_rtr(5, "read");
}
