//! `--setup-rate N`: connections per second through the connection manager. One endpoint
//! opens `N` connections to the other (connect, the request at the listener, accept, both
//! sides Established) with every QP created beforehand, and the kernel's TCP baseline does
//! `N` connects on loopback in the same run. With `--daemon-workers 2` the connections are
//! spread over a context on each worker of each endpoint.

use crate::cli::Plan;
use crate::daemons::Endpoints;
use crate::error::{BenchError, Result};
use iwarp_verbs::{ConnSettings, Context, Event, QpInitAttr, QueuePair};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The first TCP port the listening side uses (one per context).
const PORT: u16 = 19515;
/// Connects in flight per listening port: the daemon's listener answers a SYN only while one
/// of its sockets is free for the handshake (16 per port), and a SYN it cannot take is
/// refused.
const IN_FLIGHT: usize = 16;
/// The longest the whole run may take.
const DEADLINE: Duration = Duration::from_secs(120);

/// What one run measured.
#[derive(Debug, Clone)]
pub struct SetupRate {
    pub connections: usize,
    pub workers: usize,
    /// Seconds from the first connect to the last Established on both sides.
    pub seconds: f64,
    /// Seconds creating the QPs of both sides, before.
    pub qp_seconds: f64,
    /// Seconds for the kernel's `N` connects and accepts on loopback.
    pub tcp_seconds: f64,
}

impl SetupRate {
    pub fn describe(&self) -> String {
        let n = self.connections as f64;
        format!(
            "setup rate, {} connections, {} worker(s) per daemon\n  \
             iwarp connection manager: {:>9.0} connections/s ({:.3} s)\n  \
             QPs created beforehand:   {:>9.0} QPs/s, both sides ({:.3} s)\n  \
             kernel TCP on loopback:   {:>9.0} connections/s ({:.3} s)\n",
            self.connections,
            self.workers,
            n / self.seconds,
            self.seconds,
            2.0 * n / self.qp_seconds,
            self.qp_seconds,
            n / self.tcp_seconds,
            self.tcp_seconds,
        )
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::transport("verbs", format!("setup rate: {what}: {e}"))
}

/// One context's QPs (they share a PD and a CQ).
struct Side {
    ctx: Context,
    qps: Vec<QueuePair>,
    _keep: Box<dyn std::any::Any>,
}

fn side(ctx: Context, n: usize) -> Result<Side> {
    let pd = ctx.alloc_pd().map_err(|e| err("alloc PD", e))?;
    let cq = ctx
        .create_cq((4 * n as u32).max(16))
        .map_err(|e| err("create CQ", e))?;
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        let attr = QpInitAttr::new(&cq, 4);
        qps.push(pd.create_qp(&attr).map_err(|e| err("create QP", e))?);
    }
    Ok(Side {
        ctx,
        qps,
        _keep: Box::new((pd, cq)),
    })
}

/// Runs the measurement on the endpoints `plan` names.
pub fn run(plan: &Plan, connections: usize) -> Result<SetupRate> {
    let workers = plan.endpoint.daemon_workers.max(1);
    let endpoints = Endpoints::start(&plan.endpoint)?;
    let result = measure(&endpoints, connections, workers);
    endpoints.stop()?;
    let (seconds, qp_seconds) = result?;
    let tcp_seconds = kernel_tcp(connections)?;
    Ok(SetupRate {
        connections,
        workers,
        seconds,
        qp_seconds,
        tcp_seconds,
    })
}

fn measure(endpoints: &Endpoints, n: usize, workers: usize) -> Result<(f64, f64)> {
    let [dir_a, dir_b] = endpoints.runtime_dirs();
    let open = |dir: &std::path::Path| -> Result<Vec<Context>> {
        // Control places each new context on the worker with the fewest applications.
        (0..workers)
            .map(|_| Context::open(dir).map_err(|e| err("open endpoint", e)))
            .collect()
    };
    let (ctx_a, ctx_b) = (open(dir_a)?, open(dir_b)?);
    let per = |k: usize| n / workers + usize::from(k < n % workers);
    let t = Instant::now();
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (k, (ca, cb)) in ctx_a.into_iter().zip(ctx_b).enumerate() {
        a.push(side(ca, per(k))?);
        b.push(side(cb, per(k))?);
    }
    let qp_seconds = t.elapsed().as_secs_f64();
    let settings = ConnSettings::default();
    for (k, s) in b.iter().enumerate() {
        s.ctx
            .listen(PORT + k as u16, &settings)
            .map_err(|e| err("listen", e))?;
    }
    let b_ip = endpoints.b.ip;
    let start = Instant::now();
    let mut next_qp = vec![0usize; workers];
    let mut up_b = 0;
    let mut started = vec![0usize; workers];
    let mut up_a = vec![0usize; workers];
    let accept = |b: &mut [Side], up_b: &mut usize, next_qp: &mut [usize]| -> Result<bool> {
        let mut any = false;
        for (k, s) in b.iter_mut().enumerate() {
            while let Some(e) = s.ctx.poll_event().map_err(|e| err("event at b", e))? {
                any = true;
                match e {
                    Event::ConnectRequest(r) => {
                        let qp = s
                            .qps
                            .get(next_qp[k])
                            .ok_or_else(|| err("accept", "more requests than QPs"))?;
                        next_qp[k] += 1;
                        s.ctx
                            .accept(&r, qp, &settings)
                            .map_err(|e| err("accept", e))?;
                    }
                    Event::Established(_) => *up_b += 1,
                    Event::ConnectFailed { reason, .. } => return Err(err("at b", reason)),
                    _ => {}
                }
            }
        }
        Ok(any)
    };
    let collect = |a: &[Side], up_a: &mut [usize]| -> Result<bool> {
        let mut any = false;
        for (k, s) in a.iter().enumerate() {
            while let Some(e) = s.ctx.poll_event().map_err(|e| err("event at a", e))? {
                any = true;
                match e {
                    Event::Established(_) => up_a[k] += 1,
                    Event::ConnectFailed { reason, .. } => return Err(err("at a", reason)),
                    Event::Rejected { private_data, .. } => {
                        return Err(err(
                            "at a",
                            format!("rejected: {}", String::from_utf8_lossy(&private_data)),
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(any)
    };
    // Connects go out as fast as control takes them, up to IN_FLIGHT at a time per
    // listening port, interleaved with the listener's accepts (as a server thread would
    // run beside the client).
    loop {
        let mut busy = false;
        for (k, s) in a.iter().enumerate() {
            let remote = SocketAddr::V4(SocketAddrV4::new(b_ip, PORT + k as u16));
            while started[k] < per(k) && started[k] - up_a[k] < IN_FLIGHT {
                s.ctx
                    .connect(&s.qps[started[k]], remote, &settings)
                    .map_err(|e| err("connect", e))?;
                started[k] += 1;
                busy = true;
            }
        }
        busy |= accept(&mut b, &mut up_b, &mut next_qp)?;
        busy |= collect(&a, &mut up_a)?;
        let done_a: usize = up_a.iter().sum();
        if done_a == n && up_b == n {
            break;
        }
        if start.elapsed() > DEADLINE {
            return Err(err(
                "timed out",
                format!("{done_a} of {n} established at a, {up_b} at b"),
            ));
        }
        if !busy {
            std::thread::yield_now();
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    drop((a, b));
    Ok((seconds, qp_seconds))
}

/// `n` kernel TCP connects on loopback, each accepted by a thread beside; all stay open
/// until every one is accepted.
fn kernel_tcp(n: usize) -> Result<f64> {
    let io = |what: &str, e: std::io::Error| BenchError::io(format!("tcp baseline: {what}"), e);
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    let addr = listener.local_addr().map_err(|e| io("address", e))?;
    let start = Instant::now();
    let server = std::thread::spawn(move || -> std::io::Result<Vec<TcpStream>> {
        (0..n).map(|_| listener.accept().map(|(s, _)| s)).collect()
    });
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(TcpStream::connect(addr).map_err(|e| io("connect", e))?);
    }
    let accepted = server
        .join()
        .map_err(|_| err("tcp baseline", "the accepting thread panicked"))?
        .map_err(|e| io("accept", e))?;
    let seconds = start.elapsed().as_secs_f64();
    drop((clients, accepted));
    Ok(seconds)
}
