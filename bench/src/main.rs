//! `iwarp-bench`: see `iwarp-bench --help` and the crate documentation.

use clap::Parser;
use iwarp_bench::cli::{machine_cores, Args, Plan};
use iwarp_bench::{bench, output, transport};
use std::process::ExitCode;

/// How a peer process the benchmark started for itself ends: its error, if any, on stderr.
fn peer_exit<E: std::fmt::Display>(what: &str, result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iwarp-bench ({what}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    iwarp_bench::limits::raise_fd_limit();
    if let Some(n) = args.tcp_accept_peer {
        return peer_exit(
            "tcp accept peer",
            iwarp_bench::setup_rate::tcp_accept_peer(n),
        );
    }
    if let Some(path) = &args.tcp_peer {
        return peer_exit("tcp peer", transport::tcp::serve_file(path));
    }
    if let Some(path) = &args.shm_peer {
        return peer_exit(
            "shm peer",
            transport::shm::serve_file(path, args.shm_peer_core),
        );
    }
    if args.app_child {
        iwarp_bench::runner::app_child();
    }
    if args.qp_sweep.is_some() || args.apps.is_some() {
        iwarp_bench::runner::install_interrupt();
        let cores = machine_cores();
        let result = match (&args.qp_sweep, &args.apps) {
            (Some(counts), _) => iwarp_bench::scale::qp_sweep(&args, counts, &cores),
            (None, Some(counts)) => iwarp_bench::scale::apps(&args, counts, &cores),
            (None, None) => unreachable!("checked above"),
        };
        return match result {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("iwarp-bench: {e}");
                ExitCode::from(if e.is_usage() { 2 } else { 1 })
            }
        };
    }
    let plan = match Plan::resolve(&args, &machine_cores()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("iwarp-bench: error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(n) = args.setup_rate {
        let hold = match args
            .hold
            .as_deref()
            .map(iwarp_bench::workload::parse_duration)
        {
            None => None,
            Some(Ok(d)) => Some(d),
            Some(Err(e)) => {
                eprintln!("iwarp-bench: error: --hold: {e}");
                return ExitCode::from(2);
            }
        };
        return match iwarp_bench::setup_rate::run(&plan, n as usize, hold) {
            Ok(r) => {
                print!("{}", r.describe());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("iwarp-bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let command: Vec<String> = std::env::args().collect();
    iwarp_bench::runner::install_interrupt();
    let mut report = match bench::run(&plan, command) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("iwarp-bench: {e}");
            return ExitCode::from(match e {
                e if e.is_usage() => 2,
                iwarp_bench::BenchError::Interrupted => 130,
                _ => 1,
            });
        }
    };
    if let Err(e) = bench::emit(&mut report, &plan) {
        eprintln!("iwarp-bench: {e}");
        return ExitCode::FAILURE;
    }
    let to_stdout_json = plan.output.json.as_deref() == Some(std::path::Path::new("-"));
    if !plan.output.quiet && !to_stdout_json {
        print!("{}", output::table::render(&report.measurements));
        for m in &report.daemon_memory {
            println!("{}", m.describe());
        }
        for f in &report.plots {
            println!("plot: {f}");
        }
        if let Some(h) = &report.hdr_log {
            println!("histograms: {h}");
        }
    }
    ExitCode::SUCCESS
}
