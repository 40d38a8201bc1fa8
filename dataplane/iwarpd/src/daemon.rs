//! The daemon: its runtime directory, the daemon segment and doorbells control attaches to,
//! one poll-mode worker thread per configured worker (each a whole RNIC on its own core),
//! and the main thread's watch over signals and counters until SIGINT or SIGTERM.

use crate::host::service::Host;
use crate::node::{Node, TcpSettings};
use crate::port::open::{self, WorkerPort};
use crate::port::pcap::PcapPort;
use crate::port::Port;
use crate::stats::StatsFile;
use crate::worker::{self, CoreCounters, Polling};
use iwarp_abi::daemon_shm::{DaemonShm, DaemonSide, DEFAULT_COMMAND_SLOTS, DEFAULT_UPCALL_SLOTS};
use iwarp_abi::segment::{HugePolicy, Segment};
use iwarp_abi::wake::{DaemonWake, DOORBELL, WORD_LINK};
use iwarp_config::{parse_cidr, Config, Hugepages};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

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

/// Runs the daemon the configuration describes until SIGINT or SIGTERM (or a worker ends);
/// the error names the configuration key at fault where there is one.
pub fn run(cfg: Config) -> Result<(), String> {
    // First: once the daemon segment appears, control may start and anyone may stop us, and
    // SIGTERM must then stop the daemon cleanly (runtime files removed), not kill it.
    let stop = Arc::new(AtomicBool::new(false));
    let dump = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&dump))
        .map_err(|e| format!("signal handler: {e}"))?;

    let runtime = cfg.runtime_dir();
    let pid_file = runtime.join("pid");
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        if let Ok(pid) = pid.trim().parse::<u32>() {
            if iwarp_abi::process::runs(pid) {
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
        mac: crate::port::open::port_mac(&cfg)?,
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

    let counters: Vec<Arc<CoreCounters>> = (0..workers)
        .map(|w| Arc::new(CoreCounters::new(cfg.cores.list.get(w).copied())))
        .collect();
    let threads = start_workers(&cfg, sides, bells, &counters, &stop)?;
    tracing::info!(
        "{}: {:?} port {} {}, runtime {}, {} polling, {} worker(s)",
        cfg.daemon.name,
        cfg.port.kind,
        cfg.port.mac,
        cfg.port.ipv4,
        runtime.display(),
        cfg.cores.polling,
        workers
    );

    let all: Vec<&CoreCounters> = counters.iter().map(|c| &**c).collect();
    let mut stats = StatsFile::new(runtime.join("stats"));
    while !stop.load(Ordering::Relaxed) && !threads.iter().any(|t| t.is_finished()) {
        if dump.swap(false, Ordering::Relaxed) {
            for line in crate::stats::dump_lines(&all) {
                tracing::info!("SIGUSR1 {line}");
            }
        }
        stats.tick(&all);
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

type Worker = std::thread::JoinHandle<Result<(), String>>;

/// Starts a thread per worker, each with its rings, doorbell and counters, and waits until
/// every one has its port; on an error, stops those started and returns the first.
fn start_workers(
    cfg: &Config,
    sides: Vec<DaemonSide>,
    bells: Vec<DaemonWake>,
    counters: &[Arc<CoreCounters>],
    stop: &Arc<AtomicBool>,
) -> Result<Vec<Worker>, String> {
    let workers = sides.len();
    // With several workers the port is shared: opened here, received by worker 0, which
    // steers each frame to the worker that owns its connection; every worker transmits on
    // its own handle.
    let mut shared = match workers {
        1 => None,
        n => Some(open::open_shared(cfg, n)?),
    };
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::new();
    for ((w, (shm, bell)), counters) in sides.into_iter().zip(bells).enumerate().zip(counters) {
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
            Arc::clone(stop),
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
    Ok(threads)
}

/// Creates the daemon segment as `shm.hugepages` says, linked as
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
    let policy = match cfg.shm.hugepages {
        Hugepages::On => HugePolicy::Required,
        Hugepages::Off => HugePolicy::Off,
        Hugepages::Auto => HugePolicy::Auto,
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

/// What one worker thread is given: its index, its core, its rings and doorbell, and its
/// view of a shared port (`None`: it opens the configured port itself, alone).
struct Job {
    worker: usize,
    core: Option<usize>,
    shm: DaemonSide,
    bell: DaemonWake,
    port: Option<WorkerPort>,
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
    let port = match job.port {
        Some(p) => p,
        None => open::open(cfg)?,
    };
    match port {
        WorkerPort::Unix(p) => ctx.serve(p),
        WorkerPort::Tap(p) => ctx.serve(p),
        #[cfg(feature = "dpdk")]
        WorkerPort::Dpdk(p) => ctx.serve(p),
        WorkerPort::SharedUnix(p) => ctx.serve(p),
        WorkerPort::SharedTap(p) => ctx.serve(p),
        #[cfg(feature = "dpdk")]
        WorkerPort::SharedDpdk(p) => ctx.serve(p),
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
        let mut node = Node::new(port, self.ip, self.prefix, TcpSettings::from_config(cfg));
        node.set_worker(self.worker);
        let polling = match cfg.cores.polling {
            iwarp_config::Polling::Busy => Polling::Busy,
            iwarp_config::Polling::Adaptive => Polling::Adaptive {
                idle_spins: cfg.cores.idle_spins,
                max_sleep: Duration::from_micros(cfg.cores.max_idle_sleep_us),
            },
        };
        let _ = self.ready.send(Ok(()));
        // The command ring and the applications' rings are served on this core between port
        // bursts (one owner, no locks); each turn bumps the heartbeat control watches.
        let mut host = Host::new(self.shm.take().ok_or("daemon segment taken")?, cfg.mss())
            .with_doorbell(self.bell.take().ok_or("doorbell taken")?);
        node.set_stage_timing(cfg.cores.stage_timing);
        host.set_stage_timing(cfg.cores.stage_timing);
        let mut rnic = iwarp_engine::Rnic::new();
        worker::run_with(
            &mut node,
            &mut rnic,
            polling,
            self.counters,
            self.stop,
            host,
        );
        Ok(())
    }
}
