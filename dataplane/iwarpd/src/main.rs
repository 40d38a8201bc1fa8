//! `iwarpd`: the dataplane daemon.
//!
//! Loads the TOML configuration (CLI flags override it), opens the configured port, and runs
//! the RNIC node on a poll-mode worker pinned to the configured core, busy or adaptive
//! polling. Counters are written to `<runtime dir>/stats` every second and on SIGUSR1.
//! SIGINT/SIGTERM stop it cleanly: connections aborted, runtime files removed.
//!
//! Today the node serves the port, ARP and TCP; RDMA connections and QPs arrive through the
//! control plane (`iwarp-control`, not built yet).

use clap::Parser;
use iwarp_config::{parse_cidr, parse_mac, Config, PortKind};
use iwarpd::node::{Node, TcpSettings};
use iwarpd::port::pcap::PcapPort;
use iwarpd::port::tap::TapPort;
use iwarpd::port::unix::UnixPort;
use iwarpd::port::Port;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    /// IPv4 address with prefix (port.ipv4).
    #[arg(long)]
    ip: Option<String>,
    /// Directory of the embedded Unix-socket Ethernet segment (port.segment).
    #[arg(long)]
    segment: Option<PathBuf>,
    /// Write every frame to this pcap file (pcap.file).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Runtime directory (daemon.runtime_dir).
    #[arg(long)]
    runtime_dir: Option<PathBuf>,
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
    if let Some(v) = &args.pcap {
        c.pcap.file = Some(v.clone());
    }
    if let Some(v) = &args.runtime_dir {
        c.daemon.runtime_dir = Some(v.clone());
    }
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
    env_logger::Builder::new()
        .parse_filters(&cfg.daemon.log_level)
        .format_timestamp_micros()
        .init();
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cfg: Config) -> Result<(), String> {
    let runtime = cfg.runtime_dir();
    std::fs::create_dir_all(&runtime)
        .map_err(|e| format!("runtime dir {}: {e}", runtime.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let dump = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&dump))
        .map_err(|e| format!("signal handler: {e}"))?;

    let mac = parse_mac(&cfg.port.mac).ok_or("port.mac")?;
    let (ip, prefix) = parse_cidr(&cfg.port.ipv4).ok_or("port.ipv4")?;
    log::info!(
        "{}: {:?} port, {} {}/{}, runtime {}",
        cfg.daemon.name,
        cfg.port_kind(),
        cfg.port.mac,
        ip,
        prefix,
        runtime.display()
    );
    let result = match cfg.port_kind() {
        PortKind::Unix => {
            let p = UnixPort::open(&cfg.port.segment, mac, cfg.port.mtu)
                .map_err(|e| format!("port.segment {}: {e}", cfg.port.segment.display()))?;
            serve(&cfg, p, ip, prefix, &stop, &dump)
        }
        PortKind::Tap => {
            let p = TapPort::open(&cfg.port.tap_name, mac, cfg.port.mtu).map_err(|e| {
                format!("port.tap_name {}: {e} (TAP needs root)", cfg.port.tap_name)
            })?;
            serve(&cfg, p, ip, prefix, &stop, &dump)
        }
        PortKind::Dpdk => serve_dpdk(&cfg, ip, prefix, &stop, &dump),
    };
    let _ = std::fs::remove_dir_all(&runtime);
    log::info!("{}: stopped, runtime files removed", cfg.daemon.name);
    result
}

#[cfg(feature = "dpdk")]
fn serve_dpdk(
    cfg: &Config,
    ip: std::net::Ipv4Addr,
    prefix: u8,
    stop: &AtomicBool,
    dump: &AtomicBool,
) -> Result<(), String> {
    use iwarpd::port::dpdk::{eal_init, DpdkPort};
    eal_init(&cfg.port.eal_args).map_err(|e| format!("port.eal_args: {e}"))?;
    let name = cfg.port.eal_args.iter().find_map(|a| {
        a.strip_prefix("--vdev=")
            .map(|v| v.split(',').next().unwrap_or("").to_string())
    });
    let name =
        name.ok_or("port.eal_args: name the device with --vdev=NAME,... (PCI devices: not yet)")?;
    let p = DpdkPort::open(&name, cfg.port.mtu).map_err(|e| format!("DPDK port {name}: {e}"))?;
    serve(cfg, p, ip, prefix, stop, dump)
}

#[cfg(not(feature = "dpdk"))]
fn serve_dpdk(
    _: &Config,
    _: std::net::Ipv4Addr,
    _: u8,
    _: &AtomicBool,
    _: &AtomicBool,
) -> Result<(), String> {
    Err("port.kind: \"dpdk\" needs iwarpd built with the `dpdk` feature (cargo build --features iwarpd/dpdk)".into())
}

fn serve<P: Port>(
    cfg: &Config,
    port: P,
    ip: std::net::Ipv4Addr,
    prefix: u8,
    stop: &AtomicBool,
    dump: &AtomicBool,
) -> Result<(), String> {
    if let Some(pcap) = &cfg.pcap.file {
        let p =
            PcapPort::new(port, pcap).map_err(|e| format!("pcap.file {}: {e}", pcap.display()))?;
        return poll_loop(cfg, p, ip, prefix, stop, dump);
    }
    poll_loop(cfg, port, ip, prefix, stop, dump)
}

/// The poll-mode core: pinned, busy or adaptive, until told to stop.
fn poll_loop<P: Port>(
    cfg: &Config,
    port: P,
    ip: std::net::Ipv4Addr,
    prefix: u8,
    stop: &AtomicBool,
    dump: &AtomicBool,
) -> Result<(), String> {
    if let Some(&core) = cfg.cores.list.first() {
        let pinned = core_affinity::set_for_current(core_affinity::CoreId { id: core });
        log::info!("poll-mode core {core}: pinned {pinned}");
    }
    let tcp = TcpSettings {
        rx_buffer: cfg.tcp.rx_buffer,
        tx_buffer: cfg.tcp.tx_buffer,
        min_rto_us: cfg.tcp.min_rto_us,
        mss: cfg.tcp.mss,
        ..TcpSettings::default()
    };
    let mut node = Node::new(port, ip, prefix, tcp);
    let busy = cfg.cores.polling == "busy";
    let max_sleep = Duration::from_micros(cfg.cores.max_idle_sleep_us);
    let stats = cfg.runtime_dir().join("stats");
    let mut idle = Duration::ZERO;
    let mut last_stats = Instant::now() - Duration::from_secs(1);
    while !stop.load(Ordering::Relaxed) {
        let worked = node.poll();
        if dump.swap(false, Ordering::Relaxed) || last_stats.elapsed() >= Duration::from_secs(1) {
            let c = node.counters();
            let text = format!(
                "core {}\nrx_frames {}\ntx_frames {}\nrx_bytes {}\ntx_bytes {}\nfpdus_tx {}\nstream_bytes_rx {}\n",
                cfg.cores.list.first().map_or("-".to_string(), |c| c.to_string()),
                c.rx_frames, c.tx_frames, c.rx_bytes, c.tx_bytes, c.fpdus_tx, c.stream_bytes_rx
            );
            let _ = std::fs::write(&stats, text);
            last_stats = Instant::now();
        }
        if busy || worked {
            idle = Duration::ZERO;
            continue;
        }
        // Adaptive: back off exponentially while idle, never past what smoltcp's timers allow.
        idle = (idle * 2).clamp(Duration::from_micros(1), max_sleep);
        let sleep = node.poll_delay().map_or(idle, |d| d.min(idle));
        std::thread::sleep(sleep);
    }
    Ok(())
}
