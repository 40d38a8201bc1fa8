//! Runs a [`Plan`]: for each mode and size, the baselines first, then every verbs operation,
//! so that a result and the baselines it is compared with are measured minutes apart at most,
//! on the same machine state. Then the ratios, the histogram log, the plots and the JSON.

use crate::cli::{BaselineArg, Plan, Stop};
use crate::error::{BenchError, Result};
use crate::output;
use crate::report::{
    attach_ratios, Machine, Measurement, Percentiles, Report, Settings, Throughput,
};
use crate::runner::{self, Progress, StreamPlan};
use crate::stages::{DaemonStages, StageTimes, Stages};
use crate::transport::shm::ShmTransport;
use crate::transport::tcp::TcpTransport;
use crate::transport::{verbs, Setup, Transport};
use crate::workload::{fmt_size, Exchange, Mode};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The executable started as the shm-proc peer: `--peer-exe`, else this one.
fn peer_exe(plan: &Plan) -> Result<PathBuf> {
    match &plan.peer_exe {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe()
            .map_err(|e| BenchError::io("finding this executable (for the shm-proc peer)", e)),
    }
}

fn baselines(plan: &Plan) -> Result<Vec<Box<dyn Transport>>> {
    let mut v: Vec<Box<dyn Transport>> = Vec::new();
    for b in &plan.baselines {
        match b {
            BaselineArg::Tcp => v.push(Box::new(TcpTransport::threads())),
            BaselineArg::TcpProc => v.push(Box::new(TcpTransport::process(peer_exe(plan)?))),
            BaselineArg::Shm => v.push(Box::new(ShmTransport::threads())),
            BaselineArg::ShmProc => v.push(Box::new(ShmTransport::processes(peer_exe(plan)?))),
            BaselineArg::None => {}
        }
    }
    Ok(v)
}

/// One measurement to make.
struct Job<'t> {
    mode: Mode,
    transport: &'t dyn Transport,
    exchange: Exchange,
    size: usize,
}

fn jobs<'t>(
    plan: &Plan,
    bases: &'t [Box<dyn Transport>],
    verbs: Option<&'t dyn Transport>,
) -> Vec<Job<'t>> {
    let mut out = Vec::new();
    for &mode in &plan.modes {
        for &size in &plan.sizes {
            for b in bases {
                out.push(Job {
                    mode,
                    transport: b.as_ref(),
                    exchange: Exchange::Message,
                    size,
                });
            }
            if let Some(v) = verbs {
                for &op in &plan.ops {
                    // Atomics are 8-octet operations: measured at size 8 only.
                    if op.is_atomic() && size != 8 {
                        continue;
                    }
                    out.push(Job {
                        mode,
                        transport: v,
                        exchange: Exchange::Verb(op),
                        size,
                    });
                }
            }
        }
    }
    out
}

fn bar(plan: &Plan, total_jobs: usize) -> ProgressBar {
    if plan.output.quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style =
        ProgressStyle::with_template("{prefix:>5} {msg:<30} [{wide_bar}] {pos}/{len} {elapsed}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_prefix(format!("0/{total_jobs}"));
    pb
}

fn measure(plan: &Plan, job: &Job<'_>, progress: &dyn Progress) -> Result<Measurement> {
    let t = job.transport;
    let latency_mode = job.mode == Mode::Latency;
    let setup = Setup {
        exchange: job.exchange,
        size: job.size,
        window: if latency_mode { 1 } else { plan.window },
        responder_core: plan.responder_core(0),
        stages: plan.stages,
    };
    let daemon_before = if plan.stages { t.daemon_stages() } else { None };
    let mut m = Measurement {
        mode: job.mode,
        transport: t.kind(),
        op: job.exchange.name().to_string(),
        size: job.size,
        window: setup.window,
        qps: if latency_mode { 1 } else { plan.qps },
        threads: if latency_mode { 1 } else { plan.threads },
        count: 0,
        seconds: 0.0,
        latency_us: None,
        throughput: None,
        offered_rate: None,
        stages: None,
        hdr_tag: None,
        vs: Vec::new(),
        histogram: None,
    };
    let app_stages: StageTimes;
    if latency_mode {
        let out = runner::latency(
            t,
            &setup,
            plan.initiator_cores.first().copied().flatten(),
            plan.warmup,
            plan.stop,
            progress,
        )?;
        m.count = out.histogram.len();
        m.seconds = out.elapsed.as_secs_f64();
        m.latency_us = Some(Percentiles::of(&out.histogram));
        m.histogram = Some(out.histogram);
        app_stages = out.stages;
    } else {
        let sp = StreamPlan {
            qps: plan.qps,
            initiator_cores: plan.initiator_cores.clone(),
            responder_cores: plan.responder_cores.clone(),
            warmup: plan.warmup,
            stop: plan.stop,
            rate: if job.mode == Mode::OpenLoop {
                plan.rate
            } else {
                None
            },
        };
        let out = runner::stream(t, &setup, &sp, progress)?;
        m.seconds = out.elapsed.as_secs_f64();
        m.throughput = Some(Throughput::new(out.messages, job.size, m.seconds));
        m.count = out.messages;
        if let Some(h) = out.histogram {
            m.count = h.len();
            m.latency_us = Some(Percentiles::of(&h));
            m.histogram = Some(h);
            m.offered_rate = plan.rate;
        }
        app_stages = StageTimes::default();
    }
    if plan.stages {
        let daemon = match (daemon_before, t.daemon_stages()) {
            (Some(a), Some(b)) => b.since(&a),
            _ => DaemonStages::default(),
        };
        // The daemon counters also grew during warm-up.
        let exchanges = m.count + plan.warmup;
        m.stages = Some(Stages::from_parts(app_stages, daemon, exchanges));
    }
    Ok(m)
}

/// Runs everything `plan` asks for and returns the report (outputs are not written yet).
pub fn run(plan: &Plan, command: Vec<String>) -> Result<Report> {
    let started = SystemTime::now();
    let bases = baselines(plan)?;
    let verbs_t: Option<Box<dyn Transport>> = if plan.ops.is_empty() {
        None
    } else {
        Some(verbs::open(
            &plan.endpoint,
            plan.window,
            plan.sizes.iter().copied().max().unwrap_or(8),
            plan.cq_per_qp,
        )?)
    };
    let jobs = jobs(plan, &bases, verbs_t.as_deref());
    let pb = bar(plan, jobs.len());
    let mut ms = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        pb.set_prefix(format!("{}/{}", i + 1, jobs.len()));
        pb.set_message(format!(
            "{} {} {} {}",
            job.mode,
            job.transport.kind(),
            job.exchange.name(),
            fmt_size(job.size)
        ));
        pb.set_position(0);
        match plan.stop {
            Stop::Iterations(n) => {
                let per = if job.mode == Mode::Latency {
                    1
                } else {
                    plan.qps as u64
                };
                pb.set_length(n * per);
            }
            Stop::Duration(_) => pb.unset_length(),
        }
        let m = measure(plan, job, &pb).map_err(|e| match e {
            BenchError::Transport { transport, message } => BenchError::Transport {
                transport,
                message: format!(
                    "{message} (during {} {} {})",
                    job.mode,
                    job.exchange.name(),
                    fmt_size(job.size)
                ),
            },
            e => e,
        })?;
        ms.push(m);
    }
    pb.finish_and_clear();
    let mut daemon_memory = Vec::new();
    if let Some(v) = verbs_t {
        daemon_memory = v.daemon_memory();
        v.shutdown()?;
    }
    attach_ratios(&mut ms);
    let (iterations, duration_s) = match plan.stop {
        Stop::Iterations(n) => (Some(n), None),
        Stop::Duration(d) => (None, Some(d.as_secs_f64())),
    };
    Ok(Report {
        tool: "iwarp-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command,
        started_unix_s: started
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        machine: Machine::probe(),
        settings: Settings {
            modes: plan.modes.clone(),
            ops: plan.ops.iter().map(|o| o.name().to_string()).collect(),
            baselines: bases.iter().map(|b| b.kind().name().to_string()).collect(),
            sizes: plan.sizes.clone(),
            iterations,
            duration_s,
            warmup: plan.warmup,
            window: plan.window,
            qps: plan.qps,
            threads: plan.threads,
            initiator_cores: plan.initiator_cores.clone(),
            responder_cores: plan.responder_cores.clone(),
            rate: plan.rate,
            stages: plan.stages,
            cq_per_qp: plan.cq_per_qp,
            endpoint: plan.endpoint.clone(),
        },
        measurements: ms,
        daemon_memory,
        hdr_log: None,
        plots: Vec::new(),
    })
}

/// Writes the outputs `plan` names (histogram log first, so the JSON carries the tags).
pub fn emit(report: &mut Report, plan: &Plan) -> Result<()> {
    let started = UNIX_EPOCH + std::time::Duration::from_secs(report.started_unix_s);
    if let Some(p) = &plan.output.hdr_log {
        output::hlog::write(&mut report.measurements, p, started)?;
        report.hdr_log = Some(p.display().to_string());
    }
    if let Some(dir) = &plan.output.plot_dir {
        let files = output::plot::write_all(&report.measurements, dir)?;
        report.plots = files.iter().map(|f| f.display().to_string()).collect();
    }
    if let Some(p) = &plan.output.json {
        output::write_json(report, p)?;
    }
    Ok(())
}
