//! The command line, and its resolution into a [`Plan`]: every check that can refuse a request
//! happens here, before anything runs, with a message that says what is wrong and what to do.

use crate::error::{BenchError, Result};
use crate::workload::{parse_duration, parse_rate, parse_sizes, Mode, Op};
use clap::{Parser, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Operation names on the command line: the verbs operations, `all`, or `none` (baselines only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpArg {
    All,
    None,
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

/// Baselines run beside the verbs operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BaselineArg {
    /// Kernel TCP on loopback, TCP_NODELAY.
    Tcp,
    /// Kernel TCP on loopback, every connection received by one epoll loop in another
    /// process: 10,000 connections take 10,000 descriptors on each side, where `tcp` needs
    /// 20,000 and a thread per connection in one process.
    TcpProc,
    /// Two pinned threads through shared memory.
    Shm,
    /// Two pinned processes through a shared mapping.
    ShmProc,
    /// No baseline.
    None,
}

/// The port the iWARP daemons use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PortArg {
    /// The embedded default: Ethernet frames over a Unix socket segment, no privileges.
    Unix,
    /// DPDK (iwarpd built with the `dpdk` feature): a NIC or a virtual device (--dpdk-vdev).
    Dpdk,
    /// A Linux TAP interface (root).
    Tap,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HugepagesArg {
    /// Hugepages where a hugetlbfs mount has free pages, else ordinary shared memory.
    Auto,
    /// Hugepages or fail.
    On,
    /// Ordinary shared memory.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DaemonsArg {
    /// Start two endpoints (iwarpd + iwarp-control each) for the run, stop them after.
    Spawn,
    /// Use two running endpoints named by --runtime-dir (twice).
    Running,
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "iwarp-bench",
    version,
    about = "Latency, bandwidth and message rate of the iWARP stack through the verbs library, \
             with kernel TCP and shared-memory baselines measured in the same run",
    after_help = "Examples:\n  \
        iwarp-bench --ops none --sizes 8,64,4K,64K,1M            baselines only\n  \
        iwarp-bench --ops write,read --sizes 64 --iterations 100000\n  \
        iwarp-bench --mode bandwidth --sizes 64,64K --window 128 --qps 2 --threads 2\n  \
        iwarp-bench --mode open-loop --rate 200k --sizes 64 --duration 2s\n  \
        iwarp-bench --sizes 8..1M --json out.json --hdr-log out.hlog --plot-dir plots"
)]
pub struct Args {
    /// What to measure: latency (ping-pong, one in flight), bandwidth (a window in flight),
    /// open-loop (a set offered rate; latency from each message's intended send time).
    #[arg(long, value_delimiter = ',', default_value = "latency")]
    pub mode: Vec<Mode>,

    /// Verbs operations to measure over iWARP; `none` runs the baselines alone.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub ops: Vec<OpArg>,

    /// Baselines measured in the same run and printed beside each result with the ratio.
    #[arg(long, value_delimiter = ',', default_value = "tcp,shm")]
    pub baselines: Vec<BaselineArg>,

    /// Message sizes: a list (8,64,4K,1M) and/or sweeps (8..1M doubles; 8..1M:4 multiplies by 4).
    #[arg(long, value_delimiter = ',', default_value = "8,64,4K,64K,1M")]
    pub sizes: Vec<String>,

    /// Measured exchanges per operation, size and QP (default 10000 unless --duration).
    #[arg(long, conflicts_with = "duration")]
    pub iterations: Option<u64>,

    /// Measure for this long per operation and size instead (2s, 500ms).
    #[arg(long)]
    pub duration: Option<String>,

    /// Exchanges before each measurement that are not recorded.
    #[arg(long, default_value_t = 1000)]
    pub warmup: u64,

    /// Messages in flight per QP (bandwidth and open-loop modes).
    #[arg(long, default_value_t = 64)]
    pub window: usize,

    /// Connections (QPs, or sockets for the TCP baseline) in bandwidth and open-loop modes.
    #[arg(long, default_value_t = 1)]
    pub qps: usize,

    /// Give each initiating QP a send CQ of its own. By default the QPs of a context share
    /// send CQs (as many QPs as the RNIC's `max_cqe` allows on one), as perftest gives all
    /// its QPs one: reaping then costs what completed, not how many QPs there are.
    #[arg(long)]
    pub cq_per_qp: bool,

    /// Initiator threads, each pinned to its own core, sharing the QPs (default 1).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Cores to pin to: the initiator threads first, then the responders / receivers
    /// (default: the machine's cores in order).
    #[arg(long, value_delimiter = ',')]
    pub cores: Option<Vec<usize>>,

    /// Offered rate for open-loop mode, messages per second over all QPs (100000, 250k, 1.5M).
    #[arg(long)]
    pub rate: Option<String>,

    /// Time the post and wait stages of each exchange (adds clock reads to the measured path)
    /// and read the daemons' stage counters.
    #[arg(long)]
    pub stages: bool,

    /// Port of the iWARP daemons.
    #[arg(long, value_enum, default_value = "unix")]
    pub port: PortArg,

    /// DPDK virtual device for --port dpdk (e.g. net_memif); each endpoint gets its own.
    #[arg(long)]
    pub dpdk_vdev: Option<String>,

    /// The spawned daemons' port MTU (`port.mtu`; their TCP segments follow it); above 1500:
    /// jumbo frames (memif gets a buffer per frame).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..=9216))]
    pub mtu: u16,

    /// Shared memory for rings and registered buffers.
    #[arg(long, value_enum, default_value = "auto")]
    pub hugepages: HugepagesArg,

    /// The spawned daemons' `tcp.user_timeout_ms` (their default otherwise): how long a
    /// peer may be silent before its connection is given up; keep-alives go every quarter
    /// of it, so thousands of idle connections cost that many frames per interval.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub tcp_user_timeout: Option<u64>,

    /// The spawned daemons' `tcp.worker_inflight` (their default otherwise): the octets a
    /// worker's connections may hold unacknowledged together, shared among its senders.
    #[arg(long, value_name = "OCTETS")]
    pub tcp_worker_inflight: Option<u64>,

    /// Poll-mode cores of the daemons: the first endpoint's, then the second's (one per
    /// worker each).
    #[arg(long, value_delimiter = ',')]
    pub daemon_cores: Option<Vec<usize>>,

    /// Poll-mode workers of each daemon (spawned ones get `cores.workers`; say how many
    /// running ones have). The harness opens a context per worker on each endpoint and
    /// spreads its QPs over them, so --qps N with N workers puts one connection on each.
    #[arg(long, default_value_t = 1)]
    pub daemon_workers: usize,

    /// Start the daemons for the run, or use running ones.
    #[arg(long, value_enum, default_value = "spawn")]
    pub daemons: DaemonsArg,

    /// Runtime directories of two running endpoints (--daemons running), or where to create the
    /// spawned ones (default: a fresh temporary directory).
    #[arg(long)]
    pub runtime_dir: Vec<PathBuf>,

    /// IPv4 addresses of the two running endpoints (--daemons running; default 10.77.0.1,
    /// 10.77.0.2, what spawned endpoints use).
    #[arg(long, value_delimiter = ',')]
    pub endpoint_ip: Vec<std::net::Ipv4Addr>,

    /// The TCP port the second endpoint listens on (one more per further worker). Two runs
    /// on the same running endpoints at once need ports of their own.
    #[arg(long, default_value_t = 18515)]
    pub cm_port: u16,

    /// The iwarpd executable (default: next to this executable, then $PATH).
    #[arg(long)]
    pub iwarpd: Option<PathBuf>,

    /// The iwarp-control executable (default: next to this executable, then $PATH).
    #[arg(long)]
    pub iwarp_control: Option<PathBuf>,

    /// A TOML configuration the spawned daemons start from (the flags above override it).
    #[arg(long)]
    pub daemon_config: Option<PathBuf>,

    /// Write the results as JSON to this file (`-` for standard output).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Write every latency histogram to this HdrHistogram interval log (tagged per result).
    #[arg(long)]
    pub hdr_log: Option<PathBuf>,

    /// Write SVG plots here: latency percentile curves, bandwidth versus size.
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,

    /// No progress bar and no table (for scripts; see --json).
    #[arg(long)]
    pub quiet: bool,

    /// Internal: run as one of an `--apps` run's applications (see `runner::app_child`).
    #[arg(long, hide = true)]
    pub app_child: bool,

    /// The `iwarp-bench` executable to start as the peer of the shm-proc baseline (default:
    /// this executable).
    #[arg(long, hide = true)]
    pub peer_exe: Option<PathBuf>,

    /// QP-count sweep: run bandwidth mode once per count (e.g. 1,16,256,1024), each with its
    /// own endpoints, and print message rate per count against the 16-QP figure. The kernel
    /// baseline for as many connections: `--baselines tcp-proc` (to 10,000 and past).
    #[arg(long, value_delimiter = ',')]
    pub qp_sweep: Option<Vec<usize>>,

    /// Many applications: start one pair of endpoints, then this many `iwarp-bench`
    /// processes at once, each with its own QP streaming through them (bandwidth mode); print
    /// each one's throughput, the median, min/max ratio and the total. Lists run one after
    /// another (16,64,256). Each application is pinned to two cores, round robin over the
    /// cores --daemon-cores leaves.
    #[arg(long, value_delimiter = ',')]
    pub apps: Option<Vec<usize>>,

    /// Measure connection setup instead: open this many connections from one endpoint to
    /// the other through the connection manager (QPs created beforehand) and report
    /// connections per second, with the kernel's TCP doing as many connects on loopback,
    /// and the rates at which the QPs were created and destroyed; --daemon-workers spreads
    /// them over the workers. The other measurement flags are ignored.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub setup_rate: Option<u32>,

    /// With --setup-rate: hold the connections this long once all are up (e.g. 10m),
    /// watching for any that is lost, and print the daemons' memory per connection.
    #[arg(long, value_name = "DURATION", requires = "setup_rate")]
    pub hold: Option<String>,

    /// Internal: accept this many kernel TCP connections on loopback for the setup-rate
    /// baseline (the port on stdout), holding them until stdin closes.
    #[arg(long, hide = true)]
    pub tcp_accept_peer: Option<usize>,

    /// Internal: serve as the receiving process of the tcp-proc baseline on this region file.
    #[arg(long, hide = true)]
    pub tcp_peer: Option<PathBuf>,

    /// Internal: serve as the peer process of the shm-proc baseline on this region file.
    #[arg(long, hide = true)]
    pub shm_peer: Option<PathBuf>,

    /// Internal: the core the shm-proc peer pins itself to.
    #[arg(long, hide = true)]
    pub shm_peer_core: Option<usize>,
}

/// When a measurement ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Iterations(u64),
    Duration(Duration),
}

/// Where the iWARP endpoints come from (used only when verbs operations are requested).
fn default_mtu() -> u16 {
    1500
}

/// perftest's default port.
fn default_cm_port() -> u16 {
    18515
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointPlan {
    pub port: PortArg,
    pub dpdk_vdev: Option<String>,
    pub hugepages: HugepagesArg,
    pub daemon_cores: Vec<usize>,
    /// Poll-mode workers per daemon.
    pub daemon_workers: usize,
    pub daemons: DaemonsArg,
    pub runtime_dirs: Vec<PathBuf>,
    pub peer_ips: Vec<std::net::Ipv4Addr>,
    pub iwarpd: Option<PathBuf>,
    pub iwarp_control: Option<PathBuf>,
    pub daemon_config: Option<PathBuf>,
    /// Spawned daemons time their poll-loop stages (`cores.stage_timing`).
    pub stage_timing: bool,
    /// Spawned daemons' `port.mtu`.
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// The port the second endpoint's first context listens on.
    #[serde(default = "default_cm_port")]
    pub cm_port: u16,
    /// Spawned daemons' `tcp.user_timeout_ms`, when not their default.
    #[serde(default)]
    pub tcp_user_timeout_ms: Option<u64>,
    /// Spawned daemons' `tcp.worker_inflight`, when not their default.
    #[serde(default)]
    pub tcp_worker_inflight: Option<u64>,
    /// Connections the run opens: spawned daemons' QP, CQ and PD limits are raised to hold
    /// them where the defaults would not.
    #[serde(default)]
    pub qps: usize,
}

/// Where results go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputPlan {
    pub json: Option<PathBuf>,
    pub hdr_log: Option<PathBuf>,
    pub plot_dir: Option<PathBuf>,
    pub quiet: bool,
}

/// A checked request: everything the runner needs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub modes: Vec<Mode>,
    pub ops: Vec<Op>,
    pub baselines: Vec<BaselineArg>,
    pub sizes: Vec<usize>,
    pub stop: Stop,
    pub warmup: u64,
    pub window: usize,
    pub qps: usize,
    pub threads: usize,
    /// One per initiator thread.
    pub initiator_cores: Vec<Option<usize>>,
    /// Responder / receiver cores, used round-robin.
    pub responder_cores: Vec<Option<usize>>,
    pub rate: Option<f64>,
    pub stages: bool,
    /// Each initiating QP has a send CQ of its own (`--cq-per-qp`).
    pub cq_per_qp: bool,
    pub endpoint: EndpointPlan,
    pub output: OutputPlan,
    pub peer_exe: Option<PathBuf>,
}

/// The largest window the harness accepts (deeper than any queue the stack allows).
pub const MAX_WINDOW: usize = 1 << 16;
/// The most connections one run opens (spawned daemons get limits to match, see
/// `daemons.rs`; the machine's memory and descriptors are the real bound).
pub const MAX_QPS: usize = 16_384;
pub const DEFAULT_ITERATIONS: u64 = 10_000;

/// The cores this process may run on, as core_affinity sees them.
pub fn machine_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|v| v.into_iter().map(|c| c.id).collect())
        .unwrap_or_else(|| {
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
        })
}

fn dedup<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for &x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

impl Plan {
    /// Checks `args` against this machine (`cores`: the core ids it has) and resolves them.
    pub fn resolve(args: &Args, cores: &[usize]) -> Result<Plan> {
        let modes = dedup(&args.mode);
        let ops = resolve_ops(&args.ops)?;
        let baselines = resolve_baselines(&args.baselines)?;
        if ops.is_empty() && baselines.is_empty() {
            return Err(BenchError::usage(
                "nothing to measure: --ops none and --baselines none",
            ));
        }
        let sizes = parse_sizes(&args.sizes)?;
        for &op in &ops {
            if op.is_atomic() {
                if !sizes.contains(&8) {
                    // Atomics run at 8 octets only; a size list without 8 leaves them nothing.
                    return Err(BenchError::usage(
                        op.refuse_size(sizes[0]).unwrap_or_default(),
                    ));
                }
            } else if let Some(why) = sizes.iter().find_map(|&s| op.refuse_size(s)) {
                return Err(BenchError::usage(why));
            }
        }

        let stop = match (&args.duration, args.iterations) {
            (Some(d), _) => {
                let d = parse_duration(d)?;
                if d.is_zero() {
                    return Err(BenchError::usage("--duration must be more than 0"));
                }
                Stop::Duration(d)
            }
            (None, Some(0)) => {
                return Err(BenchError::usage(
                    "--iterations 0 measures nothing: give at least 1",
                ))
            }
            (None, Some(n)) => Stop::Iterations(n),
            (None, None) => Stop::Iterations(DEFAULT_ITERATIONS),
        };

        if args.window == 0 {
            return Err(BenchError::usage(
                "--window 0 allows no message in flight: give at least 1",
            ));
        }
        if args.window > MAX_WINDOW {
            return Err(BenchError::usage(format!(
                "--window {} is deeper than any queue the stack allows (at most {MAX_WINDOW})",
                args.window
            )));
        }
        if args.qps == 0 || args.qps > MAX_QPS {
            return Err(BenchError::usage(format!(
                "--qps {}: give between 1 and {MAX_QPS} connections",
                args.qps
            )));
        }
        let threads = args.threads.unwrap_or(1);
        if threads == 0 {
            return Err(BenchError::usage("--threads 0: give at least 1"));
        }
        if threads > cores.len() {
            return Err(BenchError::usage(format!(
                "--threads {threads}: this machine has {} core(s) to pin initiator threads to",
                cores.len()
            )));
        }
        if threads > args.qps {
            return Err(BenchError::usage(format!(
                "--threads {threads} with --qps {}: every thread needs at least one QP to drive",
                args.qps
            )));
        }

        let rate = match &args.rate {
            Some(r) => Some(parse_rate(r)?),
            None => None,
        };
        if modes.contains(&Mode::OpenLoop) && rate.is_none() {
            return Err(BenchError::usage(
                "--mode open-loop needs --rate (messages per second over all QPs, e.g. 100k)",
            ));
        }
        if rate.is_some() && !modes.contains(&Mode::OpenLoop) {
            return Err(BenchError::usage(
                "--rate applies to --mode open-loop only (latency and bandwidth are closed-loop)",
            ));
        }

        let check_cores = |flag: &str, list: &[usize]| -> Result<()> {
            if list.len() > cores.len() {
                return Err(BenchError::usage(format!(
                    "{flag} names {} cores but this machine has {}",
                    list.len(),
                    cores.len()
                )));
            }
            if let Some(c) = list.iter().find(|c| !cores.contains(c)) {
                return Err(BenchError::usage(format!(
                    "{flag}: core {c} does not exist here (this process may use cores {})",
                    fmt_cores(cores)
                )));
            }
            if dedup(list).len() != list.len() {
                return Err(BenchError::usage(format!("{flag}: a core is named twice")));
            }
            Ok(())
        };
        let (initiator_cores, responder_cores) = match &args.cores {
            Some(list) => {
                check_cores("--cores", list)?;
                if list.len() < threads {
                    return Err(BenchError::usage(format!(
                        "--cores names {} core(s) for {threads} initiator thread(s)",
                        list.len()
                    )));
                }
                split_cores(list, threads)
            }
            None => split_cores(cores, threads),
        };
        let daemon_cores = args.daemon_cores.clone().unwrap_or_default();
        check_cores("--daemon-cores", &daemon_cores)?;
        if !(1..=64).contains(&args.daemon_workers) {
            return Err(BenchError::usage(format!(
                "--daemon-workers {}: a daemon runs 1 to 64 workers",
                args.daemon_workers
            )));
        }
        if daemon_cores.len() > 2 * args.daemon_workers {
            return Err(BenchError::usage(format!(
                "--daemon-cores names {} cores for two daemons of {} worker(s) each",
                daemon_cores.len(),
                args.daemon_workers
            )));
        }

        if args.daemons == DaemonsArg::Running && !ops.is_empty() && args.runtime_dir.len() != 2 {
            return Err(BenchError::usage(
                "--daemons running needs --runtime-dir twice: the two endpoints' directories",
            ));
        }
        if args.runtime_dir.len() > 2 {
            return Err(BenchError::usage("--runtime-dir: at most two endpoints"));
        }
        if args.endpoint_ip.len() > 2 {
            return Err(BenchError::usage("--endpoint-ip: at most two addresses"));
        }
        if args.dpdk_vdev.is_some() && args.port != PortArg::Dpdk {
            return Err(BenchError::usage("--dpdk-vdev needs --port dpdk"));
        }
        if args.mtu != 1500 && (args.daemons == DaemonsArg::Running || args.daemon_config.is_some())
        {
            return Err(BenchError::usage(
                "--mtu sets the daemons this run starts from its own configuration: with \
                 --daemons running or --daemon-config, port.mtu is theirs",
            ));
        }
        if args.tcp_user_timeout.is_some()
            && (args.daemons == DaemonsArg::Running || args.daemon_config.is_some())
        {
            return Err(BenchError::usage(
                "--tcp-user-timeout sets the daemons this run starts from its own \
                 configuration: with --daemons running or --daemon-config, it is theirs",
            ));
        }
        if args.tcp_worker_inflight.is_some()
            && (args.daemons == DaemonsArg::Running || args.daemon_config.is_some())
        {
            return Err(BenchError::usage(
                "--tcp-worker-inflight sets the daemons this run starts from its own \
                 configuration: with --daemons running or --daemon-config, it is theirs",
            ));
        }

        Ok(Plan {
            modes,
            ops,
            baselines,
            sizes,
            stop,
            warmup: args.warmup,
            window: args.window,
            qps: args.qps,
            threads,
            initiator_cores,
            responder_cores,
            rate,
            stages: args.stages,
            cq_per_qp: args.cq_per_qp,
            endpoint: EndpointPlan {
                port: args.port,
                dpdk_vdev: args.dpdk_vdev.clone(),
                hugepages: args.hugepages,
                daemon_cores,
                daemon_workers: args.daemon_workers,
                daemons: args.daemons,
                runtime_dirs: args.runtime_dir.clone(),
                peer_ips: args.endpoint_ip.clone(),
                iwarpd: args.iwarpd.clone(),
                iwarp_control: args.iwarp_control.clone(),
                daemon_config: args.daemon_config.clone(),
                stage_timing: args.stages,
                mtu: args.mtu,
                tcp_user_timeout_ms: args.tcp_user_timeout,
                tcp_worker_inflight: args.tcp_worker_inflight,
                cm_port: args.cm_port,
                qps: args.qps,
            },
            output: OutputPlan {
                json: args.json.clone(),
                hdr_log: args.hdr_log.clone(),
                plot_dir: args.plot_dir.clone(),
                quiet: args.quiet,
            },
            peer_exe: args.peer_exe.clone(),
        })
    }

    /// The responder core for connection `i`.
    pub fn responder_core(&self, i: usize) -> Option<usize> {
        if self.responder_cores.is_empty() {
            None
        } else {
            self.responder_cores[i % self.responder_cores.len()]
        }
    }
}

fn fmt_cores(cores: &[usize]) -> String {
    cores
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The first `threads` cores drive, the rest respond (round-robin); with no core left for the
/// responders they share the initiators' cores, and on a one-core machine nothing is pinned
/// twice to the same core by default.
fn split_cores(list: &[usize], threads: usize) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let init: Vec<Option<usize>> = list[..threads].iter().map(|&c| Some(c)).collect();
    let rest: Vec<Option<usize>> = list[threads..].iter().map(|&c| Some(c)).collect();
    let resp = if rest.is_empty() { vec![None] } else { rest };
    (init, resp)
}

fn resolve_ops(args: &[OpArg]) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    let has_none = args.contains(&OpArg::None);
    if has_none && args.len() > 1 {
        return Err(BenchError::usage(
            "--ops none means no verbs operation: do not combine it with others",
        ));
    }
    for a in args {
        match a {
            OpArg::None => {}
            OpArg::All => ops.extend(Op::ALL),
            OpArg::Send => ops.push(Op::Send),
            OpArg::SendImm => ops.push(Op::SendImm),
            OpArg::Write => ops.push(Op::Write),
            OpArg::WriteImm => ops.push(Op::WriteImm),
            OpArg::Read => ops.push(Op::Read),
            OpArg::FetchAdd => ops.push(Op::FetchAdd),
            OpArg::CmpSwap => ops.push(Op::CmpSwap),
        }
    }
    let mut ops = dedup(&ops);
    ops.sort();
    Ok(ops)
}

fn resolve_baselines(args: &[BaselineArg]) -> Result<Vec<BaselineArg>> {
    if args.contains(&BaselineArg::None) {
        if args.len() > 1 {
            return Err(BenchError::usage(
                "--baselines none means no baseline: do not combine it with others",
            ));
        }
        return Ok(Vec::new());
    }
    Ok(dedup(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(argv: &[&str]) -> Result<Plan> {
        let mut v = vec!["iwarp-bench"];
        v.extend_from_slice(argv);
        let args = Args::try_parse_from(v).map_err(|e| BenchError::usage(e.to_string()))?;
        Plan::resolve(&args, &[0, 1, 2, 3])
    }

    fn refused(argv: &[&str], needle: &str) {
        match plan(argv) {
            Err(e) => {
                let m = e.to_string();
                assert!(
                    m.contains(needle),
                    "{argv:?}: message {m:?} lacks {needle:?}"
                );
            }
            Ok(p) => panic!("{argv:?} was accepted: {p:?}"),
        }
    }

    #[test]
    fn defaults_resolve_to_every_op_and_both_baselines() {
        let p = plan(&[]).unwrap();
        assert_eq!(p.ops, Op::ALL.to_vec());
        assert_eq!(p.baselines, vec![BaselineArg::Tcp, BaselineArg::Shm]);
        assert_eq!(p.sizes, vec![8, 64, 4096, 65536, 1 << 20]);
        assert_eq!(p.stop, Stop::Iterations(DEFAULT_ITERATIONS));
        assert_eq!(p.initiator_cores, vec![Some(0)]);
        assert_eq!(p.responder_cores, vec![Some(1), Some(2), Some(3)]);
        assert_eq!(p.responder_core(4), Some(2));
    }

    #[test]
    fn nonsense_is_refused_with_a_reason() {
        refused(&["--window", "0"], "--window 0");
        refused(&["--window", "100000000"], "deeper");
        refused(&["--ops", "read", "--sizes", "0,8"], "smallest RDMA Read");
        refused(&["--ops", "write", "--sizes", "0"], "write-imm");
        refused(&["--ops", "fetch-add", "--sizes", "64"], "exactly 8 octets");
        refused(
            &["--ops", "cmp-swap", "--sizes", "16,32"],
            "exactly 8 octets",
        );
        refused(&["--threads", "5", "--qps", "8"], "4 core(s)");
        refused(&["--cores", "0,9"], "core 9 does not exist");
        refused(&["--cores", "0,1,2,3,0"], "this machine has 4");
        refused(&["--cores", "1,1"], "named twice");
        refused(&["--daemon-cores", "7"], "core 7");
        refused(&["--ops", "frobnicate"], "frobnicate");
        refused(&["--mode", "open-loop"], "needs --rate");
        refused(&["--rate", "10k"], "open-loop only");
        refused(&["--mode", "open-loop", "--rate", "0"], "more than 0");
        refused(&["--iterations", "0"], "--iterations 0");
        refused(&["--duration", "0s"], "more than 0");
        refused(&["--sizes", "2G"], "larger than");
        refused(&["--sizes", "12x"], "12x");
        refused(&["--qps", "0"], "--qps 0");
        refused(&["--qps", "20000"], "--qps 20000");
        refused(&["--threads", "2"], "at least one QP");
        refused(
            &["--ops", "none", "--baselines", "none"],
            "nothing to measure",
        );
        refused(&["--ops", "none,send"], "do not combine");
        refused(&["--daemons", "running"], "--runtime-dir twice");
        refused(&["--dpdk-vdev", "net_memif"], "--port dpdk");
        refused(
            &["--mtu", "9000", "--daemon-config", "/tmp/x.toml"],
            "port.mtu is theirs",
        );
    }

    #[test]
    fn atomics_run_where_the_list_has_eight_and_sends_may_be_empty() {
        let p = plan(&["--ops", "fetch-add,send", "--sizes", "0,8,64"]).unwrap();
        assert_eq!(p.ops, vec![Op::Send, Op::FetchAdd]);
        assert_eq!(p.sizes, vec![0, 8, 64]);
        let p = plan(&[
            "--ops",
            "none",
            "--baselines",
            "tcp,tcp",
            "--sizes",
            "8..32",
        ])
        .unwrap();
        assert!(p.ops.is_empty());
        assert_eq!(p.baselines, vec![BaselineArg::Tcp]);
        assert_eq!(p.sizes, vec![8, 16, 32]);
    }

    #[test]
    fn cores_split_into_initiators_then_responders() {
        // Ten thousand connections are a run of their own (spawned daemons' limits follow).
        let p = plan(&["--qps", "10000"]).unwrap();
        assert_eq!((p.qps, p.endpoint.qps), (10_000, 10_000));
        let p = plan(&["--threads", "2", "--qps", "4", "--cores", "3,2,1"]).unwrap();
        assert_eq!(p.initiator_cores, vec![Some(3), Some(2)]);
        assert_eq!(p.responder_cores, vec![Some(1)]);
        let p = plan(&["--threads", "2", "--qps", "2", "--cores", "3,2"]).unwrap();
        assert_eq!(p.responder_cores, vec![None]);
        let p = plan(&[
            "--duration",
            "250ms",
            "--mode",
            "open-loop,latency",
            "--rate",
            "5k",
        ])
        .unwrap();
        assert_eq!(p.stop, Stop::Duration(Duration::from_millis(250)));
        assert_eq!(p.rate, Some(5000.0));
        assert_eq!(p.modes, vec![Mode::OpenLoop, Mode::Latency]);
    }
}
