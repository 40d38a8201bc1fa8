//! Two RNIC nodes over DPDK: a `net_memif` server and client in one process (EAL can start
//! once per process), every frame through DPDK's memif shared-memory rings. Needs the `dpdk`
//! feature and root (hugepages, /var/run); skipped, saying so, otherwise.
#![cfg(feature = "dpdk")]

mod common;

use common::pair;
use iwarp_engine::{Access, RecvWr, SendOp, SendWr, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::dpdk::{eal_init, DpdkPort};
use iwarpd::port::Port;
use std::time::{Duration, Instant};

#[test]
fn two_nodes_over_dpdk_memif() {
    if !iwarp_testkit::root_or_skip("two_nodes_over_dpdk_memif") {
        return;
    }
    let sock = format!("/tmp/iwarp-memif-{}.sock", std::process::id());
    let args: Vec<String> = [
        "--in-memory".to_string(),
        "--no-pci".to_string(),
        "--no-telemetry".to_string(),
        "--log-level=3".to_string(),
        "-m".to_string(),
        "256".to_string(),
        format!("--vdev=net_memif0,role=server,socket={sock},id=0"),
        format!("--vdev=net_memif1,role=client,socket={sock},id=0"),
    ]
    .to_vec();
    eal_init(&args).expect("EAL init (see deploy/README.md for the EAL arguments that work)");
    let pa = DpdkPort::open("net_memif0", 1500).unwrap();
    let pb = DpdkPort::open("net_memif1", 1500).unwrap();
    assert_ne!(pa.mac, pb.mac);
    let (pa, pb) = frames_built_in_place_cross_unless_held_back(pa, pb);
    let (mut a, mut b) = pair(pa, pb, Settings::default());

    let len = 4 << 20;
    let a_mem = a.mem(len, Access::ALL);
    let b_mem = b.mem(len, Access::ALL);
    b_mem.fill(11);
    b.post_write(1, b_mem.sge(0, len), &a_mem, 0);
    a.node
        .rnic
        .post_recv(a.qp, RecvWr::new(2, &[a_mem.sge(0, 64)]))
        .unwrap();
    // The Send after the Write lands after it: its completion says the Write is placed. It
    // overwrites the first 8 octets, so compare from there.
    b.node
        .rnic
        .post_send(
            b.qp,
            SendWr::new(
                3,
                SendOp::Send {
                    solicited: false,
                    invalidate: None,
                },
                &[b_mem.sge(0, 8)],
            ),
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no completion");
        a.node.poll();
        b.node.poll();
        if a.wcs()
            .iter()
            .any(|w| w.wr_id == 2 && w.status == Status::Success)
        {
            break;
        }
    }
    assert!(
        a_mem.bytes(0, len) == b_mem.bytes(0, len),
        "4 MiB over memif intact"
    );
    println!(
        "4 MiB RDMA Write over DPDK net_memif: ok, counters {:?}",
        a.node.counters()
    );
}

/// Frames built straight into mbufs (`Port::tx_with`, smoltcp's transmit path): one held
/// back is freed, never sent; one sent arrives as built. Repeated until the link is up.
fn frames_built_in_place_cross_unless_held_back(
    mut pa: DpdkPort,
    mut pb: DpdkPort,
) -> (DpdkPort, DpdkPort) {
    let mut scratch = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got: Vec<Vec<u8>> = Vec::new();
    while got.is_empty() {
        assert!(Instant::now() < deadline, "no frame crossed memif");
        let ((), held) = pa.tx_with(60, &mut scratch, |f| {
            f.fill(0xee);
            ((), false)
        });
        let ((), sent) = pa.tx_with(60, &mut scratch, |f| {
            f.fill(0x5a);
            ((), true)
        });
        assert!(!held && sent);
        pa.flush().unwrap();
        std::thread::sleep(Duration::from_millis(1));
        pb.rx_burst(32, |f| got.push(f.to_vec())).unwrap();
    }
    assert!(got.iter().all(|f| f[..] == [0x5a; 60]), "{got:?}");
    (pa, pb)
}
