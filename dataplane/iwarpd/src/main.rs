//! `iwarpd`: the dataplane daemon.
//!
//! Loads the TOML configuration (CLI flags override it), refuses a bad one with a message
//! naming the key (exit status 2), sets up logging and runs [`iwarpd::daemon::run`]: one
//! poll-mode RNIC per configured worker, counters in `<runtime dir>/stats`, SIGUSR1 logs
//! them, SIGINT/SIGTERM stop it cleanly (connections aborted, runtime files removed).

use clap::Parser;
use iwarp_config::{Config, ConfigError};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "iwarpd", about = "The iWARP dataplane daemon")]
struct Args {
    /// The TOML configuration file (defaults for everything it leaves out).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Instance name (daemon.name).
    #[arg(long)]
    name: Option<String>,
    /// Port kind: unix, tap or dpdk (port.kind).
    #[arg(long)]
    port: Option<String>,
    /// MAC address (port.mac).
    #[arg(long)]
    mac: Option<String>,
    /// IPv4 address with prefix, e.g. 10.77.0.2/24 (port.ipv4).
    #[arg(long)]
    ip: Option<String>,
    /// Directory of the embedded Unix-socket Ethernet segment (port.segment).
    #[arg(long)]
    segment: Option<PathBuf>,
    /// TAP interface name (port.tap_name).
    #[arg(long)]
    tap: Option<String>,
    /// Write every frame sent and received to this pcap file (pcap.file).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Runtime directory (daemon.runtime_dir).
    #[arg(long)]
    runtime_dir: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace (daemon.log_level).
    #[arg(long)]
    log_level: Option<String>,
    /// Cores to pin poll-mode workers to, comma-separated (cores.list).
    #[arg(long, value_delimiter = ',')]
    cores: Option<Vec<usize>>,
    /// Poll-mode workers (cores.workers; 0: one per core of --cores).
    #[arg(long)]
    workers: Option<usize>,
    /// busy or adaptive (cores.polling).
    #[arg(long)]
    polling: Option<String>,
    /// Minimum retransmission timeout in microseconds (tcp.min_rto_us).
    #[arg(long)]
    min_rto_us: Option<u64>,
    /// Time the poll loop's stages and publish them in the stats file (cores.stage_timing).
    #[arg(long)]
    stage_timing: bool,
    /// Check the configuration, print it, and exit.
    #[arg(long)]
    check: bool,
}

fn load(args: &Args) -> Result<Config, String> {
    let mut c = match &args.config {
        Some(p) => Config::load(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => Config::default(),
    };
    if let Some(v) = &args.name {
        c.daemon.name = v.clone();
    }
    // Words go through the configuration's own parse, so the message names the key.
    if let Some(v) = &args.port {
        c.port.kind = v.parse().map_err(|e: ConfigError| e.to_string())?;
    }
    if let Some(v) = &args.mac {
        c.port.mac = v.clone();
    }
    if let Some(v) = &args.ip {
        c.port.ipv4 = v.clone();
    }
    if let Some(v) = &args.segment {
        c.port.segment = v.clone();
    }
    if let Some(v) = &args.tap {
        c.port.tap_name = v.clone();
    }
    if let Some(v) = &args.pcap {
        c.pcap.file = Some(v.clone());
    }
    if let Some(v) = &args.runtime_dir {
        c.daemon.runtime_dir = Some(v.clone());
    }
    if let Some(v) = &args.log_level {
        c.daemon.log_level = v.parse().map_err(|e: ConfigError| e.to_string())?;
    }
    if let Some(v) = &args.cores {
        c.cores.list = v.clone();
    }
    if let Some(v) = args.workers {
        c.cores.workers = v;
    }
    if let Some(v) = &args.polling {
        c.cores.polling = v.parse().map_err(|e: ConfigError| e.to_string())?;
    }
    if let Some(v) = args.min_rto_us {
        c.tcp.min_rto_us = v;
    }
    if args.stage_timing {
        c.cores.stage_timing = true;
    }
    // CLI values go through the same validation, so the message names the key either way.
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("iwarpd: bad configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        use std::io::Write;
        // A closed stdout (`| head`) is not an error worth a panic.
        let _ = writeln!(
            std::io::stdout(),
            "{cfg:#?}\nsegment size (tcp.mss) {}, in-flight bound (tcp.max_inflight) {}",
            cfg.mss(),
            cfg.max_inflight()
        );
        return ExitCode::SUCCESS;
    }
    iwarp_config::logging::init(cfg.daemon.log_level);
    // Each QP's rings are shared-memory files held open here; an ordinary user's soft limit
    // (often 1024) would cap a daemon at a few hundred connections.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    match iwarpd::daemon::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
