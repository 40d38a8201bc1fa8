//! Opening the configured port (`port.kind`) for the daemon's workers: alone, for one
//! worker, or shared among several through [`steer`](super::steer).

use super::steer::{SteeredPort, Steering};
use super::tap::TapPort;
use super::unix::UnixPort;
use iwarp_config::{parse_mac, Config, PortKind};
#[cfg(feature = "dpdk")]
use std::time::Duration;

/// The port one worker serves: the configured port opened for it alone, or its view of a
/// port several workers share (moved once, to its worker: the size difference costs
/// nothing).
#[allow(clippy::large_enum_variant)]
pub enum WorkerPort {
    Unix(UnixPort),
    Tap(TapPort),
    #[cfg(feature = "dpdk")]
    Dpdk(super::dpdk::DpdkPort),
    SharedUnix(SteeredPort<UnixPort>),
    SharedTap(SteeredPort<TapPort>),
    #[cfg(feature = "dpdk")]
    SharedDpdk(SteeredPort<super::dpdk::DpdkPort>),
}

/// The configured port's MAC (validated with the configuration, so the error is a backstop).
pub(crate) fn port_mac(cfg: &Config) -> Result<[u8; 6], String> {
    parse_mac(&cfg.port.mac).ok_or_else(|| "port.mac: not a MAC address".into())
}

/// Opens the configured port for one worker alone. The error names the configuration key.
pub fn open(cfg: &Config) -> Result<WorkerPort, String> {
    let mac = port_mac(cfg)?;
    match cfg.port.kind {
        PortKind::Unix => UnixPort::open(&cfg.port.segment, mac, cfg.port.mtu)
            .map(WorkerPort::Unix)
            .map_err(|e| format!("port.segment {}: {e}", cfg.port.segment.display())),
        PortKind::Tap => TapPort::open(&cfg.port.tap_name, mac, cfg.port.mtu)
            .map(WorkerPort::Tap)
            .map_err(|e| format!("port.tap_name {}: {e} (TAP needs root)", cfg.port.tap_name)),
        #[cfg(feature = "dpdk")]
        PortKind::Dpdk => {
            let mut queues = dpdk_queues(cfg, 1)?;
            queues
                .pop()
                .map(WorkerPort::Dpdk)
                .ok_or_else(|| "DPDK port: no queue".into())
        }
        #[cfg(not(feature = "dpdk"))]
        PortKind::Dpdk => dpdk_unsupported(),
    }
}

/// The configured port shared by `workers` workers, one view each, in order.
pub fn open_shared(cfg: &Config, workers: usize) -> Result<Vec<WorkerPort>, String> {
    let steering = |e: std::io::Error| format!("cores.workers: {e}");
    match cfg.port.kind {
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
            Ok(views.into_iter().map(WorkerPort::SharedUnix).collect())
        }
        #[cfg(feature = "dpdk")]
        PortKind::Dpdk => {
            // A queue pair per worker: each receives its own queue and steers.
            let queues = dpdk_queues(cfg, workers as u16)?;
            let views = Steering::share(queues, true).map_err(steering)?;
            Ok(views.into_iter().map(WorkerPort::SharedDpdk).collect())
        }
        #[cfg(not(feature = "dpdk"))]
        PortKind::Dpdk => dpdk_unsupported(),
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
            Ok(views.into_iter().map(WorkerPort::SharedTap).collect())
        }
    }
}

/// Starts EAL and opens the configured DPDK device with `queues` queue pairs.
#[cfg(feature = "dpdk")]
fn dpdk_queues(cfg: &Config, queues: u16) -> Result<Vec<super::dpdk::DpdkPort>, String> {
    use super::dpdk::{eal_init, DpdkPort};
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
fn dpdk_unsupported<T>() -> Result<T, String> {
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
