//! What one application can do to the others on its endpoint: the library and the real
//! stack (two endpoints, `iwarpd` + `iwarp-control` each, on the embedded Unix-socket
//! Ethernet), this test as every application.

use iwarp_testkit::{self as testkit, Proc};
use iwarp_verbs::{
    access, CompletionQueue, ConnSettings, Context, Error, Event, MemoryRegion, QpInitAttr,
    QueuePair, RecvWr, SendWr, Sg, SharedBuffer, WcStatus, WrOpcode,
};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Endpoint {
    runtime: PathBuf,
    control: Proc,
    daemon: Proc,
}

impl Endpoint {
    fn start(dir: &Path, name: &str, n: u8, subnet: u8) -> Endpoint {
        let daemon = testkit::start_daemon(dir, name, n, subnet, &[]);
        let runtime = dir.join(name);
        Endpoint {
            control: testkit::start_control(&runtime),
            runtime,
            daemon,
        }
    }

    /// Both processes still run.
    fn alive(&mut self) -> bool {
        matches!(self.daemon.0.try_wait(), Ok(None))
            && matches!(self.control.0.try_wait(), Ok(None))
    }
}

/// One application's side of a connection: a QP on its own CQ and a registered buffer.
struct Side {
    ctx: Context,
    cq: Arc<CompletionQueue>,
    qp: QueuePair,
    buf: SharedBuffer,
    mr: MemoryRegion,
}

const BUF: usize = 64 << 10;

fn side(runtime: &Path, depth: u32) -> Side {
    let ctx = Context::open(runtime).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(&cq, depth)).unwrap();
    let buf = ctx.alloc_buffer(BUF).unwrap();
    let mr = pd
        .reg_mr(
            &buf,
            0,
            BUF as u64,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    Side {
        ctx,
        cq,
        qp,
        buf,
        mr,
    }
}

/// Connects `a` (initiator) to `b` (listening on `port` of endpoint 10.`subnet`.0.2).
fn connect(a: &Side, b: &Side, subnet: u8, port: u16) {
    b.ctx.listen(port, &ConnSettings::default()).unwrap();
    let remote = format!("10.{subnet}.0.2:{port}").parse().unwrap();
    let conn = a
        .ctx
        .connect(&a.qp, remote, &ConnSettings::default())
        .unwrap();
    let req = b.ctx.get_request(Duration::from_secs(20)).unwrap();
    b.ctx
        .accept_blocking(
            &req,
            &b.qp,
            &ConnSettings::default(),
            Duration::from_secs(20),
        )
        .unwrap();
    a.ctx
        .wait_established(conn, Duration::from_secs(20))
        .unwrap();
}

/// Posts an RDMA Write of `len` octets at `offset` of `from`'s buffer to the same offset of
/// `to`'s, and waits for its successful completion.
fn write(from: &Side, to: &Side, wr_id: u64, offset: u64, len: u32) {
    let sg = [Sg {
        mr: &from.mr,
        offset,
        len,
    }];
    let op = WrOpcode::RdmaWrite {
        rkey: to.mr.stag(),
        remote_addr: offset,
    };
    from.qp.post_send(&SendWr::new(wr_id, op, &sg)).unwrap();
    let wc = from.cq.wait(Duration::from_secs(20)).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
}

/// Waits until `bytes` are at `offset` of `buf` (a remote Write's placement).
fn landed(buf: &SharedBuffer, offset: usize, bytes: &[u8]) {
    let t = Instant::now();
    while buf.to_vec(offset, bytes.len()).unwrap() != bytes {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the Write never landed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every name under which another process could open this process's shared memory that
/// starts, in its data area, with `marker`: segment files, and this process's descriptors.
fn files_holding(marker: &[u8]) -> Vec<PathBuf> {
    let pid = std::process::id();
    let named = ["/dev/shm", "/dev/hugepages"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path());
    let fds = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .map(|e| {
            PathBuf::from(format!(
                "/proc/{pid}/fd/{}",
                e.file_name().to_string_lossy()
            ))
        });
    named
        .chain(fds)
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .filter(|p| {
            let mut head = vec![0; iwarp_abi::segment::DATA_OFFSET + marker.len()];
            std::fs::File::open(p)
                .and_then(|mut f| f.read_exact(&mut head))
                .is_ok_and(|_| head.ends_with(marker))
        })
        .collect()
}

#[test]
fn an_application_that_shrinks_its_registered_buffer_hurts_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Endpoint::start(dir.path(), "a", 1, 57);
    let _b = Endpoint::start(dir.path(), "b", 2, 57);
    let hostile = side(&a.runtime, 16);
    let peer = side(&dir.path().join("b"), 16);
    connect(&hostile, &peer, 57, 7400);

    // The hostile application truncates every file that backs its registered buffer, by any
    // name it can find.
    let marker = format!("hostile-{}", std::process::id());
    hostile.buf.write(0, marker.as_bytes()).unwrap();
    let files = files_holding(marker.as_bytes());
    assert!(!files.is_empty(), "the buffer is reachable by some name");
    let truncated: Vec<_> = files
        .iter()
        .map(|f| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(f)
                .and_then(|f| f.set_len(0))
        })
        .collect();

    // A peer writes into the region, and the application posts a Write from it: both
    // complete and the data arrives, because iwarpd's mapping was never shrunk.
    peer.buf.write(8192, b"from the peer").unwrap();
    write(&peer, &hostile, 1, 8192, 13);
    landed(&hostile.buf, 8192, b"from the peer");
    hostile.buf.write(16384, b"from the hostile one").unwrap();
    write(&hostile, &peer, 2, 16384, 20);
    landed(&peer.buf, 16384, b"from the hostile one");
    assert!(
        a.alive(),
        "iwarpd and iwarp-control of the endpoint survive"
    );
    for (f, r) in files.iter().zip(&truncated) {
        let e = r
            .as_ref()
            .expect_err("the size of registered memory is sealed");
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{}: {e}", f.display());
    }

    // Another application of the same endpoint connects and moves data.
    let other = side(&a.runtime, 16);
    let other_peer = side(&dir.path().join("b"), 16);
    connect(&other, &other_peer, 57, 7401);
    other.buf.write(0, b"still served").unwrap();
    write(&other, &other_peer, 3, 0, 12);
    landed(&other_peer.buf, 0, b"still served");
    assert!(a.alive());
}

#[test]
fn a_work_queue_takes_no_more_than_its_depth() {
    let dir = tempfile::tempdir().unwrap();
    let _a = Endpoint::start(dir.path(), "a", 1, 58);
    let _b = Endpoint::start(dir.path(), "b", 2, 58);
    // Depth 100: the rings have 128 slots, which must not show.
    let a = side(&dir.path().join("a"), 100);
    let b = side(&dir.path().join("b"), 100);
    connect(&a, &b, 58, 7402);

    // Verbs section 8.2.1: a receive occupies its RQ entry until its completion is reaped.
    let sg = [Sg {
        mr: &b.mr,
        offset: 0,
        len: 64,
    }];
    for i in 0..100 {
        b.qp.post_recv(&RecvWr {
            wr_id: i,
            sg_list: &sg,
        })
        .unwrap();
    }
    let full = b.qp.post_recv(&RecvWr {
        wr_id: 100,
        sg_list: &sg,
    });
    assert!(matches!(full, Err(Error::QueueFull)), "{full:?}");

    // The same for the SQ, although iwarpd takes the posted Writes off the ring at once.
    let sg = [Sg {
        mr: &a.mr,
        offset: 0,
        len: 64,
    }];
    let op = WrOpcode::RdmaWrite {
        rkey: b.mr.stag(),
        remote_addr: 0,
    };
    for i in 0..100 {
        a.qp.post_send(&SendWr::new(i, op, &sg)).unwrap();
    }
    let full = a.qp.post_send(&SendWr::new(100, op, &sg));
    assert!(matches!(full, Err(Error::QueueFull)), "{full:?}");
    // Reaping a completion frees one entry, and only one.
    let wc = a.cq.wait(Duration::from_secs(20)).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status), (0, WcStatus::Success), "{wc:?}");
    a.qp.post_send(&SendWr::new(100, op, &sg)).unwrap();
    let full = a.qp.post_send(&SendWr::new(101, op, &sg));
    assert!(matches!(full, Err(Error::QueueFull)), "{full:?}");

    // And for an S-RQ (section 8.2.4 posts to it as to an RQ).
    let pd = a.ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(100).unwrap();
    let mr = pd.reg_mr(&a.buf, 0, 4096, access::LOCAL_WRITE).unwrap();
    let sg = [Sg {
        mr: &mr,
        offset: 0,
        len: 64,
    }];
    for i in 0..100 {
        srq.post_recv(&RecvWr {
            wr_id: i,
            sg_list: &sg,
        })
        .unwrap();
    }
    let full = srq.post_recv(&RecvWr {
        wr_id: 100,
        sg_list: &sg,
    });
    assert!(matches!(full, Err(Error::QueueFull)), "{full:?}");
}

#[test]
fn the_peer_of_an_application_killed_with_sigkill_hears_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let _a = Endpoint::start(dir.path(), "a", 1, 59);
    let b = Endpoint::start(dir.path(), "b", 2, 59);
    let example = testkit::target_dir().join("examples").join("rdma_pair");
    assert!(example.exists(), "cargo test builds the examples");
    let client = side(&dir.path().join("a"), 16);
    // A QP put in Error before its connection is aborted would end the stream with a FIN on
    // the daemon's next turn; a few rounds show the abort always comes first (a reset).
    for round in 0..3u16 {
        let port = 7410 + round;
        let mut server = Proc(
            std::process::Command::new(&example)
                .args(["server", "--port", &port.to_string(), "--runtime-dir"])
                .arg(&b.runtime)
                .spawn()
                .unwrap(),
        );
        let qp = client
            .ctx
            .alloc_pd()
            .unwrap()
            .create_qp(&QpInitAttr::new(&client.cq, 16))
            .unwrap();
        let settings = ConnSettings {
            private_data: [client.mr.stag().0.to_le_bytes(), (BUF as u32).to_le_bytes()].concat(),
            ..ConnSettings::default()
        };
        let remote = format!("10.59.0.2:{port}").parse().unwrap();
        let t = Instant::now();
        let est = loop {
            // The server may not listen yet.
            match client
                .ctx
                .connect_blocking(&qp, remote, &settings, Duration::from_secs(20))
            {
                Ok(e) => break e,
                Err(Error::ConnectionFailed { .. }) if t.elapsed() < Duration::from_secs(20) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("connect: {e}"),
            }
        };
        server.0.kill().unwrap();
        let _ = server.0.wait();
        let reason = loop {
            match client.ctx.next_event(Duration::from_secs(20)).unwrap() {
                Some(Event::Disconnected { conn, reason }) if conn == est.conn => break reason,
                Some(_) => {}
                None => panic!("round {round}: no Disconnected event"),
            }
        };
        assert_eq!(reason, "Reset", "round {round}");
    }
}

#[test]
fn a_listening_port_does_not_outlive_the_control_plane() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Endpoint::start(dir.path(), "a", 1, 63);
    let first = Context::open(&a.runtime).unwrap();
    first.listen(7430, &ConnSettings::default()).unwrap();
    // The control plane dies and another takes its place on the same daemon: the port its
    // application listened on is free again.
    a.control.0.kill().unwrap();
    let _ = a.control.0.wait();
    drop(first);
    a.control = testkit::start_control(&a.runtime);
    let second = Context::open(&a.runtime).unwrap();
    second.listen(7430, &ConnSettings::default()).unwrap();
}

#[test]
fn a_peer_hears_of_an_application_that_died_while_its_control_plane_was_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Endpoint::start(dir.path(), "a", 1, 64);
    let b = Endpoint::start(dir.path(), "b", 2, 64);
    let example = testkit::target_dir().join("examples").join("rdma_pair");
    let mut server = Proc(
        std::process::Command::new(&example)
            .args(["server", "--port", "7440", "--runtime-dir"])
            .arg(&a.runtime)
            .spawn()
            .unwrap(),
    );
    let client = side(&b.runtime, 16);
    let settings = ConnSettings {
        private_data: [client.mr.stag().0.to_le_bytes(), (BUF as u32).to_le_bytes()].concat(),
        ..ConnSettings::default()
    };
    let t = Instant::now();
    let est = loop {
        match client.ctx.connect_blocking(
            &client.qp,
            "10.64.0.1:7440".parse().unwrap(),
            &settings,
            Duration::from_secs(20),
        ) {
            Ok(e) => break e,
            Err(Error::ConnectionFailed { .. }) if t.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    // Endpoint a's control plane goes down, then the application dies; no control plane
    // cleans up after it, yet its peer is told.
    a.control.0.kill().unwrap();
    let _ = a.control.0.wait();
    server.0.kill().unwrap();
    let _ = server.0.wait();
    let reason = loop {
        match client.ctx.next_event(Duration::from_secs(20)).unwrap() {
            Some(Event::Disconnected { conn, reason }) if conn == est.conn => break reason,
            Some(_) => {}
            None => panic!("the peer was never told"),
        }
    };
    assert_eq!(reason, "Reset");
    assert!(
        matches!(a.daemon.0.try_wait(), Ok(None)),
        "iwarpd still runs"
    );
}

/// A daemon that died while the process that started it has not yet waited for it is a
/// zombie, which `kill(pid, 0)` still finds. It is gone all the same: control closes every
/// application's connection and exits with status 3, and the application's next request
/// fails with `ControlGone`, where it would otherwise wait on a daemon that never answers.
#[test]
fn a_daemon_that_died_and_was_not_yet_waited_for_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Endpoint::start(dir.path(), "a", 1, 65);
    let ctx = Context::open(&a.runtime).unwrap();
    let _pd = ctx.alloc_pd().unwrap();
    assert!(ctx.is_served());
    // SIGKILL leaves the daemon's segment and its link in the runtime directory; this test,
    // its parent, waits for it only when the endpoint is dropped.
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(a.daemon.0.id() as libc::pid_t, libc::SIGKILL) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = a.control.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "control still serves a daemon that has exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(!ctx.is_served(), "the context's control has exited");
    match ctx.alloc_pd() {
        Err(Error::ControlGone { .. }) => {}
        other => panic!("a request after the daemon died: {other:?}"),
    }
}
