//! Root only: two nodes on TAP interfaces joined by a Linux bridge, the kernel forwarding
//! every frame; then the same with 1 % of forwarded frames dropped by nftables (this
//! machine's kernel has no netem). Skipped, saying so, when not run as root.

mod common;

use common::{pair, End, A_IP};
use iwarp_engine::{Access, SendOp, SendWr, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::tap::TapPort;
use std::process::Command;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn sh(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

/// A bridge with two TAP ports; removed (with any loss rule) when dropped.
struct Bridge {
    name: &'static str,
    table: Option<&'static str>,
}

impl Bridge {
    fn new(name: &'static str, taps: &[&str]) -> Bridge {
        let _ = sh(&format!("ip link del {name} 2>/dev/null"));
        assert!(
            sh(&format!(
                "ip link add {name} type bridge && ip link set {name} up"
            )),
            "bridge"
        );
        for t in taps {
            assert!(
                sh(&format!(
                    "ip link set {t} master {name} && ip link set {t} up"
                )),
                "tap {t}"
            );
        }
        Bridge { name, table: None }
    }

    /// Drops one forwarded frame in a hundred, at random, both ways.
    fn lossy(&mut self, table: &'static str) {
        assert!(sh(&format!(
            "nft add table bridge {table} && \
             nft add chain bridge {table} lossy '{{ type filter hook forward priority 0; }}' && \
             nft add rule bridge {table} lossy numgen random mod 100 0 drop"
        )));
        self.table = Some(table);
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(t) = self.table {
            let _ = sh(&format!("nft delete table bridge {t}"));
        }
        let _ = sh(&format!("ip link del {}", self.name));
    }
}

fn transfer(a: &mut End<TapPort>, b: &mut End<TapPort>, total: usize) -> Duration {
    let chunk = 1 << 20;
    let a_mem = a.mem(chunk, Access::ALL);
    let b_mem = b.mem(chunk, Access::ALL);
    b_mem.fill(5);
    let (mut sent, mut done) = (0, 0);
    let mut last = Instant::now();
    let mut worst = Duration::ZERO;
    let mut last_rx = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while done < total / chunk {
        assert!(Instant::now() < deadline, "stalled at {done}");
        if sent < total / chunk && sent - done < 4 {
            let op = SendOp::Write {
                remote_stag: a_mem.stag,
                remote_to: a_mem.sge(0, 0).to,
            };
            b.node
                .rnic
                .post_send(b.qp, SendWr::new(sent as u64, op, &[b_mem.sge(0, chunk)]))
                .unwrap();
            sent += 1;
        }
        a.node.poll();
        b.node.poll();
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            done += 1;
        }
        let rx = a.node.counters().stream_bytes_rx;
        if rx > last_rx {
            worst = worst.max(last.elapsed());
            last = Instant::now();
            last_rx = rx;
        }
    }
    // Every byte: a final Read brings A's copy back to compare.
    let check = b.mem(chunk, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let op = SendOp::Read {
        remote_stag: a_mem.stag,
        remote_to: a_mem.sge(0, 0).to,
    };
    b.node
        .rnic
        .post_send(b.qp, SendWr::new(99, op, &[check.sge(0, chunk)]))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline);
        a.node.poll();
        b.node.poll();
        if b.wcs().iter().any(|w| w.wr_id == 99) {
            break;
        }
    }
    assert!(
        check.bytes(0, chunk) == b_mem.bytes(0, chunk),
        "data intact"
    );
    worst
}

#[test]
fn two_nodes_over_tap_and_a_bridge_with_and_without_loss() {
    if !is_root() {
        eprintln!("two_nodes_over_tap_and_a_bridge: skipped (needs root)");
        return;
    }
    let ta =
        TapPort::open("iwtapA", [2, 0, 0, 0, 9, 0x0a], 1500).expect("TAP (needs /dev/net/tun)");
    let tb = TapPort::open("iwtapB", [2, 0, 0, 0, 9, 0x0b], 1500).unwrap();
    let mut bridge = Bridge::new("iwbr0", &["iwtapA", "iwtapB"]);
    let (mut a, mut b) = pair(ta, tb, Settings::default());
    assert_eq!(a.node.negotiated(a.conn).unwrap().revision, 2);
    let _ = A_IP;
    let worst = transfer(&mut a, &mut b, 16 << 20);
    println!("16 MiB over TAP + bridge: worst stall {worst:?}");
    bridge.lossy("iwarp_loss");
    let t = Instant::now();
    let worst = transfer(&mut a, &mut b, 256 << 20);
    println!(
        "256 MiB over TAP + bridge with 1 % loss (nftables): {:?}, worst stall {worst:?}",
        t.elapsed()
    );
}
