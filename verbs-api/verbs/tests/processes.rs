//! The library against the real stack, every part its own process: two endpoints (`iwarpd` +
//! `iwarp-control` each, on the embedded Unix-socket Ethernet), the example application
//! `rdma_pair` as one application and this test as the other.

use iwarp_testkit::{self as testkit, Endpoint, Proc};
use iwarp_verbs::Stag;
use iwarp_verbs::{
    access, CompletionQueue, ConnSettings, Context, Error, Event, QpInitAttr, QueuePair, RecvWr,
    SendWr, Sg, SharedBuffer, WcStatus, WrOpcode,
};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn endpoint(dir: &Path, name: &str, n: u8) -> Endpoint {
    Endpoint::start(dir, name, n, 55, &[])
}

/// Shared segments process `pid` created through iwarp-verbs (rings and buffers, memory
/// files named `iwarp-app-<pid>-...`) that process `holder` has open or mapped, and any
/// left as files.
fn segments_of(pid: u32, holder: u32) -> Vec<String> {
    let tag = format!("iwarp-app-{pid}-");
    let fds = std::fs::read_dir(format!("/proc/{holder}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned());
    let maps = std::fs::read_to_string(format!("/proc/{holder}/maps")).unwrap_or_default();
    let files = ["/dev/shm", "/dev/hugepages"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path().to_string_lossy().into_owned());
    fds.chain(maps.lines().map(str::to_owned))
        .chain(files)
        .filter(|l| l.contains(&tag))
        .collect()
}

#[test]
fn an_application_killed_mid_transfer_is_cleaned_up_and_its_peer_sees_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let _a = endpoint(dir.path(), "a", 1);
    let b = endpoint(dir.path(), "b", 2);
    let example = testkit::target_dir().join("examples").join("rdma_pair");
    assert!(example.exists(), "cargo test builds the examples");
    let mut server = Proc(
        Command::new(&example)
            .args(["server", "--port", "7100", "--runtime-dir"])
            .arg(&b.runtime)
            .spawn()
            .unwrap(),
    );

    // This test is the client application on endpoint a.
    let ctx = Context::open(&dir.path().join("a")).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(&cq, 32)).unwrap();
    let buf = ctx.alloc_buffer(1 << 20).unwrap();
    let mr = pd
        .reg_mr(&buf, 0, 1 << 20, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    // Registering past the buffer is refused.
    match pd.reg_mr(&buf, 4096, 1 << 20, access::LOCAL_WRITE) {
        Err(Error::InvalidLength { region_len, .. }) => assert_eq!(region_len, 1 << 20),
        other => panic!("{other:?}"),
    }
    let settings = ConnSettings {
        rdmap_v2: true,
        private_data: [mr.stag().0.to_le_bytes(), (1u32 << 20).to_le_bytes()].concat(),
        ..ConnSettings::default()
    };
    let t = Instant::now();
    let est = loop {
        // The server may still be starting: retry while it is not listening yet.
        match ctx.connect_blocking(
            &qp,
            "10.55.0.2:7100".parse().unwrap(),
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
    assert_eq!(est.rdmap_version, 2);
    let rkey = u32::from_le_bytes(est.private_data[0..4].try_into().unwrap());
    for i in 0..4 {
        let sg = [Sg {
            mr: &mr,
            offset: i * 4096,
            len: 4096,
        }];
        qp.post_recv(&RecvWr {
            wr_id: 500 + i,
            sg_list: &sg,
        })
        .unwrap();
    }
    let server_pid = server.0.id();
    assert!(
        !segments_of(server_pid, server_pid).is_empty(),
        "the server's rings and buffer are shared segments"
    );

    // A stream of RDMA Writes into the server's buffer, and the server is killed in the
    // middle of it.
    let sg = [Sg {
        mr: &mr,
        offset: 65536,
        len: 65536,
    }];
    for i in 0..8 {
        let wr = SendWr::new(
            i,
            WrOpcode::RdmaWrite {
                rkey: Stag(rkey),
                remote_addr: 131072,
            },
            &sg,
        );
        qp.post_send(&wr).unwrap();
    }
    server.0.kill().unwrap();
    let _ = server.0.wait();

    // The peer sees its connection end, and its QP's posted receives come back flushed.
    let t = Instant::now();
    loop {
        if let Some(Event::Disconnected { .. }) = ctx.next_event(Duration::from_secs(1)).unwrap() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no Disconnected event"
        );
    }
    let mut flushed = Vec::new();
    while flushed.len() < 4 {
        match cq.poll_one().unwrap() {
            Some(wc) if wc.is_recv() => {
                assert_eq!(wc.status, WcStatus::WrFlushed, "{wc:?}");
                flushed.push(wc.wr_id);
            }
            Some(_) => {}
            None => {
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "receives not flushed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    assert_eq!(flushed, vec![500, 501, 502, 503]);
    // The server's iwarpd let go of every segment the killed application had (its memory
    // is freed with the last mapping), and none is left as a file.
    let daemon = b.daemon.0.id();
    while !segments_of(server_pid, daemon).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "leaked: {:?}",
            segments_of(server_pid, daemon)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_endpoint_that_is_not_running_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    match Context::open(dir.path()) {
        Err(Error::ControlUnreachable { path, .. }) => {
            assert_eq!(path, dir.path().join("control.sock"))
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a context with nothing running"),
    }
}

/// Two running endpoints (kept alive by the first value, with their directory) and a context
/// on each.
fn two_endpoints() -> ((tempfile::TempDir, Endpoint, Endpoint), Context, Context) {
    let dir = tempfile::tempdir().unwrap();
    let a = endpoint(dir.path(), "a", 1);
    let b = endpoint(dir.path(), "b", 2);
    let ca = Context::open(&a.runtime).unwrap();
    let cb = Context::open(&b.runtime).unwrap();
    ((dir, a, b), ca, cb)
}

/// Connects `qa` (on `ca`, endpoint a) to `qb` (on `cb`, which listens on `port`).
fn connect(ca: &Context, qa: &QueuePair, cb: &Context, qb: &QueuePair, port: u16) {
    let remote = format!("10.55.0.2:{port}").parse().unwrap();
    let conn = ca.connect(qa, remote, &ConnSettings::default()).unwrap();
    let req = cb.get_request(Duration::from_secs(20)).unwrap();
    cb.accept_blocking(&req, qb, &ConnSettings::default(), Duration::from_secs(20))
        .unwrap();
    ca.wait_established(conn, Duration::from_secs(20)).unwrap();
}

/// Waits for `cq`'s next completion and checks it is work request `wr_id`'s, successful.
fn completed(cq: &CompletionQueue, wr_id: u64) {
    let wc = cq.wait(Duration::from_secs(20)).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
}

/// Waits until `bytes` are at `offset` of `buf` (a remote Write's placement, which its
/// sender's completion does not promise).
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

/// The thread's scheduler state letter from /proc (R running, S sleeping, ...).
fn thread_state(tid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name.
    stat.rsplit(')')
        .next()
        .and_then(|r| r.trim().chars().next())
        .unwrap_or('?')
}

#[test]
fn a_waiter_sleeps_until_woken_and_a_bound_window_takes_a_write() {
    let (_endpoints, ca, cb) = two_endpoints();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (qa_cq, qb_cq) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&qa_cq, 8)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&qb_cq, 8)).unwrap();
    let (ba, bb) = (
        ca.alloc_buffer(4096).unwrap(),
        cb.alloc_buffer(4096).unwrap(),
    );
    let ma = pa.reg_mr(&ba, 0, 4096, access::LOCAL_WRITE).unwrap();
    // VA-based: windows bind only to such regions (Verbs figure 19).
    const VA: u64 = 0x4000_0000;
    let mb = pb.reg_mr_va(&bb, 0, 4096, access::LOCAL_WRITE, VA).unwrap();
    // Re-registration gives the region a new STag, and keeps it VA-based; the receive below
    // uses it.
    let old = mb.stag();
    let mb = pb
        .rereg_mr(
            mb,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::BIND,
        )
        .map_err(|(_, e)| e)
        .unwrap();
    assert_ne!(mb.stag(), old, "a new key");
    cb.listen(7300, &ConnSettings::default()).unwrap();
    connect(&ca, &qa, &cb, &qb, 7300);
    let sg = [Sg {
        mr: &mb,
        offset: 0,
        len: 4096,
    }];
    qb.post_recv(&RecvWr {
        wr_id: 77,
        sg_list: &sg,
    })
    .unwrap();

    // B's application blocks on its CQ...
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let cq = qb_cq.clone();
    let waiter = std::thread::spawn(move || {
        // SAFETY: gettid(2) takes no arguments.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        cq.wait(Duration::from_secs(30)).unwrap()
    });
    let tid = tid_rx.recv().unwrap();
    // ...asleep in the kernel, not spinning.
    let t = Instant::now();
    while thread_state(tid) != 'S' {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the waiter never slept"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // A's Send: the daemon writes B's completion and wakes the waiter.
    ba.write(0, b"wake up").unwrap();
    let ssg = [Sg {
        mr: &ma,
        offset: 0,
        len: 7,
    }];
    qa.post_send(&SendWr::new(1, WrOpcode::Send, &ssg)).unwrap();
    let wc = waiter.join().unwrap().expect("woken with a completion");
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (77, WcStatus::Success, 7)
    );
    assert_eq!(bb.to_vec(0, 7).unwrap(), b"wake up");
    completed(&qa_cq, 1);

    // A memory window on B's region, bound by B, written by A through the window's STag.
    let mw = pb.alloc_mw().unwrap();
    let bind = WrOpcode::BindMw {
        mw: mw.stag(),
        mr: mb.stag(),
        to: VA + 1024,
        len: 512,
        access: access::REMOTE_WRITE,
    };
    qb.post_send(&SendWr::new(9, bind, &[])).unwrap();
    completed(&qb_cq, 9);
    ba.write(100, b"through the window").unwrap();
    let wsg = [Sg {
        mr: &ma,
        offset: 100,
        len: 18,
    }];
    let write = WrOpcode::RdmaWrite {
        rkey: mw.stag(),
        remote_addr: VA + 1024 + 8,
    };
    qa.post_send(&SendWr::new(2, write, &wsg)).unwrap();
    completed(&qa_cq, 2);
    landed(&bb, 1032, b"through the window");
    // The region cannot be deregistered while the window is bound into it; once the window
    // is deallocated (dropped), it can.
    let (mb, e) = mb
        .deregister()
        .expect_err("refused while a window is bound");
    assert!(matches!(e, Error::Refused { .. }), "{e}");
    // Verbs section 6.1.4: nor is the QP the window is bound on destroyed; it comes back
    // and still works.
    let (qb, e) = *qb
        .destroy()
        .expect_err("refused while a window is bound on it");
    assert!(matches!(e, Error::Refused { .. }), "{e}");
    qa.post_send(&SendWr::new(3, write, &wsg)).unwrap();
    completed(&qa_cq, 3);
    drop(mw);
    mb.deregister().map_err(|(_, e)| e).unwrap();
    qb.destroy().map_err(|b| b.1).unwrap();
}

#[test]
fn two_qps_take_their_receives_from_one_shared_receive_queue() {
    let (_endpoints, ca, cb) = two_endpoints();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (ca.create_cq(32).unwrap(), cb.create_cq(32).unwrap());
    let srq = pb.create_srq(16).unwrap();
    let (ba, bb) = (
        ca.alloc_buffer(8192).unwrap(),
        cb.alloc_buffer(8192).unwrap(),
    );
    let ma = pa.reg_mr(&ba, 0, 8192, access::LOCAL_WRITE).unwrap();
    let mb = pb.reg_mr(&bb, 0, 8192, access::LOCAL_WRITE).unwrap();
    cb.listen(7400, &ConnSettings::default()).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let qa = pa.create_qp(&QpInitAttr::new(&cqa, 8)).unwrap();
        let mut attr = QpInitAttr::new(&cqb, 8);
        attr.srq = Some(srq.clone());
        let qb = pb.create_qp(&attr).unwrap();
        connect(&ca, &qa, &cb, &qb, 7400);
        pairs.push((qa, qb));
    }
    // A QP on an S-RQ has no receive queue of its own.
    let sg0 = [Sg {
        mr: &mb,
        offset: 0,
        len: 1024,
    }];
    assert!(pairs[0]
        .1
        .post_recv(&RecvWr {
            wr_id: 0,
            sg_list: &sg0
        })
        .is_err());
    for i in 0..2u64 {
        let sg = [Sg {
            mr: &mb,
            offset: i * 1024,
            len: 1024,
        }];
        srq.post_recv(&RecvWr {
            wr_id: 40 + i,
            sg_list: &sg,
        })
        .unwrap();
    }
    for (i, (qa, _)) in pairs.iter().enumerate() {
        let text = format!("from qp {i}");
        ba.write(4096 + i * 64, text.as_bytes()).unwrap();
        let sg = [Sg {
            mr: &ma,
            offset: 4096 + i as u64 * 64,
            len: text.len() as u32,
        }];
        qa.post_send(&SendWr::new(i as u64, WrOpcode::Send, &sg))
            .unwrap();
        let wc = cqb.wait(Duration::from_secs(20)).unwrap().unwrap();
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        // S-RQ entries are taken in posting order, each by the QP the message came to.
        assert_eq!(wc.wr_id, 40 + i as u64);
        assert_eq!(wc.qp_num, pairs[i].1.qp_num().0);
        assert_eq!(bb.to_vec(i * 1024, text.len()).unwrap(), text.as_bytes());
    }
    // Both receives are retired: the region can go.
    assert_eq!(mb.posted(), 0);
    // A receive still posted when the S-RQ is destroyed is discarded with it (Verbs 8.2.7),
    // so it no longer holds the region.
    let sg = [Sg {
        mr: &mb,
        offset: 2048,
        len: 1024,
    }];
    srq.post_recv(&RecvWr {
        wr_id: 50,
        sg_list: &sg,
    })
    .unwrap();
    assert_eq!(mb.posted(), 1);
    drop(pairs);
    drop(srq);
    assert_eq!(
        mb.posted(),
        0,
        "the destroyed S-RQ's receive still holds the region"
    );
    mb.deregister().map_err(|(_, e)| e).unwrap();
}

#[test]
fn modify_srq_resize_cq_and_fast_register_over_the_real_stack() {
    let (_endpoints, ca, cb) = two_endpoints();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(4).unwrap());
    let srq = pb.create_srq(8).unwrap();
    let (ba, bb) = (
        ca.alloc_buffer(8192).unwrap(),
        cb.alloc_buffer(8192).unwrap(),
    );
    let ma = pa.reg_mr(&ba, 0, 8192, access::LOCAL_WRITE).unwrap();
    let mb = pb.reg_mr(&bb, 0, 8192, access::LOCAL_WRITE).unwrap();
    cb.listen(7500, &ConnSettings::default()).unwrap();
    let qa = pa.create_qp(&QpInitAttr::new(&cqa, 8)).unwrap();
    let mut attr = QpInitAttr::new(&cqb, 8);
    attr.srq = Some(srq.clone());
    let qb = pb.create_qp(&attr).unwrap();
    connect(&ca, &qa, &cb, &qb, 7500);

    // Modify S-RQ: a limit above the depth is refused; limit 3 is armed.
    for i in 0..4u64 {
        let sg = [Sg {
            mr: &mb,
            offset: i * 64,
            len: 64,
        }];
        srq.post_recv(&RecvWr {
            wr_id: 40 + i,
            sg_list: &sg,
        })
        .unwrap();
    }
    assert!(matches!(srq.arm_limit(9), Err(Error::Refused { .. })));
    assert_eq!(srq.query().unwrap(), (8, 0));
    srq.arm_limit(3).unwrap();
    assert_eq!(srq.query().unwrap(), (8, 3));
    let send = |wr_id: u64| {
        let sg = [Sg {
            mr: &ma,
            offset: wr_id * 64,
            len: 8,
        }];
        qa.post_send(&SendWr::new(wr_id, WrOpcode::Send, &sg))
            .unwrap();
        completed(&cqa, wr_id);
    };
    send(1);
    send(2);
    // Two of four receives taken: fewer than 3 remain, the limit event comes once.
    match cb.next_event(Duration::from_secs(20)).unwrap() {
        Some(Event::SrqLimit { srq: s }) => assert_eq!(s, srq.srq_num()),
        other => panic!("{other:?}"),
    }

    // Modify CQ with two completions on B's CQ, never polled: shrinking below them is
    // refused and changes nothing; growing keeps them, first and in order.
    assert!(matches!(cqb.resize(1), Err(Error::Refused { .. })));
    assert_eq!((cqb.depth(), cqb.query().unwrap()), (4, 4));
    assert_eq!(cqb.resize(64).unwrap(), 64);
    assert_eq!((cqb.depth(), cqb.query().unwrap()), (64, 64));
    send(3);
    send(4);
    let mut got = Vec::new();
    let t = Instant::now();
    while got.len() < 4 {
        assert!(t.elapsed() < Duration::from_secs(20), "got only {got:?}");
        if let Some(wc) = cqb.wait(Duration::from_secs(1)).unwrap() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            got.push(wc.wr_id);
        }
    }
    assert_eq!(got, vec![40, 41, 42, 43]);

    // Fast-Register: B gives part of its region a new STag; A writes through it.
    let fr = pb.alloc_fastreg_stag().unwrap();
    let reg = WrOpcode::FastRegister {
        stag: fr.stag(),
        mr: mb.stag(),
        offset: 4096,
        len: 1024,
        // Remote Write needs Local Write (Verbs figure 18).
        access: access::LOCAL_WRITE | access::REMOTE_WRITE,
    };
    qb.post_send(&SendWr::new(9, reg, &[])).unwrap();
    completed(&cqb, 9);
    ba.write(1024, b"fast-registered").unwrap();
    let sg = [Sg {
        mr: &ma,
        offset: 1024,
        len: 15,
    }];
    let write = WrOpcode::RdmaWrite {
        rkey: fr.stag(),
        remote_addr: 16,
    };
    qa.post_send(&SendWr::new(5, write, &sg)).unwrap();
    completed(&cqa, 5);
    landed(&bb, 4096 + 16, b"fast-registered");
    // The region cannot go while the fast-registered STag points into it (Verbs 7.2.9)...
    let (mb, e) = mb.deregister().expect_err("refused while fast-registered");
    assert!(matches!(e, Error::Refused { .. }), "{e}");
    // ...and can once it is invalidated.
    let inv = WrOpcode::LocalInvalidate { stag: fr.stag() };
    qb.post_send(&SendWr::new(10, inv, &[])).unwrap();
    completed(&cqb, 10);
    mb.deregister().map_err(|(_, e)| e).unwrap();
}

/// The value of `key` in the endpoint's stats file once iwarpd has rewritten it (so it
/// counts everything done before the call).
fn fresh_stat(e: &Endpoint, key: &str) -> u64 {
    let read = || std::fs::read_to_string(e.runtime.join("stats")).unwrap_or_default();
    let before = read();
    let t = Instant::now();
    let text = loop {
        let now = read();
        if now != before && !now.is_empty() {
            break now;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "stats never rewritten"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    testkit::stat(&text, key).unwrap_or_else(|| panic!("no {key} in {text}"))
}

/// An idle iwarpd sleeps in the kernel, and a post reaches it through the doorbell the
/// library rings (`iwarp_abi::wake`), not through a timer: each Read is posted after A's
/// daemon has had time to fall asleep, and A's counters show it woken by the doorbell for
/// (nearly) each. Nothing else rings A's doorbell meanwhile (control sends no command), so a
/// library that did not ring would leave the count where it was.
#[test]
fn an_idle_daemon_is_woken_by_the_application_that_posts() {
    let ((_dir, a, _b), ca, cb) = two_endpoints();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (qa_cq, qb_cq) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&qa_cq, 8)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&qb_cq, 8)).unwrap();
    let (ba, bb) = (
        ca.alloc_buffer(4096).unwrap(),
        cb.alloc_buffer(4096).unwrap(),
    );
    // An iWARP Read's sink is written by tagged Read Responses: it needs remote write.
    let ma = pa
        .reg_mr(&ba, 0, 4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let mb = pb.reg_mr(&bb, 0, 4096, access::REMOTE_READ).unwrap();
    bb.write(0, b"read me").unwrap();
    cb.listen(7310, &ConnSettings::default()).unwrap();
    connect(&ca, &qa, &cb, &qb, 7310);
    let before = fresh_stat(&a, "wakes_doorbell");
    const READS: u64 = 20;
    let sg = [Sg {
        mr: &ma,
        offset: 0,
        len: 7,
    }];
    let read = WrOpcode::RdmaRead {
        rkey: mb.stag(),
        remote_addr: 0,
    };
    for i in 0..READS {
        std::thread::sleep(Duration::from_millis(5));
        qa.post_send(&SendWr::new(i, read, &sg)).unwrap();
        completed(&qa_cq, i);
    }
    assert_eq!(ba.to_vec(0, 7).unwrap(), b"read me");
    let after = fresh_stat(&a, "wakes_doorbell");
    assert!(
        after >= before + READS / 2,
        "doorbell wake-ups {before} -> {after} over {READS} posts to a sleeping daemon"
    );
}

/// Verbs section 6.2.2.2: a peer's LLP close without a Terminate (its FIN) while the QP is
/// in RTS with nothing outstanding moves it to Closing, and from there to Idle (section
/// 6.2.5), not to Error: the receive still posted comes back flushed, the application
/// hears Disconnected, and Query QP reports Idle.
#[test]
fn a_peer_close_in_rts_leaves_the_qp_idle() {
    let (_endpoints, ca, cb) = two_endpoints();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (qa_cq, qb_cq) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&qa_cq, 8)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&qb_cq, 8)).unwrap();
    let (ba, bb) = (
        ca.alloc_buffer(4096).unwrap(),
        cb.alloc_buffer(4096).unwrap(),
    );
    let ma = pa.reg_mr(&ba, 0, 4096, access::LOCAL_WRITE).unwrap();
    let mb = pb.reg_mr(&bb, 0, 4096, access::LOCAL_WRITE).unwrap();
    for (wr_id, offset) in [(1, 0), (2, 2048)] {
        let sg = [Sg {
            mr: &mb,
            offset,
            len: 2048,
        }];
        qb.post_recv(&RecvWr {
            wr_id,
            sg_list: &sg,
        })
        .unwrap();
    }
    cb.listen(7310, &ConnSettings::default()).unwrap();
    let remote = "10.55.0.2:7310".parse().unwrap();
    let conn = ca.connect(&qa, remote, &ConnSettings::default()).unwrap();
    let req = cb.get_request(Duration::from_secs(20)).unwrap();
    cb.accept_blocking(&req, &qb, &ConnSettings::default(), Duration::from_secs(20))
        .unwrap();
    ca.wait_established(conn, Duration::from_secs(20)).unwrap();
    let sg = [Sg {
        mr: &ma,
        offset: 0,
        len: 5,
    }];
    qa.post_send(&SendWr::new(9, WrOpcode::Send, &sg)).unwrap();
    completed(&qa_cq, 9);
    let wc = qb_cq.wait(Duration::from_secs(20)).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "{wc:?}");

    ca.disconnect(conn, false).unwrap();
    let t = Instant::now();
    loop {
        if let Some(Event::Disconnected { .. }) = cb.next_event(Duration::from_secs(1)).unwrap() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no Disconnected event"
        );
    }
    let wc = qb_cq.wait(Duration::from_secs(20)).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushed), "{wc:?}");
    // Control hears of the QP's move from the daemon, apart from the Disconnected event.
    loop {
        let state = cb.query_qp(&qb).unwrap();
        if state == iwarp_verbs::QpState::Idle {
            break;
        }
        assert_eq!(
            state,
            iwarp_verbs::QpState::Rts,
            "only RTS may come before Idle"
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the QP never reached Idle"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
