//! The slow path of the library against the real `iwarp-control` process, with this test
//! playing `iwarpd`: it creates the daemon segment, answers every command OK, records the
//! commands, and joins a `TcpConnect` to a `TcpListen` on the same port by relaying the MPA
//! bytes between the two ends (as control/tests/connect.rs does by hand).
//!
//! What the library sends is checked where it ends up: in the commands control gives the
//! daemon (ids, ring segment paths that exist, region offsets and lengths, addresses).

use iwarp_abi::command::{Command, ShmPath, NO_SRQ};
use iwarp_abi::daemon_shm::DaemonShm;
use iwarp_abi::segment::HugePolicy;
use iwarp_verbs::{
    access, ConnSettings, Context, Error, ErrorCode, Event, QpInitAttr, QpState, QueuePair,
    RnicAttr,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Proc};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

/// An endpoint whose `iwarpd` is this test: a runtime directory, the fake daemon's thread and
/// a real `iwarp-control` process.
struct Endpoint {
    dir: tempfile::TempDir,
    control: Child,
    commands: mpsc::Receiver<Command>,
    stop: mpsc::Sender<()>,
    daemon: Option<JoinHandle<()>>,
}

impl Endpoint {
    fn start() -> Endpoint {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = tempfile::tempdir().unwrap();
        let name = format!(
            "iwarp-verbs-ctx-{}-{}.daemon",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let d = DaemonShm::create(
            &name,
            Some(&dir.path().join("daemon.shm")),
            64,
            256,
            HugePolicy::Off,
        )
        .unwrap();
        let (tx, commands) = mpsc::channel();
        let (stop, stop_rx) = mpsc::channel();
        let daemon = std::thread::spawn(move || iwarp_testkit::fake_daemon(d, tx, stop_rx));
        let control = Proc::new(iwarp_testkit::binary("iwarp-control"))
            .arg("--runtime-dir")
            .arg(dir.path())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !dir.path().join("control.sock").exists() {
            assert!(t.elapsed() < WAIT, "iwarp-control never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
        Endpoint {
            dir,
            control,
            commands,
            stop,
            daemon: Some(daemon),
        }
    }

    fn runtime(&self) -> &Path {
        self.dir.path()
    }

    /// The next command the daemon received that `want` picks (earlier ones are passed
    /// over); panics, naming what it saw, when none comes.
    fn expect(&self, what: &str, want: impl Fn(&Command) -> bool) -> Command {
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.commands.recv_timeout(left) {
                Ok(c) if want(&c) => return c,
                Ok(c) => seen.push(c),
                Err(_) => panic!("the daemon never received {what}; it saw {seen:?}"),
            }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.control.kill();
        let _ = self.control.wait();
        let _ = self.stop.send(());
        if let Some(d) = self.daemon.take() {
            let _ = d.join();
        }
    }
}

/// Whether `p` names a descriptor of this process (`/proc/<pid>/fd/<fd>`).
fn ours(p: &ShmPath) -> bool {
    p.to_path()
        .starts_with(format!("/proc/{}/fd", std::process::id()))
}

fn exists(p: &ShmPath) -> bool {
    p.to_path().exists()
}

/// Waits until none of `files` exists any more.
fn wait_removed(files: &[PathBuf]) {
    let t = Instant::now();
    while files.iter().any(|f| f.exists()) {
        assert!(
            t.elapsed() < WAIT,
            "segment files left behind: {:?}",
            files.iter().filter(|f| f.exists()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn resources_reach_the_daemon_through_control_and_are_released_when_dropped() {
    let ep = Endpoint::start();
    let ctx = Context::open(ep.runtime()).unwrap();
    assert_eq!(ctx.runtime_dir(), ep.runtime());
    let limits = ctx.query_rnic().unwrap();
    assert_eq!(
        limits,
        RnicAttr::default(),
        "control serves its configured limits"
    );

    let pd = ctx.alloc_pd().unwrap();
    ep.expect("AllocPd", |c| *c == Command::AllocPd { pd: pd.pd() });

    // A CQ: its ring is a segment this process created, which the daemon is told to map.
    let cq = ctx.create_cq(64).unwrap();
    let Command::CreateCq {
        depth,
        ring: cq_ring,
        ..
    } = ep.expect(
        "CreateCq",
        |c| matches!(c, Command::CreateCq { cq: n, .. } if *n == cq.cq_num()),
    )
    else {
        unreachable!()
    };
    assert_eq!(depth, 64);
    // Named by this process's descriptor, which control opened to check it before the
    // daemon was told; the library closes it once the request is answered (the mapping
    // is all it keeps).
    assert!(ours(&cq_ring), "{:?}", cq_ring.to_path());

    // A QP on that CQ: send and receive rings, two more segments.
    let qp = pd.create_qp(&QpInitAttr::new(&cq, 32)).unwrap();
    let Command::CreateQp {
        pd: qp_pd,
        send_cq,
        recv_cq,
        srq,
        sq_depth,
        rq_depth,
        sq,
        rq,
        ..
    } = ep.expect(
        "CreateQp",
        |c| matches!(c, Command::CreateQp { qp: n, .. } if *n == qp.qp_num()),
    )
    else {
        unreachable!()
    };
    assert_eq!(
        (qp_pd, send_cq, recv_cq),
        (pd.pd(), cq.cq_num(), cq.cq_num())
    );
    assert_eq!((srq, sq_depth, rq_depth), (NO_SRQ, 32, 32));
    // Two descriptors open at once; the CQ's number may be among them again, as it was
    // closed.
    assert!(ours(&sq) && ours(&rq) && sq != rq);
    assert_eq!(ctx.query_qp(&qp).unwrap(), QpState::Idle);

    // A buffer: copies in and out, bounds-checked.
    let buf = ctx.alloc_buffer(1 << 16).unwrap();
    assert_eq!(buf.len(), 1 << 16);
    buf.write(100, b"hello").unwrap();
    assert_eq!(buf.to_vec(100, 5).unwrap(), b"hello");
    assert!(matches!(
        buf.write((1 << 16) - 2, b"abc"),
        Err(Error::InvalidLength { .. })
    ));

    // Two regions over it: the segment is offered to control once, both name it.
    let rights = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let mr = pd.reg_mr(&buf, 4096, 8192, rights).unwrap();
    let Command::RegisterMr {
        pd: mr_pd,
        access: mr_access,
        offset,
        len,
        segment: buf_seg,
        ..
    } = ep.expect(
        "RegisterMr",
        |c| matches!(c, Command::RegisterMr { stag, .. } if *stag == mr.stag()),
    )
    else {
        unreachable!()
    };
    assert_eq!(
        (mr_pd, mr_access, offset, len),
        (pd.pd(), rights, 4096, 8192)
    );
    assert_eq!(mr.len(), 8192);
    assert!(exists(&buf_seg));
    let mr2 = pd.reg_mr(&buf, 0, 4096, access::LOCAL_WRITE).unwrap();
    assert_ne!(mr2.stag(), mr.stag());
    let Command::RegisterMr { segment, len, .. } = ep.expect(
        "the second RegisterMr",
        |c| matches!(c, Command::RegisterMr { stag, .. } if *stag == mr2.stag()),
    ) else {
        unreachable!()
    };
    assert_eq!((segment, len), (buf_seg, 4096));

    // A region past the end of the buffer is refused before control is asked...
    match pd.reg_mr(&buf, 4096, 1 << 16, access::LOCAL_WRITE) {
        Err(Error::InvalidLength {
            offset,
            len,
            region_len,
        }) => assert_eq!((offset, len, region_len), (4096, 1 << 16, 1 << 16)),
        other => panic!("{other:?}"),
    }
    // ...and what control refuses comes back typed, with its code and reason.
    let invalid_access = ErrorCode::InvalidAccess as u16;
    match pd.reg_mr(&buf, 0, 4096, access::REMOTE_WRITE) {
        Err(Error::Refused { code, message }) => {
            assert_eq!(code, invalid_access);
            assert!(message.contains("local write"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let mut too_many = QpInitAttr::new(&cq, 32);
    too_many.max_sge = limits.max_sge + 1;
    match pd.create_qp(&too_many) {
        Err(Error::Refused { code, message }) => {
            assert_eq!(code, ErrorCode::InvalidAttribute as u16);
            assert!(message.contains("sge"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    drop(too_many); // it holds the CQ
                    // A deregistration refused while posted work uses the region is tested in fast_path.rs;
                    // here the context is still usable after the refusals.
    assert_eq!(ctx.query_qp(&qp).unwrap(), QpState::Idle);
    assert_eq!(ctx.modify_qp(&qp, QpState::Error).unwrap(), QpState::Error);
    assert_eq!(ctx.query_qp(&qp).unwrap(), QpState::Error);

    // Dropping releases each resource in the daemon and removes its segment file.
    let (stag, stag2, qp_num, cq_num, pd_num) =
        (mr.stag(), mr2.stag(), qp.qp_num(), cq.cq_num(), pd.pd());
    mr.deregister().map_err(|(_, e)| e).unwrap();
    ep.expect("DeregisterMr", |c| *c == Command::DeregisterMr { stag });
    drop(mr2);
    ep.expect("DeregisterMr", |c| {
        *c == Command::DeregisterMr { stag: stag2 }
    });
    drop(qp);
    ep.expect("DestroyQp", |c| *c == Command::DestroyQp { qp: qp_num });
    drop(cq);
    ep.expect("DestroyCq", |c| *c == Command::DestroyCq { cq: cq_num });
    drop(buf);
    drop(pd);
    ep.expect("DeallocPd", |c| *c == Command::DeallocPd { pd: pd_num });
    drop(ctx);
    wait_removed(&[sq, rq, cq_ring, buf_seg].map(|p| p.to_path()));
}

/// PD, CQ and a QP (all three kept: the QP holds its CQ, the caller the PD).
fn qp_on(ctx: &Context) -> (iwarp_verbs::ProtectionDomain, QueuePair) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(&cq, 32)).unwrap();
    (pd, qp)
}

fn settings(ird: u16, ord: u16, private_data: &[u8]) -> ConnSettings {
    ConnSettings {
        ird,
        ord,
        private_data: private_data.to_vec(),
        ..ConnSettings::default()
    }
}

#[test]
fn connect_accept_reject_refusal_and_disconnect_with_events() {
    let ep = Endpoint::start();
    // Two applications' contexts on one endpoint: `b` listens, `a` connects.
    let a = Context::open(ep.runtime()).unwrap();
    let b = Context::open(ep.runtime()).unwrap();
    let (_pda, qa) = qp_on(&a);
    let (_pdb, qb) = qp_on(&b);
    let d = ConnSettings::default();
    assert!(d.crc && !d.markers && d.revision == 2, "{d:?}");

    b.listen(5000, &ConnSettings::default()).unwrap();
    ep.expect("TcpListen", |c| {
        matches!(c, Command::TcpListen { port: 5000, .. })
    });
    match a.listen(5000, &ConnSettings::default()) {
        Err(Error::Refused { message, .. }) => assert!(message.contains("still used"), "{message}"),
        other => panic!("a second listener on one port: {other:?}"),
    }

    // A connects with IRD 4 / ORD 8.
    let remote: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let conn = a.connect(&qa, remote, &settings(4, 8, b"hello")).unwrap();
    ep.expect("TcpConnect", |c| {
        *c == Command::TcpConnect {
            conn,
            qp: qa.qp_num(),
            remote,
        }
    });
    // Asking whether control still serves B takes in what has arrived without consuming
    // it: the request, there by now, is still B's to take below.
    std::thread::sleep(Duration::from_millis(300));
    assert!(b.is_served());
    // B keeps calling control until the request has arrived: events that come while a
    // reply is awaited are kept, not lost, and the replies still match their requests.
    let t = Instant::now();
    let req = loop {
        assert_eq!(b.query_qp(&qb).unwrap(), QpState::Idle);
        if let Some(e) = b.poll_event().unwrap() {
            match e {
                Event::ConnectRequest(r) => break r,
                other => panic!("{other:?}"),
            }
        }
        assert!(t.elapsed() < WAIT, "no connection request");
    };
    assert_eq!(
        (req.port, req.private_data.as_slice()),
        (5000, &b"hello"[..])
    );

    // B accepts with IRD 2 / ORD 16: each side's ORD is capped by the other's IRD.
    let eb = b
        .accept_blocking(&req, &qb, &settings(2, 16, b"welcome"), WAIT)
        .unwrap();
    assert_eq!(
        (eb.conn, eb.qp, eb.ird, eb.ord, eb.private_data.as_slice()),
        (req.conn, qb.qp_num(), 2, 4, &b"hello"[..])
    );
    let ea = a.wait_established(conn, WAIT).unwrap();
    assert_eq!(
        (ea.conn, ea.qp, ea.ird, ea.ord, ea.private_data.as_slice()),
        (conn, qa.qp_num(), 4, 2, &b"welcome"[..])
    );
    ep.expect(
        "QpRts",
        |c| matches!(c, Command::QpRts { qp, .. } if *qp == qa.qp_num()),
    );

    // A second QP of A is rejected with private data.
    let (_pda2, qa2) = qp_on(&a);
    let conn2 = a.connect(&qa2, remote, &ConnSettings::default()).unwrap();
    let req2 = b.get_request(WAIT).unwrap();
    b.reject(&req2, b"busy").unwrap();
    match a.wait_established(conn2, WAIT) {
        Err(Error::ConnectionRejected { private_data }) => assert_eq!(private_data, b"busy"),
        other => panic!("{other:?}"),
    }

    // A connection to a port nobody listens on fails, with the reason.
    let (_pda3, qa3) = qp_on(&a);
    let nowhere: SocketAddr = "127.0.0.1:5999".parse().unwrap();
    match a.connect_blocking(&qa3, nowhere, &ConnSettings::default(), WAIT) {
        Err(Error::ConnectionFailed { reason }) => assert!(!reason.is_empty()),
        other => panic!("{other:?}"),
    }

    // Graceful disconnect by A: B hears of it.
    a.disconnect(conn, false).unwrap();
    ep.expect("TcpClose", |c| *c == Command::TcpClose { conn });
    let t = Instant::now();
    loop {
        match b.next_event(WAIT).unwrap() {
            Some(Event::Disconnected { conn: c, reason }) => {
                assert_eq!(c, eb.conn);
                assert!(reason.contains("Graceful"), "{reason}");
                break;
            }
            Some(other) => panic!("{other:?}"),
            None => assert!(t.elapsed() < WAIT, "B never heard of the disconnect"),
        }
    }
}

/// The application of [`an_application_that_exits_without_cleaning_up_is_torn_down`]: run
/// as a child process of that test, it does nothing when run by the test harness itself.
#[test]
fn exiting_application() {
    if std::env::var_os("IWARP_VERBS_TEST_CHILD").is_none() {
        return;
    }
    // The endpoint comes from IWARP_RUNTIME_DIR.
    let ctx = Context::open_default().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(&cq, 8)).unwrap();
    let buf = ctx.alloc_buffer(8192).unwrap();
    let mr = pd.reg_mr(&buf, 0, 8192, access::LOCAL_WRITE).unwrap();
    ctx.listen(6000, &ConnSettings::default()).unwrap();
    // Exit with every resource still held: no destructor runs, nothing is released.
    let _keep = (ctx, pd, cq, qp, buf, mr);
    std::process::exit(0);
}

#[test]
fn an_application_that_exits_without_cleaning_up_is_torn_down() {
    let ep = Endpoint::start();
    let st = Proc::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exiting_application",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IWARP_VERBS_TEST_CHILD", "1")
        .env("IWARP_RUNTIME_DIR", ep.runtime())
        .status()
        .unwrap();
    assert!(st.success(), "the application failed: {st:?}");

    // What the application created (it opened its context by IWARP_RUNTIME_DIR)...
    let Command::AllocPd { pd } = ep.expect("AllocPd", |c| matches!(c, Command::AllocPd { .. }))
    else {
        unreachable!()
    };
    let Command::CreateCq { cq, ring, .. } =
        ep.expect("CreateCq", |c| matches!(c, Command::CreateCq { .. }))
    else {
        unreachable!()
    };
    let Command::CreateQp { qp, sq, rq, .. } =
        ep.expect("CreateQp", |c| matches!(c, Command::CreateQp { .. }))
    else {
        unreachable!()
    };
    let Command::RegisterMr { stag, segment, .. } =
        ep.expect("RegisterMr", |c| matches!(c, Command::RegisterMr { .. }))
    else {
        unreachable!()
    };
    ep.expect("TcpListen", |c| {
        matches!(c, Command::TcpListen { port: 6000, .. })
    });
    // ...control tears down when its socket reaches EOF, in destroy order...
    let mut left = vec![
        Command::TcpUnlisten { port: 6000 },
        Command::DestroyQp { qp },
        Command::DeregisterMr { stag },
        Command::DestroyCq { cq },
        Command::DeallocPd { pd },
    ];
    while !left.is_empty() {
        let c = ep.expect("the teardown", |c| left.contains(c));
        if c == (Command::DeallocPd { pd }) {
            assert!(
                left.iter()
                    .all(|x| matches!(x, Command::DeallocPd { .. } | Command::TcpUnlisten { .. })),
                "the PD goes after what it holds: {left:?}"
            );
        }
        left.retain(|x| *x != c);
    }
    // ...and removes the segment files the application left behind.
    wait_removed(&[ring, sq, rq, segment].map(|p| p.to_path()));
}

#[test]
fn opening_where_nothing_listens_names_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    match Context::open(dir.path()) {
        Err(e @ Error::ControlUnreachable { .. }) => {
            let Error::ControlUnreachable { path, .. } = &e else {
                unreachable!()
            };
            assert_eq!(path, &sock);
            assert!(e.to_string().contains(&sock.display().to_string()), "{e}");
        }
        other => panic!("{other:?}"),
    }
}
