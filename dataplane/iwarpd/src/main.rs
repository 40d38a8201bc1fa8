//! `iwarpd`: the dataplane daemon.
//!
//! Loads the TOML configuration (CLI flags override it) and refuses a bad one with a message
//! naming the key (exit status 2). Runs `cores.workers` poll-mode workers, each pinned to its
//! core of `cores.list`, busy or adaptive polling. Each worker is a whole RNIC for the
//! applications control assigns to it (its own command and upcall rings, doorbell, engine,
//! TCP stack), so nothing on the fast path is shared. One worker opens the configured port
//! (optionally wrapped in a pcap writer) on its own core; several share it through
//! [`iwarpd::port::steer`]. The main thread only watches signals and counters:
//! `<runtime dir>/stats` is rewritten every second (one line per core, `key=value`), SIGUSR1
//! logs the counters at once. SIGINT/SIGTERM stop it cleanly: every connection aborted (RST
//! to the peer, QP to Error), the port closed (the Unix port removes its socket), runtime
//! files removed.
//!
//! Connections and QPs arrive through the control plane (`iwarp-control`) over the command
//! ring; until that is wired the daemon serves the port, ARP and TCP.

use clap::Parser;
use iwarp_abi::daemon_shm::{DaemonShm, DaemonSide, DEFAULT_COMMAND_SLOTS, DEFAULT_UPCALL_SLOTS};
use iwarp_abi::segment::{HugePolicy, Segment};
use iwarp_abi::wake::{DaemonWake, DOORBELL, WORD_LINK};
use iwarp_config::{parse_cidr, parse_mac, Config, PortKind};
use iwarpd::host::service::Host;
use iwarpd::node::{Node, TcpSettings};
use iwarpd::port::pcap::PcapPort;
use iwarpd::port::steer::{SteeredPort, Steering};
use iwarpd::port::tap::TapPort;
use iwarpd::port::unix::UnixPort;
use iwarpd::port::Port;
use iwarpd::worker::{self, CoreCounters, Polling};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

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
    if let Some(v) = &args.port {
        c.port.kind = v.clone();
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
        c.daemon.log_level = v.clone();
    }
    if let Some(v) = &args.cores {
        c.cores.list = v.clone();
    }
    if let Some(v) = args.workers {
        c.cores.workers = v;
    }
    if let Some(v) = &args.polling {
        c.cores.polling = v.clone();
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
    let level = cfg
        .daemon
        .log_level
        .parse::<tracing::Level>()
        .unwrap_or(tracing::Level::INFO);
    // Also bridges smoltcp's `log` records into tracing.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Removes the daemon's runtime files when dropped, whatever way `run` ends, then the
/// directory if nothing else is left in it (it may be a directory the user shares).
struct RuntimeDir(PathBuf);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        for f in [
            "pid",
            iwarp_abi::port_file::PORT_FILE,
            "stats",
            "stats.tmp",
            "daemon.shm",
            WORD_LINK,
            DOORBELL,
        ] {
            let _ = std::fs::remove_file(self.0.join(f));
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn run(cfg: Config) -> Result<(), String> {
    let runtime = cfg.runtime_dir();
    let pid_file = runtime.join("pid");
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        if let Ok(pid) = pid.trim().parse::<i32>() {
            // SAFETY: kill with signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } == 0 {
                return Err(format!(
                    "daemon.runtime_dir {}: daemon {} (pid {pid}) already runs there",
                    runtime.display(),
                    cfg.daemon.name
                ));
            }
        }
    }
    std::fs::create_dir_all(&runtime)
        .map_err(|e| format!("daemon.runtime_dir {}: {e}", runtime.display()))?;
    let _guard = RuntimeDir(runtime.clone());
    std::fs::write(&pid_file, format!("{}\n", std::process::id()))
        .map_err(|e| format!("daemon.runtime_dir {}: {e}", runtime.display()))?;
    // What the port is, for libraries that describe the device without opening it.
    let (ipv4, prefix) = parse_cidr(&cfg.port.ipv4).ok_or("port.ipv4: not an address/prefix")?;
    let port = iwarp_abi::port_file::PortInfo {
        name: cfg.daemon.name.clone(),
        mac: port_mac(&cfg)?,
        ipv4,
        prefix,
        mtu: cfg.port.mtu as u32,
    };
    port.write(&runtime)
        .map_err(|e| format!("daemon.runtime_dir {}: {e}", runtime.display()))?;

    // The doorbells first: control, once it sees the daemon segment, expects them.
    let workers = cfg.workers();
    let bells = DaemonWake::create_workers(
        &format!("iwarp-{}.wake", cfg.daemon.name),
        &runtime,
        workers,
    )
    .map_err(|e| format!("daemon.runtime_dir {}: doorbell: {e}", runtime.display()))?;
    let sides = daemon_segment(&cfg, &runtime, workers)?;
    tracing::info!(
        "daemon segment {} ({}), linked as {}",
        sides[0]
            .path()
            .map_or("?".into(), |p| p.display().to_string()),
        cfg.shm.hugepages,
        runtime.join("daemon.shm").display()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let dump = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&dump))
        .map_err(|e| format!("signal handler: {e}"))?;

    // With several workers the port is shared: opened here, received by worker 0, which
    // steers each frame to the worker that owns its connection; every worker transmits on
    // its own handle.
    let mut shared = match workers {
        1 => None,
        n => Some(shared_port(&cfg, n)?),
    };
    let counters: Vec<Arc<CoreCounters>> = (0..workers)
        .map(|w| Arc::new(CoreCounters::new(cfg.cores.list.get(w).copied())))
        .collect();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::new();
    for ((w, (shm, bell)), counters) in sides.into_iter().zip(bells).enumerate().zip(&counters) {
        let core = cfg.cores.list.get(w).copied();
        let job = Job {
            worker: w,
            core,
            shm,
            bell,
            port: shared.as_mut().map(|s| s.remove(0)),
        };
        let (cfg, stop, counters, ready) = (
            cfg.clone(),
            Arc::clone(&stop),
            Arc::clone(counters),
            ready_tx.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("iwarpd-w{w}"))
            .spawn(move || core_main(&cfg, job, &counters, &stop, ready))
            .map_err(|e| format!("worker thread: {e}"))?;
        threads.push(thread);
    }
    // Each worker opens or takes its port on its own core (its memory local to that core):
    // wait for every verdict (a worker that dies without one drops its sender).
    drop(ready_tx);
    let mut started = Ok(());
    for _ in 0..workers {
        let r = ready_rx
            .recv()
            .unwrap_or_else(|_| Err("worker ended before opening the port".into()));
        if r.is_err() && started.is_ok() {
            started = r;
        }
    }
    if let Err(e) = started {
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        return Err(e);
    }
    tracing::info!(
        "{}: {:?} port {} {}, runtime {}, {} polling, {} worker(s)",
        cfg.daemon.name,
        cfg.port_kind(),
        cfg.port.mac,
        cfg.port.ipv4,
        runtime.display(),
        cfg.cores.polling,
        workers
    );

    let stats = runtime.join("stats");
    let all: Vec<&CoreCounters> = counters.iter().map(|c| &**c).collect();
    let mut last = Instant::now() - Duration::from_secs(1);
    let mut bad_checksums = 0;
    while !stop.load(Ordering::Relaxed) && !threads.iter().any(|t| t.is_finished()) {
        if dump.swap(false, Ordering::Relaxed) {
            for c in &all {
                tracing::info!("SIGUSR1 counters: {}", c.line());
            }
        }
        if last.elapsed() >= Duration::from_secs(1) {
            write_stats(&stats, &all);
            last = Instant::now();
            let now: u64 = all
                .iter()
                .map(|c| c.bad_checksums.load(Ordering::Relaxed))
                .sum();
            if now > bad_checksums {
                tracing::warn!(
                    "dropped {} TCP segment(s) with a wrong checksum in the last second ({now} \
                     in all): a peer behind a veth or a VM's virtio device may leave checksums \
                     to an offload that never happens (`ethtool -K IF tx off` on its interface)",
                    now - bad_checksums
                );
            }
            bad_checksums = now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    tracing::info!("{}: stopping", cfg.daemon.name);
    let mut result = Ok(());
    for t in threads {
        let r = t.join().unwrap_or_else(|_| Err("worker panicked".into()));
        if r.is_err() && result.is_ok() {
            result = r;
        }
    }
    for c in &all {
        tracing::info!("final counters: {}", c.line());
    }
    tracing::info!("{}: stopped, runtime files removed", cfg.daemon.name);
    result
}

/// The configured port's MAC (validated with the configuration, so the error is a backstop).
fn port_mac(cfg: &Config) -> Result<[u8; 6], String> {
    parse_mac(&cfg.port.mac).ok_or_else(|| "port.mac: not a MAC address".into())
}

/// One worker's view of the port its workers share (moved once, to its worker: the size
/// difference costs nothing).
#[allow(clippy::large_enum_variant)]
enum SharedQueue {
    Unix(SteeredPort<UnixPort>),
    Tap(SteeredPort<TapPort>),
    #[cfg(feature = "dpdk")]
    Dpdk(SteeredPort<iwarpd::port::dpdk::DpdkPort>),
}

/// The configured port shared by `workers` workers, one view each, in order.
fn shared_port(cfg: &Config, workers: usize) -> Result<Vec<SharedQueue>, String> {
    let steering = |e: std::io::Error| format!("cores.workers: {e}");
    match cfg.port_kind() {
        PortKind::Unix => {
            // One socket: worker 0 receives and steers, each transmits on its own handle.
            let mac = port_mac(cfg)?;
            let segment =
                |e: std::io::Error| format!("port.segment {}: {e}", cfg.port.segment.display());
            let port = UnixPort::open(&cfg.port.segment, mac, cfg.port.mtu).map_err(segment)?;
            let mut queues = Vec::with_capacity(workers);
            for _ in 1..workers {
                queues.push(port.sender().map_err(segment)?);
            }
            queues.insert(0, port);
            let views = Steering::share(queues, false).map_err(steering)?;
            Ok(views.into_iter().map(SharedQueue::Unix).collect())
        }
        #[cfg(feature = "dpdk")]
        PortKind::Dpdk => {
            // A queue pair per worker: each receives its own queue and steers.
            let queues = dpdk_queues(cfg, workers as u16)?;
            let views = Steering::share(queues, true).map_err(steering)?;
            Ok(views.into_iter().map(SharedQueue::Dpdk).collect())
        }
        #[cfg(not(feature = "dpdk"))]
        PortKind::Dpdk => serve_dpdk_unsupported(),
        PortKind::Tap => {
            // A queue per worker of a multi-queue TAP interface: each receives its own.
            let mac = port_mac(cfg)?;
            let queues = TapPort::open_queues(&cfg.port.tap_name, mac, cfg.port.mtu, workers)
                .map_err(|e| {
                    format!(
                        "port.tap_name {}: {e} (TAP needs root; several workers need a \
                         multi-queue interface)",
                        cfg.port.tap_name
                    )
                })?;
            let views = Steering::share(queues, true).map_err(steering)?;
            Ok(views.into_iter().map(SharedQueue::Tap).collect())
        }
    }
}

/// Creates the daemon segment (ARCH.md step 1) as `shm.hugepages` says, linked as
/// `<runtime>/daemon.shm`. A segment of the same name left by a daemon that died (its
/// creator pid gone) is removed first; one whose creator lives is refused.
fn daemon_segment(cfg: &Config, runtime: &Path, workers: usize) -> Result<Vec<DaemonSide>, String> {
    let name = format!("iwarp-{}.daemon", cfg.daemon.name);
    match Segment::reclaim(&name) {
        Err(e) => return Err(format!("daemon.name {}: {e}", cfg.daemon.name)),
        Ok(Some((stale, pid))) => tracing::warn!(
            "removing stale segment {} (pid {pid} is gone)",
            stale.display()
        ),
        Ok(None) => {}
    }
    let policy = match cfg.shm.hugepages.as_str() {
        "on" => HugePolicy::Required,
        "off" => HugePolicy::Off,
        _ => HugePolicy::Auto,
    };
    DaemonShm::create_workers(
        &name,
        Some(&runtime.join("daemon.shm")),
        workers,
        DEFAULT_COMMAND_SLOTS,
        DEFAULT_UPCALL_SLOTS,
        policy,
    )
    .map_err(|e| {
        format!(
            "shm.hugepages {}: daemon segment {name}: {e}",
            cfg.shm.hugepages
        )
    })
}

/// Writes the stats file atomically (a reader never sees half of it): one line per core,
/// then the process's memory as the kernel counts it (`/proc/self/status`, KiB): resident in
/// all, of it anonymous (heap, stacks) and shared (rings and registered segments in
/// /dev/shm), and hugetlb pages mapped (hugepage segments, DPDK's mempool), which resident
/// memory leaves out.
fn write_stats(path: &Path, cores: &[&CoreCounters]) {
    let mut text = String::new();
    for c in cores {
        text.push_str(&c.line());
        text.push('\n');
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        text.push_str(&format!(
            "process pid={} rss_kib={} rss_anon_kib={} rss_shmem_kib={} hugetlb_kib={}\n",
            std::process::id(),
            kib("VmRSS:"),
            kib("RssAnon:"),
            kib("RssShmem:"),
            kib("HugetlbPages:"),
        ));
    }
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// What one worker thread is given: its index, its core, its rings and doorbell, and its
/// view of a shared port (`None`: it opens the configured port itself, alone).
struct Job {
    worker: usize,
    core: Option<usize>,
    shm: DaemonSide,
    bell: DaemonWake,
    port: Option<SharedQueue>,
}

/// The worker thread: pin, open (or take) the port, run the node until stopped.
fn core_main(
    cfg: &Config,
    job: Job,
    counters: &CoreCounters,
    stop: &AtomicBool,
    ready: mpsc::Sender<Result<(), String>>,
) -> Result<(), String> {
    let w = job.worker;
    if let Some(c) = job.core {
        if worker::pin(job.core) {
            tracing::info!("poll-mode worker {w} pinned to core {c}");
        } else {
            tracing::warn!(
                "poll-mode worker {w} could not be pinned to core {c}; running unpinned"
            );
        }
    }
    let opened = open_and_run(cfg, job, counters, stop, &ready);
    if let Err(e) = &opened {
        // Tell main if it still waits; otherwise main reads the error from join.
        let _ = ready.send(Err(e.clone()));
    }
    opened
}

fn open_and_run(
    cfg: &Config,
    job: Job,
    counters: &CoreCounters,
    stop: &AtomicBool,
    ready: &mpsc::Sender<Result<(), String>>,
) -> Result<(), String> {
    let mac = port_mac(cfg)?;
    let (ip, prefix) = parse_cidr(&cfg.port.ipv4).ok_or("port.ipv4: not an address/prefix")?;
    let ctx = Ctx {
        cfg,
        worker: job.worker,
        ip,
        prefix,
        counters,
        stop,
        ready,
        shm: std::cell::Cell::new(Some(job.shm)),
        bell: std::cell::Cell::new(Some(job.bell)),
    };
    match job.port {
        Some(SharedQueue::Unix(p)) => return ctx.serve(p),
        Some(SharedQueue::Tap(p)) => return ctx.serve(p),
        #[cfg(feature = "dpdk")]
        Some(SharedQueue::Dpdk(p)) => return ctx.serve(p),
        None => {}
    }
    match cfg.port_kind() {
        PortKind::Unix => {
            let p = UnixPort::open(&cfg.port.segment, mac, cfg.port.mtu)
                .map_err(|e| format!("port.segment {}: {e}", cfg.port.segment.display()))?;
            ctx.serve(p)
        }
        PortKind::Tap => {
            let p = TapPort::open(&cfg.port.tap_name, mac, cfg.port.mtu).map_err(|e| {
                format!("port.tap_name {}: {e} (TAP needs root)", cfg.port.tap_name)
            })?;
            ctx.serve(p)
        }
        PortKind::Dpdk => serve_dpdk(&ctx),
    }
}

struct Ctx<'a> {
    cfg: &'a Config,
    worker: usize,
    ip: Ipv4Addr,
    prefix: u8,
    counters: &'a CoreCounters,
    stop: &'a AtomicBool,
    ready: &'a mpsc::Sender<Result<(), String>>,
    /// This worker's rings in the daemon segment (commands, upcalls, heartbeat).
    shm: std::cell::Cell<Option<DaemonSide>>,
    /// What applications and control ring when the core sleeps.
    bell: std::cell::Cell<Option<DaemonWake>>,
}

/// Worker `w`'s pcap file: the configured one for worker 0, `<stem>-w<w>.<ext>` for the
/// others (each records the frames its own stack sends and receives).
fn pcap_path(file: &Path, w: usize) -> PathBuf {
    if w == 0 {
        return file.to_path_buf();
    }
    let stem = file
        .file_stem()
        .map_or("iwarpd".into(), |s| s.to_string_lossy());
    let name = match file.extension() {
        Some(ext) => format!("{stem}-w{w}.{}", ext.to_string_lossy()),
        None => format!("{stem}-w{w}"),
    };
    file.with_file_name(name)
}

impl Ctx<'_> {
    fn serve<P: Port>(&self, port: P) -> Result<(), String> {
        match &self.cfg.pcap.file {
            Some(pcap) => {
                let pcap = pcap_path(pcap, self.worker);
                let p = PcapPort::new(port, &pcap)
                    .map_err(|e| format!("pcap.file {}: {e}", pcap.display()))?;
                tracing::info!(
                    "worker {}: writing every frame to {}",
                    self.worker,
                    pcap.display()
                );
                self.poll(p)
            }
            None => self.poll(port),
        }
    }

    fn poll<P: Port>(&self, port: P) -> Result<(), String> {
        let cfg = self.cfg;
        let tcp = TcpSettings {
            rx_buffer: cfg.tcp.rx_buffer,
            tx_buffer: cfg.tcp.tx_buffer,
            min_rto_us: cfg.tcp.min_rto_us,
            mss: cfg.mss(),
            max_inflight: cfg.max_inflight(),
            user_timeout: Duration::from_millis(cfg.tcp.user_timeout_ms),
            ack_delay: Duration::from_micros(cfg.tcp.ack_delay_us),
        };
        let mut node = Node::new(port, self.ip, self.prefix, tcp);
        node.set_worker(self.worker);
        let polling = if cfg.cores.polling == "busy" {
            Polling::Busy
        } else {
            Polling::Adaptive {
                idle_spins: cfg.cores.idle_spins,
                max_sleep: Duration::from_micros(cfg.cores.max_idle_sleep_us),
            }
        };
        let _ = self.ready.send(Ok(()));
        // The command ring and the applications' rings are served on this core between port
        // bursts (one owner, no locks); each turn bumps the heartbeat control watches.
        let mut host = Host::new(self.shm.take().ok_or("daemon segment taken")?, cfg.mss())
            .with_doorbell(self.bell.take().ok_or("doorbell taken")?);
        node.set_stage_timing(cfg.cores.stage_timing);
        host.set_stage_timing(cfg.cores.stage_timing);
        worker::run_with(&mut node, polling, self.counters, self.stop, host);
        Ok(())
    }
}

#[cfg(feature = "dpdk")]
fn serve_dpdk(ctx: &Ctx<'_>) -> Result<(), String> {
    let mut queues = dpdk_queues(ctx.cfg, 1)?;
    ctx.serve(queues.pop().ok_or("DPDK port: no queue")?)
}

/// Starts EAL and opens the configured DPDK device with `queues` queue pairs.
#[cfg(feature = "dpdk")]
fn dpdk_queues(cfg: &Config, queues: u16) -> Result<Vec<iwarpd::port::dpdk::DpdkPort>, String> {
    use iwarpd::port::dpdk::{eal_init, DpdkPort};
    eal_init(&cfg.port.eal_args).map_err(|e| format!("port.eal_args: {e}"))?;
    match dpdk_device(&cfg.port.eal_args) {
        Some(name) => DpdkPort::open_queues(&name, cfg.port.mtu, queues, cfg.port.checksum_offload)
            .map_err(|e| format!("DPDK port {name}: {e}")),
        // No device named: the port EAL probed with id `port.dpdk_port_id` (0: the first).
        None => DpdkPort::open_id_queues(
            cfg.port.dpdk_port_id,
            cfg.port.mtu,
            queues,
            Duration::from_secs(5),
            cfg.port.checksum_offload,
        )
        .map_err(|e| {
            format!(
                "DPDK port {} (port.dpdk_port_id; no --vdev or -a in port.eal_args): {e}",
                cfg.port.dpdk_port_id
            )
        }),
    }
}

/// The DPDK device the EAL arguments name: a virtual device (`--vdev=net_memif0,...`) or an
/// allowed PCI device (`-a 0000:01:00.0` or `--allow=...`; DPDK names a PCI port by its
/// address).
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
fn dpdk_device(args: &[String]) -> Option<String> {
    let first = |v: &str| v.split(',').next().unwrap_or("").to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--vdev=") {
            return Some(first(v));
        }
        if let Some(v) = a.strip_prefix("--allow=").or_else(|| a.strip_prefix("-a=")) {
            return Some(first(v));
        }
        if a == "-a" || a == "--allow" || a == "--vdev" {
            return it.next().map(|v| first(v));
        }
    }
    None
}

#[cfg(not(feature = "dpdk"))]
fn serve_dpdk(_: &Ctx<'_>) -> Result<(), String> {
    serve_dpdk_unsupported()
}

#[cfg(not(feature = "dpdk"))]
fn serve_dpdk_unsupported<T>() -> Result<T, String> {
    Err("port.kind: \"dpdk\" needs iwarpd built with the `dpdk` feature (cargo build --features iwarpd/dpdk)".into())
}

#[cfg(test)]
mod tests {
    use super::dpdk_device;

    #[test]
    fn the_dpdk_device_is_named_by_vdev_or_allow() {
        let v = |a: &[&str]| dpdk_device(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            v(&["-l", "1", "--vdev=net_memif0,role=server"]).as_deref(),
            Some("net_memif0")
        );
        assert_eq!(
            v(&["-a", "0000:01:00.0,rxq=1"]).as_deref(),
            Some("0000:01:00.0")
        );
        assert_eq!(
            v(&["--allow=0000:3b:00.1"]).as_deref(),
            Some("0000:3b:00.1")
        );
        assert_eq!(v(&["-l", "1", "--in-memory"]), None);
    }
}
