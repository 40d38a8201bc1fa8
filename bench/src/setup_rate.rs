//! `--setup-rate N`: connections per second through the connection manager. One endpoint
//! opens `N` connections to the other (connect, the request at the listener, accept, both
//! sides Established) with every QP created beforehand, and the kernel's TCP baseline does
//! `N` connects on loopback in the same run. With `--daemon-workers 2` the connections are
//! spread over a context on each worker of each endpoint. The QPs' creation beforehand and
//! their destruction afterwards (one at a time, each resetting its connection) are timed too.

use crate::cli::Plan;
use crate::daemons::Endpoints;
use crate::error::{BenchError, Result};
use iwarp_verbs::{
    CompletionQueue, ConnSettings, Context, Event, ProtectionDomain, QpInitAttr, QueuePair,
};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first TCP port the listening side uses (one per context).
const PORT: u16 = 19515;
/// Connects in flight per listening port: as many as the connection manager's listener takes
/// at once. Each setup lasts at least the initiator's RTS hold (`mpa.rts_delay_ms`), so the
/// connects in flight, not the CPU, bound a run that keeps fewer.
const IN_FLIGHT: usize = iwarp_abi::command::LISTEN_BACKLOG as usize;
/// The longest the whole run may take: this, and [`DEADLINE_PER_CONNECTION`] more for each
/// connection.
const DEADLINE: Duration = Duration::from_secs(120);
const DEADLINE_PER_CONNECTION: Duration = Duration::from_millis(40);

/// What one run measured.
#[derive(Debug, Clone)]
pub struct SetupRate {
    pub connections: usize,
    pub workers: usize,
    /// Seconds from the first connect to the last Established on both sides.
    pub seconds: f64,
    /// Seconds creating the QPs of both sides, before.
    pub qp_seconds: f64,
    /// Seconds destroying the QPs of both sides (their connections with them), after.
    pub destroy_seconds: f64,
    /// Seconds for the kernel's `N` connects and accepts on loopback.
    pub tcp_seconds: f64,
    /// CPU seconds both iwarpd, both iwarp-control and this process spent while the
    /// connections were set up (`None` for daemons not spawned here).
    pub cpu: Option<[f64; 3]>,
    /// What holding the connections afterwards showed (`--hold`).
    pub held: Option<Held>,
    /// This process's resident memory (KiB) before the contexts were opened and once
    /// every QP of both sides was created: its rings, CQs and library state.
    pub app_rss_kib: (u64, u64),
    /// Setups that failed and were tried again on a fresh QP (the rate counts only the
    /// connections made).
    pub retried: Retried,
}

/// Connections either side heard end or fail after they were established. A lost
/// connection shows as its Disconnected, its QP's error, or both, on one side or both: each
/// is kept per side and kind, and the largest count is the connections.
#[derive(Debug, Clone, Default)]
struct Losses {
    seen: std::collections::HashSet<(char, char, u32)>,
    /// QPs whose setup failed (and was tried again on another QP).
    forgiven: std::collections::HashSet<(char, char, u32)>,
    /// The first, as the application heard it.
    first: Option<String>,
}

impl Losses {
    /// Notes `e` if it ends a connection or fails a QP; `when` says in which phase and how
    /// long into it.
    fn note(&mut self, side: char, e: &Event, when: impl FnOnce() -> String) {
        let key = match e {
            Event::Disconnected { conn, .. } => Some(('c', *conn)),
            Event::QpError { qp } => Some(('q', qp.0)),
            Event::QpTerminated(t) => Some(('q', t.qp.0)),
            _ => None,
        };
        if let Some((kind, id)) = key {
            if self.seen.insert((side, kind, id)) {
                self.first
                    .get_or_insert_with(|| format!("{} at {side}: {e:?}", when()));
            }
        }
    }

    /// An application's event stream failed.
    fn broken(&mut self, side: char, e: impl std::fmt::Display, when: impl FnOnce() -> String) {
        self.first
            .get_or_insert_with(|| format!("{} at {side}: {e}", when()));
        self.seen.insert((side, 'x', 0));
    }

    /// QP `qp` of `side` failed to set up: its error is not a connection lost.
    fn forgive(&mut self, side: char, qp: u32) {
        self.forgiven.insert((side, 'q', qp));
    }

    fn count(&self) -> usize {
        let count = |side: char, kind: char| {
            self.seen
                .iter()
                .filter(|&&(s, k, _)| s == side && k == kind)
                .filter(|key| !self.forgiven.contains(key))
                .count()
        };
        ['a', 'b']
            .into_iter()
            .flat_map(|s| ['c', 'q', 'x'].map(|k| count(s, k)))
            .max()
            .unwrap_or(0)
    }
}

/// The connections held open after setup.
#[derive(Debug, Clone)]
pub struct Held {
    pub seconds: f64,
    /// Connections that ended or whose QP failed while set up or held (either side's
    /// event).
    pub lost: usize,
    /// Of those, the ones lost before the last was established.
    pub lost_in_setup: usize,
    /// The first such event, as the application heard it.
    pub first_loss: Option<String>,
    /// Resident memory of each iwarpd (KiB): with the QPs created, once all were
    /// established, and at the end of the hold.
    pub rss_kib: Vec<(u64, u64, u64)>,
}

impl SetupRate {
    pub fn describe(&self) -> String {
        let n = self.connections as f64;
        format!(
            "setup rate, {} connections, {} worker(s) per daemon\n  \
             iwarp connection manager: {:>9.0} connections/s ({:.3} s)\n  \
             QPs created beforehand:   {:>9.0} QPs/s, both sides ({:.3} s)\n  \
             QPs destroyed afterwards: {:>9.0} QPs/s, both sides ({:.3} s)\n  \
             kernel TCP on loopback:   {:>9.0} connections/s ({:.3} s)\n",
            self.connections,
            self.workers,
            n / self.seconds,
            self.seconds,
            2.0 * n / self.qp_seconds,
            self.qp_seconds,
            2.0 * n / self.destroy_seconds,
            self.destroy_seconds,
            n / self.tcp_seconds,
            self.tcp_seconds,
        ) + &format!(
            "  setups failed and tried again: {}{}\n",
            self.retried.count,
            self.retried
                .first
                .as_ref()
                .map_or(String::new(), |e| format!(" (first: {e})")),
        ) + &format!(
            "  application: RSS {:.1} MiB with both sides' QPs: {:.1} KiB per QP\n",
            self.app_rss_kib.1 as f64 / 1024.0,
            (self.app_rss_kib.1 as f64 - self.app_rss_kib.0 as f64) / (2.0 * n.max(1.0)),
        ) + &self.held.as_ref().map_or(String::new(), |h| {
            let n = n.max(1.0);
            let mut s = format!(
                "  held {:.0} s: {} of {} connections lost, {} of them during setup{}\n",
                h.seconds,
                h.lost,
                self.connections,
                h.lost_in_setup,
                h.first_loss
                    .as_ref()
                    .map_or(String::new(), |e| format!(" (first: {e})")),
            );
            for (i, (qps, up, end)) in h.rss_kib.iter().enumerate() {
                s += &format!(
                    "  iwarpd {}: RSS {:.1} MiB with the QPs, {:.1} MiB connected, {:.1} MiB at \
                     the end: {:.1} KiB per connection\n",
                    ['a', 'b'].get(i).unwrap_or(&'?'),
                    *qps as f64 / 1024.0,
                    *up as f64 / 1024.0,
                    *end as f64 / 1024.0,
                    (*end as f64 - *qps as f64) / n,
                );
            }
            s
        }) + &self.cpu.map_or(String::new(), |[iwarpd, control, app]| {
            format!(
                "  CPU per connection:       {:>9.0} µs (iwarpd {:.0}, iwarp-control {:.0}, \
                 application {:.0}; polling included)\n",
                1e6 * (iwarpd + control + app) / n,
                1e6 * iwarpd / n,
                1e6 * control / n,
                1e6 * app / n,
            )
        })
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::transport("verbs", format!("setup rate: {what}: {e}"))
}

/// One context's QPs (they share a PD and a CQ).
struct Side {
    ctx: Context,
    qps: Vec<QueuePair>,
    pd: ProtectionDomain,
    cq: Arc<CompletionQueue>,
}

impl Side {
    fn new_qp(&self) -> Result<QueuePair> {
        self.pd
            .create_qp(&QpInitAttr::new(&self.cq, 4))
            .map_err(|e| err("create QP", e))
    }
}

fn side(ctx: Context, n: usize) -> Result<Side> {
    let pd = ctx.alloc_pd().map_err(|e| err("alloc PD", e))?;
    let cq = ctx
        .create_cq((4 * n as u32).max(16))
        .map_err(|e| err("create CQ", e))?;
    let mut s = Side {
        ctx,
        qps: Vec::with_capacity(n),
        pd,
        cq,
    };
    for _ in 0..n {
        let qp = s.new_qp()?;
        s.qps.push(qp);
    }
    Ok(s)
}

/// Setups that failed and were tried again with a fresh QP.
#[derive(Debug, Clone, Default)]
pub struct Retried {
    pub count: usize,
    /// The first failure, as the application heard it.
    pub first: Option<String>,
}

/// Runs the measurement on the endpoints `plan` names.
pub fn run(plan: &Plan, connections: usize, hold: Option<Duration>) -> Result<SetupRate> {
    let workers = plan.endpoint.daemon_workers.max(1);
    // Spawned daemons' limits are raised to hold every connection.
    let mut ep = plan.endpoint.clone();
    ep.qps = ep.qps.max(connections);
    let endpoints = Endpoints::start(&ep)?;
    let result = measure(&endpoints, connections, workers, hold);
    endpoints.stop()?;
    let m = result?;
    let tcp_seconds = kernel_tcp(connections)?;
    Ok(SetupRate {
        connections,
        workers,
        seconds: m.seconds,
        qp_seconds: m.qp_seconds,
        destroy_seconds: m.destroy_seconds,
        tcp_seconds,
        cpu: m.cpu,
        held: m.held,
        app_rss_kib: m.app_rss_kib,
        retried: m.retried,
    })
}

/// CPU seconds (user and system, every thread) process `pid` has used, from `/proc`; `None`
/// where it cannot be read.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces:
    // utime and stime are the 14th and 15th of the whole line, in USER_HZ (100 on Linux).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// CPU seconds of the spawned iwarpd together, of the iwarp-control together, and of this
/// process.
fn cpu_now(endpoints: &Endpoints) -> Option<[f64; 3]> {
    let iwarpd = endpoints.iwarpd_pids();
    if iwarpd.is_empty() {
        return None;
    }
    let sum = |pids: &[u32]| -> Option<f64> {
        pids.iter()
            .map(|p| cpu_seconds(&p.to_string()))
            .sum::<Option<f64>>()
    };
    let all = sum(&endpoints.pids())?;
    let d = sum(&iwarpd)?;
    Some([d, all - d, cpu_seconds("self")?])
}

/// Resident memory of process `pid` in KiB (`VmRSS`), 0 where it cannot be read.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// What [`measure`] found through the endpoints (see the fields of [`SetupRate`]).
struct Measured {
    seconds: f64,
    qp_seconds: f64,
    destroy_seconds: f64,
    cpu: Option<[f64; 3]>,
    held: Option<Held>,
    app_rss_kib: (u64, u64),
    retried: Retried,
}

fn measure(
    endpoints: &Endpoints,
    n: usize,
    workers: usize,
    hold: Option<Duration>,
) -> Result<Measured> {
    let [dir_a, dir_b] = endpoints.runtime_dirs();
    let app_before = rss_kib(std::process::id());
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
    let app_qps = rss_kib(std::process::id());
    let settings = ConnSettings::default();
    for (k, s) in b.iter().enumerate() {
        s.ctx
            .listen(PORT + k as u16, &settings)
            .map_err(|e| err("listen", e))?;
    }
    let b_ip = endpoints.b.ip;
    let rss_qps: Vec<u64> = endpoints.iwarpd_pids().into_iter().map(rss_kib).collect();
    let cpu_before = cpu_now(endpoints);
    let start = Instant::now();
    let mut next_qp = vec![0usize; workers];
    let mut up_b = 0;
    // At a, per context: the QPs still to connect, the connects in flight (connection id to
    // QP index).
    let mut todo: Vec<VecDeque<usize>> = (0..workers).map(|k| (0..per(k)).collect()).collect();
    let mut in_flight: Vec<HashMap<u32, usize>> = vec![HashMap::new(); workers];
    let mut up_a = vec![0usize; workers];
    let mut losses = Losses::default();
    let mut retried = Retried::default();
    let in_setup = || format!("{:.1} s into setup", start.elapsed().as_secs_f64());
    // A request whose connection is gone by the time it is accepted (the initiator gave up
    // under load) is no connection: the QP waits for the next request.
    let accept = |b: &mut [Side],
                  up_b: &mut usize,
                  next_qp: &mut [usize],
                  losses: &mut Losses,
                  retried: &mut Retried|
     -> Result<bool> {
        let mut any = false;
        for (k, s) in b.iter_mut().enumerate() {
            while let Some(e) = s.ctx.poll_event().map_err(|e| err("event at b", e))? {
                any = true;
                match e {
                    Event::ConnectRequest(r) => {
                        // The initiator's retries bring more requests than it has QPs.
                        if next_qp[k] == s.qps.len() {
                            let qp = s.new_qp()?;
                            s.qps.push(qp);
                        }
                        match s.ctx.accept(&r, &s.qps[next_qp[k]], &settings) {
                            Ok(()) => next_qp[k] += 1,
                            Err(e) => {
                                retried.count += 1;
                                retried.first.get_or_insert_with(|| {
                                    format!("{} at b: accept: {e}", in_setup())
                                });
                            }
                        }
                    }
                    Event::Established(_) => *up_b += 1,
                    e => losses.note('b', &e, in_setup),
                }
            }
        }
        Ok(any)
    };
    loop {
        let mut busy = false;
        for (k, s) in a.iter().enumerate() {
            let remote = SocketAddr::V4(SocketAddrV4::new(b_ip, PORT + k as u16));
            while in_flight[k].len() < IN_FLIGHT {
                let Some(i) = todo[k].pop_front() else {
                    break;
                };
                let conn = s
                    .ctx
                    .connect(&s.qps[i], remote, &settings)
                    .map_err(|e| err("connect", e))?;
                in_flight[k].insert(conn, i);
                busy = true;
            }
        }
        busy |= accept(&mut b, &mut up_b, &mut next_qp, &mut losses, &mut retried)?;
        for (k, s) in a.iter_mut().enumerate() {
            while let Some(e) = s.ctx.poll_event().map_err(|e| err("event at a", e))? {
                busy = true;
                let (conn, why) = match e {
                    Event::Established(est) => {
                        if in_flight[k].remove(&est.conn).is_some() {
                            up_a[k] += 1;
                        }
                        continue;
                    }
                    Event::ConnectFailed { conn, reason, .. } => (conn, reason),
                    Event::Rejected { conn, private_data } => (
                        conn,
                        format!("rejected: {}", String::from_utf8_lossy(&private_data)),
                    ),
                    e => {
                        losses.note('a', &e, in_setup);
                        continue;
                    }
                };
                // A failed setup: its QP is in Error, so a fresh one tries again. Its QP's
                // error event is no lost connection.
                let Some(i) = in_flight[k].remove(&conn) else {
                    continue;
                };
                retried.count += 1;
                retried
                    .first
                    .get_or_insert_with(|| format!("{} at a: {why}", in_setup()));
                losses.forgive('a', s.qps[i].qp_num().0);
                s.qps[i] = s.new_qp()?;
                todo[k].push_back(i);
            }
        }
        let done_a: usize = up_a.iter().sum();
        if done_a == n && up_b >= n {
            break;
        }
        if retried.count > n {
            return Err(err(
                "giving up",
                format!(
                    "{} setups failed ({done_a} of {n} established at a), the first: {}",
                    retried.count,
                    retried.first.as_deref().unwrap_or("?")
                ),
            ));
        }
        if start.elapsed() > DEADLINE + DEADLINE_PER_CONNECTION * n as u32 {
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
    let cpu = cpu_before
        .zip(cpu_now(endpoints))
        .map(|(x, y)| [y[0] - x[0], y[1] - x[1], y[2] - x[2]]);
    let held = hold.map(|d| hold_all(endpoints, &a, &b, d, rss_qps, losses));
    let t = Instant::now();
    drop((a, b));
    let destroy_seconds = t.elapsed().as_secs_f64();
    Ok(Measured {
        seconds,
        qp_seconds,
        destroy_seconds,
        cpu,
        held,
        app_rss_kib: (app_before, app_qps),
        retried,
    })
}

/// Keeps every connection open for `d`, counting those either side hears end or fail, on
/// top of `losses`, those lost during setup.
fn hold_all(
    endpoints: &Endpoints,
    a: &[Side],
    b: &[Side],
    d: Duration,
    rss_qps: Vec<u64>,
    mut losses: Losses,
) -> Held {
    let pids = endpoints.iwarpd_pids();
    let rss_up: Vec<u64> = pids.iter().map(|&p| rss_kib(p)).collect();
    let lost_in_setup = losses.count();
    let start = Instant::now();
    let held = || format!("after {:.1} s held", start.elapsed().as_secs_f64());
    while start.elapsed() < d {
        for (side, s) in a.iter().map(|s| ('a', s)).chain(b.iter().map(|s| ('b', s))) {
            match s.ctx.next_event(Duration::from_millis(100)) {
                Ok(Some(e)) => losses.note(side, &e, held),
                Ok(None) => {}
                Err(e) => losses.broken(side, e, held),
            }
        }
    }
    let rss_end: Vec<u64> = pids.iter().map(|&p| rss_kib(p)).collect();
    Held {
        seconds: start.elapsed().as_secs_f64(),
        lost: losses.count(),
        lost_in_setup,
        first_loss: losses.first,
        rss_kib: rss_qps
            .into_iter()
            .zip(rss_up)
            .zip(rss_end)
            .map(|((q, u), e)| (q, u, e))
            .collect(),
    }
}

/// `n` kernel TCP connects on loopback, each accepted by another process (this executable
/// with `--tcp-accept-peer`); all stay open until every one is accepted. The accepting side
/// is a process of its own so that each side holds `n` descriptors, not one process `2n`:
/// 10,000 connections would otherwise need more than this container's hard limit of 20,000.
fn kernel_tcp(n: usize) -> Result<f64> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let io = |what: &str, e: std::io::Error| BenchError::io(format!("tcp baseline: {what}"), e);
    let exe = std::env::current_exe().map_err(|e| io("finding this executable", e))?;
    let mut child = Command::new(exe)
        .arg("--tcp-accept-peer")
        .arg(n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| io("starting the accepting process", e))?;
    let result = (|| {
        let out = child
            .stdout
            .take()
            .ok_or_else(|| err("tcp baseline", "no stdout"))?;
        let mut lines = BufReader::new(out).lines();
        let mut line = || -> Result<String> {
            lines
                .next()
                .ok_or_else(|| err("tcp baseline", "the accepting process ended early"))?
                .map_err(|e| io("reading the accepting process", e))
        };
        let port: u16 = line()?
            .parse()
            .map_err(|e| err("tcp baseline: the accepting process's port", e))?;
        let addr = SocketAddr::V4(SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port));
        let start = Instant::now();
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            clients.push(TcpStream::connect(addr).map_err(|e| io("connect", e))?);
        }
        let accepted = line()?;
        let seconds = start.elapsed().as_secs_f64();
        if accepted != format!("accepted {n}") {
            return Err(err(
                "tcp baseline",
                format!("the accepting process said {accepted:?}"),
            ));
        }
        drop(clients);
        Ok(seconds)
    })();
    // Its stdin closing is its signal to close the connections and exit.
    drop(child.stdin.take());
    let status = child
        .wait()
        .map_err(|e| io("waiting for the accepting process", e))?;
    let seconds = result?;
    if !status.success() {
        return Err(err(
            "tcp baseline",
            format!("the accepting process: {status}"),
        ));
    }
    Ok(seconds)
}

/// The accepting side of the kernel TCP baseline (`--tcp-accept-peer N`): prints the port it
/// listens on, accepts `n` connections, prints `accepted N`, and holds them until its stdin
/// closes.
pub fn tcp_accept_peer(n: usize) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", listener.local_addr()?.port())?;
    out.flush()?;
    let accepted = (0..n)
        .map(|_| listener.accept().map(|(s, _)| s))
        .collect::<std::io::Result<Vec<TcpStream>>>()?;
    writeln!(out, "accepted {}", accepted.len())?;
    out.flush()?;
    let mut rest = Vec::new();
    std::io::stdin().lock().read_to_end(&mut rest)?;
    drop(accepted);
    Ok(())
}
