//! Scale measurements built from the harness's own runs: a QP-count sweep (`--qp-sweep`:
//! bandwidth mode once per count, each on fresh endpoints, with the kernel TCP baseline on
//! as many sockets) and many applications (`--apps`: one pair of endpoints, then that many
//! `iwarp-bench` processes at once, each streaming on a QP of its own; then as many
//! processes each on a TCP connection of its own).

use crate::bench;
use crate::cli::{Args, BaselineArg, OpArg, Plan};
use crate::daemons::Endpoints;
use crate::error::{BenchError, Result};
use crate::workload::Mode;
use clap::ValueEnum;
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The port of the first application's listener in an `--apps` run; each takes the next.
const APPS_PORT: u16 = 20_000;

/// One line of a sweep: a transport at a QP count.
struct Row {
    qps: usize,
    what: String,
    mmsg_per_s: f64,
    gbit_per_s: f64,
}

fn err(m: impl std::fmt::Display) -> BenchError {
    BenchError::transport("scale", m)
}

/// `args` for one run of the sweep: bandwidth mode, `qps` connections, no output of its own.
fn run_args(args: &Args, qps: usize) -> Args {
    let mut a = args.clone();
    a.qp_sweep = None;
    a.apps = None;
    a.qps = qps;
    a.mode = vec![Mode::Bandwidth];
    a.quiet = true;
    a.json = None;
    a.hdr_log = None;
    a.plot_dir = None;
    a
}

/// Runs the sweep and returns its table: message rate per transport and QP count, and each
/// verbs figure against the verbs figure at 16 QPs where the sweep has one.
pub fn qp_sweep(args: &Args, counts: &[usize], cores: &[usize]) -> Result<String> {
    let mut rows = Vec::new();
    let mut out = String::new();
    // The baselines and the verbs measurement of a count run apart, so that one failing (the
    // kernel's sockets of `tcp` need 20,000 descriptors in this process for 10,000
    // connections, where `tcp-proc` needs 10,000 here and 10,000 in its receiver) loses
    // nothing of the other.
    let parts: Vec<_> = [
        ("baselines", vec![OpArg::None], args.baselines.clone()),
        ("verbs", args.ops.clone(), vec![BaselineArg::None]),
    ]
    .into_iter()
    .filter(|(_, ops, baselines)| {
        ops.iter().any(|o| *o != OpArg::None) || baselines.iter().any(|b| *b != BaselineArg::None)
    })
    .collect();
    for &k in counts {
        for (part, ops, baselines) in &parts {
            let mut a = run_args(args, k);
            a.ops = ops.clone();
            a.baselines = baselines.clone();
            let plan = Plan::resolve(&a, cores)?;
            let t = Instant::now();
            // A count that fails is reported and the sweep goes on: how far it reaches is
            // part of the answer.
            let report = match bench::run(&plan, Vec::new()) {
                Ok(r) => r,
                Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
                Err(e) => {
                    let line = format!(
                        "{k} QPs: {part} failed after {:.1} s: {e}",
                        t.elapsed().as_secs_f64()
                    );
                    eprintln!("{line}");
                    let _ = writeln!(out, "{line}");
                    continue;
                }
            };
            for m in &report.measurements {
                let Some(th) = &m.throughput else { continue };
                let what = format!("{} {} {}B", m.transport.name(), m.op, m.size);
                // As it comes, so that a sweep cut short still shows what it measured.
                eprintln!("{k} QPs: {what}: {:.4} Mmsg/s", th.mmsg_per_s);
                rows.push(Row {
                    qps: k,
                    what,
                    mmsg_per_s: th.mmsg_per_s,
                    gbit_per_s: th.gbit_per_s,
                });
            }
            let line = format!("{k} QPs: {part} took {:.1} s", t.elapsed().as_secs_f64());
            eprintln!("{line}");
            let _ = writeln!(out, "{line}");
            for d in &report.daemon_memory {
                let _ = writeln!(out, "  {}", d.describe());
            }
        }
    }
    let _ = writeln!(
        out,
        "\n{:>7}  {:<28} {:>10} {:>9} {:>8}",
        "QPs", "transport op size", "Mmsg/s", "Gbit/s", "vs 16"
    );
    for r in &rows {
        let at16 = rows
            .iter()
            .find(|o| o.qps == 16 && o.what == r.what)
            .map(|o| r.mmsg_per_s / o.mmsg_per_s);
        let _ = writeln!(
            out,
            "{:>7}  {:<28} {:>10.4} {:>9.3} {:>8}",
            r.qps,
            r.what,
            r.mmsg_per_s,
            r.gbit_per_s,
            at16.map_or("-".into(), |x| format!("{x:.2}"))
        );
    }
    Ok(out)
}

/// The command-line name of a value of a clap enum.
fn name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map_or_else(String::new, |p| p.get_name().to_string())
}

/// What the children of an `--apps` run measure: iWARP on the shared endpoints, or the
/// kernel TCP baseline on a connection of their own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Verbs,
    Tcp,
}

/// How long the children of an `--apps` run may take to set up and warm up, per child,
/// before the parent starts the ones that are ready without the rest.
const READY_PER_CHILD: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts `n` `iwarp-bench` processes at once and returns each one's throughput (Gbit/s)
/// over everything it measured, in the order they were started. Each sets up and warms up,
/// says it is ready, and measures once all are (see `runner::app_child`), so that all
/// measure over the same time, however long the others' setup took.
fn children(
    args: &Args,
    n: usize,
    dirs: [&std::path::Path; 2],
    kind: Kind,
    pool: &[usize],
) -> Result<Vec<f64>> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("finding this executable", e))?;
    let duration = args.duration.clone().unwrap_or_else(|| "5s".into());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let mut procs = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = Command::new(&exe);
        c.args([
            "--app-child",
            "--mode",
            "bandwidth",
            "--qps",
            "1",
            "--quiet",
            "--json",
            "-",
        ])
        .args(["--duration", &duration])
        .args(["--warmup", &args.warmup.to_string()])
        .args(["--window", &args.window.to_string()])
        .args(["--sizes", &args.sizes.join(",")])
        .args(["--cores", &child_cores(pool, i)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        match kind {
            Kind::Verbs => {
                let ops: Vec<String> = args
                    .ops
                    .iter()
                    .filter(|o| **o != OpArg::None)
                    .map(name)
                    .collect();
                c.args(["--ops", &ops.join(","), "--baselines", "none"])
                    .args(["--daemons", "running"])
                    .arg("--runtime-dir")
                    .arg(dirs[0])
                    .arg("--runtime-dir")
                    .arg(dirs[1])
                    .args(["--cm-port", &(APPS_PORT + i as u16).to_string()]);
            }
            Kind::Tcp => {
                c.args(["--ops", "none", "--baselines", &name(&BaselineArg::Tcp)]);
            }
        }
        let mut child = c
            .spawn()
            .map_err(|e| BenchError::io("starting an application", e))?;
        let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(err("an application's output is not piped"));
        };
        // Its `ready` line (or its end, if it failed first) is counted; the rest is its JSON.
        let ready = ready_tx.clone();
        let out = std::thread::spawn(move || {
            use std::io::{BufRead, Read};
            let mut r = std::io::BufReader::new(stdout);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = ready.send(());
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest);
            rest
        });
        let errs = std::thread::spawn(move || {
            use std::io::Read;
            let mut e = Vec::new();
            let _ = stderr.read_to_end(&mut e);
            e
        });
        procs.push((child, out, errs));
    }
    drop(ready_tx);
    let deadline = Instant::now() + READY_PER_CHILD * n as u32;
    for _ in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        if ready_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    // The word to start: a line, then the end of stdin.
    for (child, _, _) in procs.iter_mut() {
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            let _ = stdin.write_all(b"go\n");
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut failed = Vec::new();
    for (i, (mut child, stdout, stderr)) in procs.into_iter().enumerate() {
        let status = child
            .wait()
            .map_err(|e| BenchError::io("waiting for an application", e))?;
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        if !status.success() {
            failed.push(format!(
                "application {i}: {}",
                String::from_utf8_lossy(&stderr).trim()
            ));
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(&stdout)
            .map_err(|e| err(format!("application {i}'s JSON: {e}")))?;
        let gbit: f64 = v["measurements"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["throughput"]["gbit_per_s"].as_f64())
            .sum();
        out.push(gbit);
    }
    if !failed.is_empty() {
        return Err(err(format!(
            "{} of {n} applications failed; first: {}",
            failed.len(),
            failed[0]
        )));
    }
    Ok(out)
}

/// Median, min/max ratio and total of per-application throughputs, one line.
fn summary(what: &str, n: usize, mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let total: f64 = v.iter().sum();
    let median = v.get(v.len() / 2).copied().unwrap_or(0.0);
    let (min, max) = (
        v.first().copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    );
    format!(
        "{n:>4} applications, {what:<5}: total {total:.3} Gbit/s, per application median \
         {median:.4} min {min:.4} max {max:.4} Gbit/s, min/max {:.2}",
        if max > 0.0 { min / max } else { 0.0 }
    )
}

/// Runs each count of `--apps` on fresh endpoints, then the TCP baseline with as many
/// processes; returns the lines to print.
pub fn apps(args: &Args, counts: &[usize], cores: &[usize]) -> Result<String> {
    let mut out = String::new();
    let pool = app_pool(cores, args.daemon_cores.as_deref().unwrap_or_default());
    for &n in counts {
        let plan = Plan::resolve(&run_args(args, n), cores)?;
        let endpoints = Endpoints::start(&plan.endpoint)?;
        let dirs = endpoints.runtime_dirs();
        let verbs = children(args, n, dirs, Kind::Verbs, &pool);
        endpoints.stop()?;
        let _ = writeln!(out, "{}", summary("iwarp", n, verbs?));
        if args.baselines.contains(&BaselineArg::Tcp) {
            let tcp = children(args, n, dirs_none(), Kind::Tcp, &pool)?;
            let _ = writeln!(out, "{}", summary("tcp", n, tcp));
        }
    }
    Ok(out)
}

/// The cores the applications of an `--apps` run share: those this process may use that no
/// daemon polls (all of them if that leaves none).
fn app_pool(cores: &[usize], daemon_cores: &[usize]) -> Vec<usize> {
    let free: Vec<usize> = cores
        .iter()
        .copied()
        .filter(|c| !daemon_cores.contains(c))
        .collect();
    if free.is_empty() {
        cores.to_vec()
    } else {
        free
    }
}

/// Child `i`'s `--cores`: its initiator thread and its receiver, round robin over the pool.
/// Left to the default, every child would pin both to the machine's first two cores, and
/// the run would measure those two cores, whatever the machine has.
fn child_cores(pool: &[usize], i: usize) -> String {
    let at = |k: usize| pool[k % pool.len()];
    if pool.len() < 2 {
        at(i).to_string()
    } else {
        format!("{},{}", at(2 * i), at(2 * i + 1))
    }
}

/// The TCP children use no endpoints.
fn dirs_none() -> [&'static std::path::Path; 2] {
    [std::path::Path::new(""), std::path::Path::new("")]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The applications of an `--apps` run spread over the cores no daemon polls, two to a
    /// child, instead of all on the machine's first two.
    #[test]
    fn applications_spread_over_the_cores_the_daemons_leave() {
        let cores: Vec<usize> = (0..16).collect();
        let pool = app_pool(&cores, &[2, 3]);
        assert_eq!(pool.len(), 14);
        assert!(!pool.contains(&2) && !pool.contains(&3));
        let given: Vec<String> = (0..8).map(|i| child_cores(&pool, i)).collect();
        assert_eq!(&given[..3], ["0,1", "4,5", "6,7"]);
        // Seven children fill the fourteen cores; the eighth starts again.
        assert_eq!(given[7], "0,1");
        // With every core a daemon's, the applications share them all; one core, one each.
        assert_eq!(app_pool(&[0, 1], &[0, 1]), vec![0, 1]);
        assert_eq!(child_cores(&[5], 3), "5");
    }
}
