//! Descriptors per QP: an application with many connected QPs, and the daemons serving it,
//! hold no file descriptor per QP, so ten thousand QPs fit under a process's descriptor
//! limit. The real stack (two endpoints, `iwarpd` + `iwarp-control` each, on the embedded
//! Unix-socket Ethernet), this test as both applications.

use iwarp_testkit::Endpoint;
use iwarp_verbs::{
    CompletionQueue, ConnSettings, Context, ProtectionDomain, QpInitAttr, QueuePair,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The connections opened after the first.
const N: usize = 48;
/// What a process may gain over those `N` connections whatever their number: a descriptor
/// made once per context or per peer, or one a moment's work holds open.
const SLACK: usize = 4;

fn endpoint(dir: &Path, name: &str, n: u8) -> Endpoint {
    Endpoint::start(dir, name, n, 61, &[])
}

/// Open descriptors of process `pid` ("self" for this one).
fn fds(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/<pid>/fd")
        .count()
}

struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    cq: Arc<CompletionQueue>,
    qps: Vec<QueuePair>,
}

fn side(runtime: &Path) -> Side {
    let ctx = Context::open(runtime).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    Side {
        ctx,
        pd,
        cq,
        qps: Vec::new(),
    }
}

/// Creates a QP on each side (each with its own CQ as well as the shared one, so CQ rings
/// count too) and connects them: a to b's `port`.
fn connect_one(a: &mut Side, b: &mut Side, port: u16) -> Vec<Arc<CompletionQueue>> {
    let mut cqs = Vec::new();
    for s in [&mut *a, &mut *b] {
        let own = s.ctx.create_cq(16).unwrap();
        let mut attr = QpInitAttr::new(&s.cq, 8);
        attr.recv_cq = own.clone();
        s.qps.push(s.pd.create_qp(&attr).unwrap());
        cqs.push(own);
    }
    let settings = ConnSettings::default();
    let remote = format!("10.61.0.2:{port}").parse().unwrap();
    let conn = a
        .ctx
        .connect(a.qps.last().unwrap(), remote, &settings)
        .unwrap();
    let req = b.ctx.get_request(Duration::from_secs(20)).unwrap();
    b.ctx
        .accept_blocking(
            &req,
            b.qps.last().unwrap(),
            &settings,
            Duration::from_secs(20),
        )
        .unwrap();
    a.ctx
        .wait_established(conn, Duration::from_secs(20))
        .unwrap();
    cqs
}

#[test]
fn connected_qps_hold_no_descriptor_each() {
    let dir = tempfile::tempdir().unwrap();
    let mut ea = endpoint(dir.path(), "a", 1);
    let mut eb = endpoint(dir.path(), "b", 2);
    let (mut a, mut b) = (side(&ea.runtime), side(&eb.runtime));
    const PORT: u16 = 7700;
    b.ctx.listen(PORT, &ConnSettings::default()).unwrap();
    // The first connection makes what each process makes once (a doorbell, a pidfd, ...).
    let mut cqs = connect_one(&mut a, &mut b, PORT);
    let pids = [
        "self".to_string(),
        ea.daemon.0.id().to_string(),
        eb.daemon.0.id().to_string(),
        ea.control.0.id().to_string(),
        eb.control.0.id().to_string(),
    ];
    let before: Vec<usize> = pids.iter().map(|p| fds(p)).collect();
    for _ in 0..N {
        cqs.extend(connect_one(&mut a, &mut b, PORT));
    }
    let after: Vec<usize> = pids.iter().map(|p| fds(p)).collect();
    // A descriptor kept per ring would add 3 per connection to each iwarpd (SQ, RQ and
    // the QP's own CQ) and 6 to this process, which holds both sides.
    for ((who, b), a) in [
        "application",
        "iwarpd a",
        "iwarpd b",
        "control a",
        "control b",
    ]
    .iter()
    .zip(&before)
    .zip(&after)
    {
        assert!(
            *a <= b + SLACK,
            "{who}: {b} descriptors with one connection, {a} after {N} more"
        );
    }
    // Every ring still works without its descriptor: the QPs are all in RTS and their
    // daemons and controls still run.
    assert_eq!(a.qps.len(), N + 1);
    for s in [&a, &b] {
        for qp in &s.qps {
            assert_eq!(s.ctx.query_qp(qp).unwrap(), iwarp_verbs::QpState::Rts);
        }
    }
    for e in [&mut ea, &mut eb] {
        assert!(matches!(e.daemon.0.try_wait(), Ok(None)));
        assert!(matches!(e.control.0.try_wait(), Ok(None)));
    }
    drop(cqs);
}
