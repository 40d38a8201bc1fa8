//! The harness starts and stops real endpoints (iwarpd + iwarp-control, twice) on the embedded
//! default port, and measures every verbs operation through them once iwarp-verbs can connect.
//! The daemons are built first when missing (`cargo test --workspace` builds them).

use iwarp_bench::cli::{DaemonsArg, EndpointPlan, HugepagesArg, PortArg};
use iwarp_bench::daemons::Endpoints;
use std::path::{Path, PathBuf};

/// iwarpd and iwarp-control of this test's profile, built only when missing: a rebuild here
/// with other features (the test command's `--features iwarpd/dpdk` built iwarpd with
/// DPDK) would replace the binary the other crates' tests run.
fn daemons() -> (PathBuf, PathBuf) {
    (
        iwarp_testkit::binary("iwarpd"),
        iwarp_testkit::binary("iwarp-control"),
    )
}

fn plan(dir: &Path, iwarpd: PathBuf, control: PathBuf) -> EndpointPlan {
    EndpointPlan {
        port: PortArg::Unix,
        dpdk_vdev: None,
        hugepages: HugepagesArg::Off,
        daemon_cores: vec![],
        daemon_workers: 1,
        daemons: DaemonsArg::Spawn,
        runtime_dirs: vec![dir.to_path_buf()],
        peer_ips: vec![],
        iwarpd: Some(iwarpd),
        iwarp_control: Some(control),
        daemon_config: None,
        stage_timing: false,
        mtu: 1500,
        cm_port: 18515,
        qps: 1,
        tcp_user_timeout_ms: None,
        tcp_worker_inflight: None,
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn spawned_endpoints_come_up_and_leave_nothing_behind() {
    let (d, c) = daemons();
    let dir = tempfile::tempdir().unwrap();
    let eps = Endpoints::start(&plan(dir.path(), d, c)).expect("two endpoints start");
    for ep in [&eps.a, &eps.b] {
        assert!(
            ep.control_socket().exists(),
            "{}",
            ep.control_socket().display()
        );
        assert!(ep.runtime_dir.join("daemon.shm").exists());
    }
    assert_ne!(eps.a.runtime_dir, eps.b.runtime_dir);
    assert_ne!(eps.a.ip, eps.b.ip);
    let pids: Vec<u32> = [&eps.a, &eps.b]
        .iter()
        .filter_map(|ep| std::fs::read_to_string(ep.runtime_dir.join("pid")).ok())
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "each iwarpd wrote its pid");
    let names = [eps.a.name.clone(), eps.b.name.clone()];
    eps.stop().expect("both endpoints stop cleanly on SIGTERM");
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for f in rd.flatten() {
            let f = f.file_name().to_string_lossy().into_owned();
            assert!(
                !names.iter().any(|n| f.contains(n.as_str())),
                "segment /dev/shm/{f} left behind"
            );
        }
    }
    for pid in pids {
        assert!(!alive(pid), "iwarpd {pid} still runs");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_daemon_that_cannot_start_is_reported_with_its_log() {
    let (_, c) = daemons();
    let dir = tempfile::tempdir().unwrap();
    // /bin/false "starts" and exits at once: the harness must say so, not wait forever.
    let p = plan(dir.path(), PathBuf::from("/bin/false"), c);
    let e = Endpoints::start(&p).expect_err("a dead iwarpd is an error");
    let m = e.to_string();
    assert!(m.contains("iwarpd exited"), "{m}");
}
