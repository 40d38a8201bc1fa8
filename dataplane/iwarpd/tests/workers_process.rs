//! Daemons with two poll-mode workers each, every part its own process: control puts each
//! application on a worker of its own, and each worker serves its applications end to end
//! (their QPs, regions and connections, and the frames of those connections, which the
//! shared port steers to it). Two pairs of applications cross the workers: A's worker 0 talks
//! to B's worker 1 and A's worker 1 to B's worker 0, every operation, bytes compared; the
//! daemons' per-worker counters show each connection on its own worker. Over the embedded
//! port (one socket, which worker 0 receives and steers) everywhere, with each of A's workers
//! writing its own pcap file that Wireshark's dissectors decode; over DPDK `net_memif` with a
//! queue pair per worker when built with the `dpdk` feature and run as root.

mod common;

use iwarp_testkit::{self as testkit, Endpoint};
use iwarp_verbs::{
    access, ConnSettings, Context, QpInitAttr, RecvWr, SendWr, Sg, WcStatus, WrOpcode,
};
use std::path::Path;
use std::time::{Duration, Instant};

fn endpoint(dir: &Path, name: &str, n: u8, extra: &[&str]) -> Endpoint {
    let mut args = vec!["--workers", "2"];
    args.extend(extra);
    Endpoint::start(dir, name, n, 56, &args)
}

/// Endpoint `n` (1: the memif server, 2: the client) of a `net_memif` pair in `dir`, with two
/// workers and a queue pair each.
#[cfg(feature = "dpdk")]
fn dpdk_endpoint(dir: &Path, name: &str, n: u8) -> Endpoint {
    let runtime = dir.join(name);
    let role = if n == 1 { "server" } else { "client" };
    let unique = testkit::unique(name);
    let mut eal: Vec<String> = ["--no-pci", "--no-telemetry", "--log-level=3"]
        .map(String::from)
        .to_vec();
    eal.push(format!("--file-prefix={unique}"));
    // Two workers' mbuf pools and rings.
    eal.extend(testkit::eal_memory_args("workers_process", 128));
    eal.push(format!(
        "--vdev=net_memif{n},role={role},socket={},id=0",
        dir.join("memif.sock").display()
    ));
    let eal: Vec<String> = eal.iter().map(|a| format!("{a:?}")).collect();
    let config = format!(
        "[daemon]\nname = {unique:?}\nruntime_dir = {runtime:?}\n\
         [port]\nkind = \"dpdk\"\nipv4 = \"10.56.0.{n}/24\"\n\
         eal_args = [{}]\n\
         [cores]\nworkers = 2\n",
        eal.join(", "),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let daemon = testkit::Proc(
        std::process::Command::new(testkit::binary("iwarpd"))
            .arg("--config")
            .arg(&path)
            .spawn()
            .expect("spawn iwarpd"),
    );
    testkit::wait_for(&runtime.join("daemon.shm"));
    Endpoint {
        control: testkit::start_control(&runtime),
        runtime,
        daemon,
    }
}

/// The per-worker lines of the endpoint's stats file, once it is rewritten after the call.
fn worker_lines(e: &Endpoint) -> Vec<String> {
    let read = || std::fs::read_to_string(e.runtime.join("stats")).unwrap_or_default();
    let before = read();
    let t = Instant::now();
    loop {
        let now = read();
        if now != before && !now.is_empty() {
            return now
                .lines()
                .filter(|l| l.starts_with("core="))
                .map(str::to_string)
                .collect();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "stats never rewritten"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stat(line: &str, key: &str) -> u64 {
    testkit::stat(line, key).unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// What one pair keeps alive (connection, QPs, regions) while the counters are read.
struct Pair {
    _keep: Vec<Box<dyn std::any::Any>>,
}

/// `ca` connects to `cb` (listening on `port`) and runs Send, RDMA Write, RDMA Read,
/// FetchAdd and CmpSwap over the connection, checking every byte.
fn exchange(ca: &Context, cb: &Context, port: u16, tag: &str) -> Pair {
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&cqa, 8)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&cqb, 8)).unwrap();
    let (ba, bb) = (
        ca.alloc_buffer(4096).unwrap(),
        cb.alloc_buffer(4096).unwrap(),
    );
    let ma = pa
        .reg_mr(&ba, 0, 4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let mb = pb.reg_mr(&bb, 0, 4096, all).unwrap();
    cb.listen(port, &ConnSettings::default()).unwrap();
    let remote = format!("10.56.0.2:{port}").parse().unwrap();
    let conn = ca.connect(&qa, remote, &ConnSettings::default()).unwrap();
    let req = cb.get_request(Duration::from_secs(20)).unwrap();
    cb.accept_blocking(&req, &qb, &ConnSettings::default(), Duration::from_secs(20))
        .unwrap();
    ca.wait_established(conn, Duration::from_secs(20)).unwrap();

    let done = |cq: &iwarp_verbs::CompletionQueue, id: u64| {
        let wc = cq.wait(Duration::from_secs(20)).unwrap().unwrap();
        assert_eq!(
            (wc.wr_id, wc.status),
            (id, WcStatus::Success),
            "{tag}: {wc:?}"
        );
        wc
    };
    let sg = |mr, offset, len| [Sg { mr, offset, len }];

    // RDMA Write into B at 1024, then a Send (placed after the Write, in order) into B at 0.
    let written = format!("written by {tag}");
    ba.write(1024, written.as_bytes()).unwrap();
    let wr = WrOpcode::RdmaWrite {
        rkey: mb.stag(),
        remote_addr: 1024,
    };
    qa.post_send(&SendWr::new(1, wr, &sg(&ma, 1024, written.len() as u32)))
        .unwrap();
    done(&cqa, 1);
    qb.post_recv(&RecvWr {
        wr_id: 2,
        sg_list: &sg(&mb, 0, 256),
    })
    .unwrap();
    let sent = format!("sent by {tag}");
    ba.write(0, sent.as_bytes()).unwrap();
    let send_sg = sg(&ma, 0, sent.len() as u32);
    qa.post_send(&SendWr::new(3, WrOpcode::Send, &send_sg))
        .unwrap();
    done(&cqa, 3);
    assert_eq!(done(&cqb, 2).byte_len as usize, sent.len());
    assert_eq!(bb.to_vec(0, sent.len()).unwrap(), sent.as_bytes());
    assert_eq!(bb.to_vec(1024, written.len()).unwrap(), written.as_bytes());

    // RDMA Read of B's 2048.. into A's 2048..
    let read = format!("read from {tag}");
    bb.write(2048, read.as_bytes()).unwrap();
    let rd = WrOpcode::RdmaRead {
        rkey: mb.stag(),
        remote_addr: 2048,
    };
    qa.post_send(&SendWr::new(4, rd, &sg(&ma, 2048, read.len() as u32)))
        .unwrap();
    done(&cqa, 4);
    assert_eq!(ba.to_vec(2048, read.len()).unwrap(), read.as_bytes());

    // FetchAdd then CmpSwap on B's 8 octets at 3072.
    bb.write(3072, &40u64.to_le_bytes()).unwrap();
    let fa = WrOpcode::FetchAdd {
        rkey: mb.stag(),
        remote_addr: 3072,
        add: 2,
    };
    qa.post_send(&SendWr::new(5, fa, &sg(&ma, 3072, 8)))
        .unwrap();
    done(&cqa, 5);
    let cs = WrOpcode::CmpSwap {
        rkey: mb.stag(),
        remote_addr: 3072,
        compare: 42,
        swap: 7,
    };
    qa.post_send(&SendWr::new(6, cs, &sg(&ma, 3080, 8)))
        .unwrap();
    done(&cqa, 6);
    let original = |at| u64::from_le_bytes(ba.to_vec(at, 8).unwrap().try_into().unwrap());
    assert_eq!(
        (original(3072), original(3080)),
        (40, 42),
        "{tag}: atomics' originals"
    );
    assert_eq!(
        bb.to_vec(3072, 8).unwrap(),
        7u64.to_le_bytes(),
        "{tag}: swapped"
    );
    let _keep: Vec<Box<dyn std::any::Any>> = vec![
        Box::new(qa),
        Box::new(qb),
        Box::new(ma),
        Box::new(mb),
        Box::new(ba),
        Box::new(bb),
        Box::new(cqa),
        Box::new(cqb),
        Box::new(pa),
        Box::new(pb),
    ];
    Pair { _keep }
}

#[test]
fn applications_on_different_workers_are_each_served_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("a.pcap");
    let a = endpoint(dir.path(), "a", 1, &["--pcap", pcap.to_str().unwrap()]);
    let b = endpoint(dir.path(), "b", 2, &[]);
    cross_the_workers(&a, &b);
    // Each worker captured what its own stack sent and received: its connection's FPDUs,
    // both ways (at least the five A sent and the three answers).
    for file in ["a.pcap", "a-w1.pcap"] {
        testkit::tshark_check(&dir.path().join(file), 8, true);
    }
}

#[cfg(feature = "dpdk")]
#[test]
fn over_dpdk_memif_each_worker_has_its_own_queue() {
    if !testkit::root_or_skip("over_dpdk_memif_each_worker_has_its_own_queue") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = dpdk_endpoint(dir.path(), "a", 1);
    let b = dpdk_endpoint(dir.path(), "b", 2);
    cross_the_workers(&a, &b);
}

fn cross_the_workers(a: &Endpoint, b: &Endpoint) {
    // Control puts each new application on the worker serving the fewest: the first on
    // worker 0, the second on worker 1.
    let (a0, a1) = (
        Context::open(&a.runtime).unwrap(),
        Context::open(&a.runtime).unwrap(),
    );
    let (b0, b1) = (
        Context::open(&b.runtime).unwrap(),
        Context::open(&b.runtime).unwrap(),
    );
    let placed = [&a0, &a1, &b0, &b1].map(|c| c.worker());
    assert_eq!(
        placed,
        [Some(0), Some(1), Some(0), Some(1)],
        "control's placement"
    );
    let first = exchange(&a0, &b1, 7401, "A worker 0 to B worker 1");
    let second = exchange(&a1, &b0, 7402, "A worker 1 to B worker 0");
    for (name, e) in [("A", a), ("B", b)] {
        let lines = worker_lines(e);
        assert_eq!(lines.len(), 2, "{name}: one line per worker: {lines:?}");
        for (w, line) in lines.iter().enumerate() {
            // Each worker holds exactly its own application's connection and sent its FPDUs
            // (the responder at least the Read Response and the two atomic responses).
            assert_eq!(stat(line, "connections"), 1, "{name} worker {w}: {line}");
            assert!(stat(line, "fpdus_tx") >= 3, "{name} worker {w}: {line}");
            assert!(stat(line, "rx_frames") > 0, "{name} worker {w}: {line}");
        }
    }
    drop((first, second));
}
