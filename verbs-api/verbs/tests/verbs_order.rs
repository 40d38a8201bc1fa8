//! Completion order through the real stack, every part its own process: two endpoints
//! (`iwarpd` + `iwarp-control` each, on the embedded Unix-socket Ethernet) and this test as
//! the application on both. A work request the daemon cannot run completes in its turn,
//! behind the work posted before it, so the regions that work uses stay registered until
//! its own completion is polled.

use iwarp_testkit::Endpoint;
use iwarp_verbs::{
    access, ConnSettings, Context, Error, Event, QpInitAttr, QpState, QueuePair, SendWr, Sg,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use std::path::Path;
use std::time::{Duration, Instant};

const SUBNET: u8 = 57;

fn endpoint(dir: &Path, name: &str, n: u8) -> (Endpoint, Context) {
    let e = Endpoint::start(dir, name, n, SUBNET, &[]);
    let ctx = Context::open(&e.runtime).unwrap();
    (e, ctx)
}

/// Connects `qa` (on `ca`, endpoint a) to `qb` (on `cb`, which listens on `port`), with A's
/// settings `sa`.
fn connect(
    ca: &Context,
    qa: &QueuePair,
    cb: &Context,
    qb: &QueuePair,
    port: u16,
    sa: &ConnSettings,
) {
    cb.listen(port, &ConnSettings::default()).unwrap();
    let remote = format!("10.{SUBNET}.0.2:{port}").parse().unwrap();
    let conn = ca.connect(qa, remote, sa).unwrap();
    let req = cb.get_request(Duration::from_secs(20)).unwrap();
    cb.accept_blocking(&req, qb, &ConnSettings::default(), Duration::from_secs(20))
        .unwrap();
    ca.wait_established(conn, Duration::from_secs(20)).unwrap();
}

fn next(cq: &iwarp_verbs::CompletionQueue) -> WorkCompletion {
    cq.wait(Duration::from_secs(30))
        .unwrap()
        .expect("a completion within 30 s")
}

/// Waits for the asynchronous event saying `qp` entered Error.
fn qp_error_event(ctx: &Context, qp: &QueuePair) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        if let Some(Event::QpError { qp: q }) =
            ctx.next_async_event(Duration::from_secs(1)).unwrap()
        {
            if q == qp.qp_num() {
                return;
            }
        }
    }
    panic!("no QP error event for QP {}", qp.qp_num());
}

/// Verbs section 8.2.2 rule 2 (an SQ's WRs complete in posting order), section 8.3.2 with
/// figure 23 (an access rights violation of a local STag is a completion error that moves
/// the QP to Error), section 6.2.4 (Error flushes the WRs behind it, with an asynchronous
/// event) and section 8.2.4 (a WR's resources stay the RI's until its completion is
/// retrieved): a 4 MiB Write, then a Read whose sink lacks Remote Write, then a small Write.
#[test]
fn a_refused_read_completes_behind_the_write_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_a, ca) = endpoint(dir.path(), "a", 1);
    let (_b, cb) = endpoint(dir.path(), "b", 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&cqa, 8)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&cqb, 8)).unwrap();
    const LEN: usize = 4 << 20;
    let (ba, bb) = (
        ca.alloc_buffer(LEN + 4096).unwrap(),
        cb.alloc_buffer(LEN + 4096).unwrap(),
    );
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4093) as u8).collect();
    ba.write(0, &data).unwrap();
    let source = pa.reg_mr(&ba, 0, LEN as u64, access::LOCAL_WRITE).unwrap();
    // Local Write only: a Read Response is placed as a tagged Write, so an iWARP Read sink
    // needs Remote Write too.
    let sink = pa
        .reg_mr(&ba, LEN as u64, 4096, access::LOCAL_WRITE)
        .unwrap();
    let target = pb
        .reg_mr(
            &bb,
            0,
            (LEN + 4096) as u64,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    connect(&ca, &qa, &cb, &qb, 7500, &ConnSettings::default());

    let big = [Sg {
        mr: &source,
        offset: 0,
        len: LEN as u32,
    }];
    let small = [Sg {
        mr: &source,
        offset: 0,
        len: 64,
    }];
    let into = [Sg {
        mr: &sink,
        offset: 0,
        len: 64,
    }];
    let write = |remote_addr| WrOpcode::RdmaWrite {
        rkey: target.stag(),
        remote_addr,
    };
    let read = WrOpcode::RdmaRead {
        rkey: target.stag(),
        remote_addr: 0,
    };
    let mut b = qa.batch();
    b.send(&SendWr::new(1, write(0), &big)).unwrap();
    b.send(&SendWr::new(2, read, &into)).unwrap();
    b.send(&SendWr::new(3, write(LEN as u64), &small)).unwrap();
    b.submit().unwrap();

    let wc = next(&cqa);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (1, WcOpcode::Write, WcStatus::Success),
        "the first Write completes first: {wc:?}"
    );
    // The Write's completion released only the Write's use of the source; the small Write
    // still holds it until its own completion is polled.
    assert_eq!(source.posted(), 1);
    let (source, e) = source
        .deregister()
        .expect_err("the third WR still holds the region");
    assert!(matches!(e, Error::MrInUse { posted: 1, .. }), "{e}");
    assert_eq!(sink.posted(), 1);

    let wc = next(&cqa);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (2, WcOpcode::Read, WcStatus::LocalProtectionError),
        "{wc:?}"
    );
    assert_eq!(sink.posted(), 0);
    let wc = next(&cqa);
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::WrFlushed), "{wc:?}");
    assert!(cqa.poll_one().unwrap().is_none(), "one completion each");
    qp_error_event(&ca, &qa);
    assert_eq!(ca.query_qp(&qa).unwrap(), QpState::Error);

    // The whole 4 MiB lands: the stream ends after it.
    let t = Instant::now();
    while bb.to_vec(0, LEN).unwrap() != data {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the Write never landed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        bb.to_vec(LEN, 64).unwrap(),
        vec![0; 64],
        "the third never ran"
    );
    source.deregister().map_err(|(_, e)| e).unwrap();
    sink.deregister().map_err(|(_, e)| e).unwrap();
}

/// Figure 23, "Send Queue Work Request Errors: Zero ORD": with ORD 0 asked for at setup, a
/// Read completes in error (behind the Send posted before it) instead of waiting forever,
/// and the QP goes to Error.
#[test]
fn a_read_with_ord_zero_completes_in_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_a, ca) = endpoint(dir.path(), "a", 1);
    let (_b, cb) = endpoint(dir.path(), "b", 2);
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
    let mb = pb
        .reg_mr(&bb, 0, 4096, access::LOCAL_WRITE | access::REMOTE_READ)
        .unwrap();
    let no_ord = ConnSettings {
        ord: 0,
        ..ConnSettings::default()
    };
    connect(&ca, &qa, &cb, &qb, 7501, &no_ord);
    let sg = [Sg {
        mr: &ma,
        offset: 0,
        len: 64,
    }];
    let rsg = [Sg {
        mr: &mb,
        offset: 0,
        len: 64,
    }];
    qb.post_recv(&iwarp_verbs::RecvWr {
        wr_id: 9,
        sg_list: &rsg,
    })
    .unwrap();
    qa.post_send(&SendWr::new(1, WrOpcode::Send, &sg)).unwrap();
    let read = WrOpcode::RdmaRead {
        rkey: mb.stag(),
        remote_addr: 0,
    };
    qa.post_send(&SendWr::new(2, read, &sg)).unwrap();
    let wc = next(&cqa);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "{wc:?}");
    let wc = next(&cqa);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (2, WcOpcode::Read, WcStatus::LocalQpOperationError),
        "{wc:?}"
    );
    qp_error_event(&ca, &qa);
    assert_eq!(next(&cqb).wr_id, 9, "the Send before it arrived");
}

/// Verbs section 6.2.4 and figure 4 (the Closing table): a graceful close while a Read is
/// outstanding. Modify QP is an immediate error in Closing, so Closing -> Idle cannot drop
/// the Read; the Read completes exactly once, with its data, and only then does the QP
/// reach Idle.
#[test]
fn a_read_outstanding_at_a_graceful_close_completes_before_idle() {
    const LEN: usize = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (_a, ca) = endpoint(dir.path(), "a", 1);
    let (_b, cb) = endpoint(dir.path(), "b", 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&cqa, 8)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&cqb, 8)).unwrap();
    let (ba, bb) = (ca.alloc_buffer(LEN).unwrap(), cb.alloc_buffer(LEN).unwrap());
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    bb.write(0, &pattern).unwrap();
    let ma = pa
        .reg_mr(
            &ba,
            0,
            LEN as u64,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )
        .unwrap();
    let mb = pb
        .reg_mr(
            &bb,
            0,
            LEN as u64,
            access::LOCAL_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    let port = 7502;
    cb.listen(port, &ConnSettings::default()).unwrap();
    let remote = format!("10.{SUBNET}.0.2:{port}").parse().unwrap();
    let conn = ca.connect(&qa, remote, &ConnSettings::default()).unwrap();
    let req = cb.get_request(Duration::from_secs(20)).unwrap();
    cb.accept_blocking(&req, &qb, &ConnSettings::default(), Duration::from_secs(20))
        .unwrap();
    ca.wait_established(conn, Duration::from_secs(20)).unwrap();

    let sg = [Sg {
        mr: &ma,
        offset: 0,
        len: LEN as u32,
    }];
    let read = WrOpcode::RdmaRead {
        rkey: mb.stag(),
        remote_addr: 0,
    };
    qa.post_send(&SendWr::new(1, read, &sg)).unwrap();
    ca.disconnect(conn, false).unwrap();
    assert!(
        ca.modify_qp(&qa, QpState::Idle).is_err(),
        "Modify QP in Closing is an immediate error (figure 4)"
    );
    let wc = next(&cqa);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status, wc.byte_len as usize),
        (1, WcOpcode::Read, WcStatus::Success, LEN),
        "{wc:?}"
    );
    let mut got = vec![0u8; LEN];
    ba.read(0, &mut got).unwrap();
    assert!(got == pattern, "the Read's data arrived whole");
    let t = Instant::now();
    while ca.query_qp(&qa).unwrap() != QpState::Idle {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "A's QP never left Closing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        cqa.wait(Duration::from_millis(200)).unwrap().is_none(),
        "the Read completed once"
    );
}
