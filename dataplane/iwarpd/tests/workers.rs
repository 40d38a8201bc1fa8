//! Two nodes, each owned end to end by its own poll-mode worker thread (`worker::run_with`,
//! adaptive polling), move 64 MiB of RDMA Writes over the embedded port; the per-core
//! counters are read from the test thread while the workers run; on stop each worker shuts
//! its node down (connections aborted). The bytes placed are compared.

mod common;

use common::{segment_dir, End, A_IP, B_IP};
use iwarp_engine::{Access, RecvWr, Rnic, SendOp, SendWr, Status, WorkCompletion};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, Node};
use iwarpd::port::unix::UnixPort;
use iwarpd::worker::{self, CoreCounters, Polling};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const REGION: usize = 8 << 20;
const CHUNK: usize = 1 << 20;
const TOTAL: usize = 64 << 20;

fn polling() -> Polling {
    Polling::Adaptive {
        idle_spins: 64,
        max_sleep: Duration::from_micros(200),
    }
}

#[test]
fn two_nodes_on_worker_threads_move_64_mib() {
    let dir = segment_dir("iwarp-workers");
    let stop = Arc::new(AtomicBool::new(false));
    let a_done = Arc::new(AtomicBool::new(false));
    let ca = Arc::new(CoreCounters::new(None));
    let cb = Arc::new(CoreCounters::new(None));

    // A: the responder. Listens, posts one receive; the Send that follows the Writes tells
    // it (in-order delivery) that every Write is placed.
    // A's STag and buffer address reach B out of band, as the application's own exchange.
    let (target_tx, target_rx) = mpsc::channel::<(u32, u64)>();
    let a = {
        let (path, stop, done, counters) = (
            dir.path().to_path_buf(),
            Arc::clone(&stop),
            Arc::clone(&a_done),
            Arc::clone(&ca),
        );
        std::thread::spawn(move || {
            let port = UnixPort::open(&path, [2, 0, 0, 0, 9, 0x0a], 1500).unwrap();
            let mut a = End::new(port, A_IP);
            let mem = a.mem(REGION, Access::ALL);
            target_tx.send((mem.stag, mem.sge(0, 0).to)).unwrap();
            let note = a.mem(64, Access::ALL);
            a.rnic
                .post_recv(a.qp, RecvWr::new(1, &[note.sge(0, 64)]))
                .unwrap();
            a.conn = a.node.listen(7174, a.qp, Settings::default()).unwrap();
            let cq = a.cq;
            let mut wcs = vec![WorkCompletion::default(); 16];
            worker::run_with(
                &mut a.node,
                &mut a.rnic,
                polling(),
                &counters,
                &stop,
                |_: &mut Node<UnixPort>, rnic: &mut Rnic| {
                    let n = rnic.poll_cq(cq, &mut wcs).unwrap_or(0);
                    for w in &wcs[..n] {
                        assert_eq!(w.status, Status::Success);
                        done.store(true, Ordering::Release);
                    }
                    n > 0
                },
            );
            mem.bytes(0, REGION)
        })
    };

    // B: the initiator. Connects, then keeps four 1 MiB Writes in flight until 64 MiB are
    // written, then sends the note.
    let b = {
        let (path, stop, counters) = (dir.path().to_path_buf(), Arc::clone(&stop), Arc::clone(&cb));
        std::thread::spawn(move || {
            let port = UnixPort::open(&path, [2, 0, 0, 0, 9, 0x0b], 1500).unwrap();
            let mut b = End::new(port, B_IP);
            let mem = b.mem(REGION, Access::ALL);
            mem.fill(7);
            let note = b.mem(64, Access::ALL);
            let (stag, to) = target_rx.recv().unwrap();
            b.conn = b
                .node
                .connect(A_IP, 7174, 40000, b.qp, Settings::default())
                .unwrap();
            let (qp, cq, conn) = (b.qp, b.cq, b.conn);
            let (mut sent, mut done, mut noted) = (0usize, 0usize, false);
            let mut wcs = vec![WorkCompletion::default(); 16];
            worker::run_with(
                &mut b.node,
                &mut b.rnic,
                polling(),
                &counters,
                &stop,
                |node: &mut Node<UnixPort>, rnic: &mut Rnic| {
                    if node.state(conn) != Some(&ConnState::Rts) {
                        return false;
                    }
                    let mut worked = false;
                    while sent < TOTAL / CHUNK && sent - done < 4 {
                        let off = (sent * CHUNK) % REGION;
                        let op = SendOp::Write {
                            remote_stag: stag,
                            remote_to: to + off as u64,
                        };
                        rnic.post_send(qp, SendWr::new(sent as u64, op, &[mem.sge(off, CHUNK)]))
                            .unwrap();
                        sent += 1;
                        worked = true;
                    }
                    let n = rnic.poll_cq(cq, &mut wcs).unwrap_or(0);
                    for w in &wcs[..n] {
                        assert_eq!(w.status, Status::Success);
                        done += 1;
                    }
                    if done == TOTAL / CHUNK && !noted {
                        let op = SendOp::Send {
                            solicited: false,
                            invalidate: None,
                        };
                        rnic.post_send(qp, SendWr::new(u64::MAX, op, &[note.sge(0, 64)]))
                            .unwrap();
                        noted = true;
                    }
                    worked || n > 0
                },
            );
            mem.bytes(0, REGION)
        })
    };

    // Watch the counters while the workers run, until A has every byte.
    let start = Instant::now();
    let mut seen_moving = false;
    while !a_done.load(Ordering::Acquire) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "transfer stalled: a {} / b {}",
            ca.line(),
            cb.line()
        );
        assert!(!a.is_finished() && !b.is_finished(), "a worker ended early");
        let rx = ca.stream_bytes_rx.load(Ordering::Relaxed);
        seen_moving |= rx > 0 && rx < TOTAL as u64;
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = start.elapsed();
    assert!(
        ca.stream_bytes_rx.load(Ordering::Relaxed) >= TOTAL as u64,
        "{}",
        ca.line()
    );
    assert!(
        cb.fpdus_tx.load(Ordering::Relaxed) >= (TOTAL / 1460) as u64,
        "{}",
        cb.line()
    );
    assert_eq!(ca.connections.load(Ordering::Relaxed), 1, "{}", ca.line());
    stop.store(true, Ordering::Relaxed);
    let a_bytes = a.join().unwrap();
    let b_bytes = b.join().unwrap();
    assert!(
        a_bytes == b_bytes,
        "the bytes placed differ from the bytes written"
    );
    // Shutdown aborted the connections (their own shutdown: not counted as lost).
    assert_eq!(ca.connections.load(Ordering::Relaxed), 0);
    assert_eq!(cb.connections.load(Ordering::Relaxed), 0);
    println!(
        "64 MiB on two worker threads in {elapsed:?} (counters seen moving mid-transfer: {seen_moving})\n a: {}\n b: {}",
        ca.line(),
        cb.line()
    );
}
