//! The two iWARP endpoints a verbs measurement needs, each an `iwarpd` + `iwarp-control` pair
//! with its own runtime directory: started for the run (and stopped after, whatever happens),
//! or running ones named by their runtime directories.
//!
//! Spawned endpoints share one embedded Ethernet segment (the `unix` port: no privileges) in a
//! fresh directory, or get a DPDK virtual device each (`--port dpdk --dpdk-vdev net_memif`:
//! a memif server and client on one socket). Endpoint `a` is 10.77.0.1, `b` is 10.77.0.2.
//! Each daemon's output goes to `<base>/<name>.log`; a daemon that fails to start is reported
//! with the end of its log.

use crate::cli::{DaemonsArg, EndpointPlan, HugepagesArg, PortArg};
use crate::error::{BenchError, Result};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a daemon may take to show its runtime files.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a daemon may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

fn err(m: impl Into<String>) -> BenchError {
    BenchError::Daemon(m.into())
}

/// One endpoint: where applications reach it and, if spawned here, its processes.
#[derive(Debug)]
pub struct Endpoint {
    pub name: String,
    pub runtime_dir: PathBuf,
    pub ip: Ipv4Addr,
    iwarpd: Option<Child>,
    control: Option<Child>,
}

impl Endpoint {
    /// `R/control.sock`, where applications connect.
    pub fn control_socket(&self) -> PathBuf {
        self.runtime_dir.join("control.sock")
    }
}

/// The two endpoints of a run.
#[derive(Debug)]
pub struct Endpoints {
    pub a: Endpoint,
    pub b: Endpoint,
    /// The directory created for spawned endpoints (removed at stop).
    base: Option<PathBuf>,
}

/// Finds an executable: the flag, then `$<ENV>`, then next to this executable (or one level up,
/// where a test binary in `target/*/deps` finds `target/*/`), then `$PATH`.
pub fn find_exe(flag: Option<&Path>, env: &str, name: &str) -> Result<PathBuf> {
    if let Some(p) = flag {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(err(format!("{}: no such executable", p.display())))
        };
    }
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(err(format!("${env} = {}: no such executable", p.display())))
        };
    }
    let mut places = Vec::new();
    if let Ok(me) = std::env::current_exe() {
        if let Some(dir) = me.parent() {
            places.push(dir.join(name));
            if let Some(up) = dir.parent() {
                places.push(up.join(name));
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        places.extend(std::env::split_paths(&path).map(|d| d.join(name)));
    }
    places.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        err(format!(
            "{name} not found next to this executable or on $PATH: build it \
             (cargo build --release -p {}) or name it with --{name} or ${env}",
            if name == "iwarpd" {
                "iwarpd"
            } else {
                "iwarp-control"
            }
        ))
    })
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(8);
    lines[start..].join("\n")
}

/// Waits for `file` to appear while `child` lives.
fn wait_for(file: &Path, child: &mut Child, what: &str, log: &Path) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !file.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(err(format!(
                "{what} exited ({st}) before creating {}; its log {}:\n{}",
                file.display(),
                log.display(),
                tail(log)
            )));
        }
        if Instant::now() > deadline {
            return Err(err(format!(
                "{what} did not create {} within {} s; its log {}:\n{}",
                file.display(),
                START_TIMEOUT.as_secs(),
                log.display(),
                tail(log)
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]; says whether it exited cleanly.
fn stop_child(c: &mut Child) -> bool {
    if let Ok(Some(st)) = c.try_wait() {
        return st.success();
    }
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        match c.try_wait() {
            Ok(Some(st)) => return st.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return false;
            }
        }
    }
}

/// The TOML configuration of a spawned endpoint (`idx` 0 is `a`, 1 is `b`).
fn config_text(plan: &EndpointPlan, base: &Path, idx: usize, name: &str) -> String {
    let ip = Ipv4Addr::new(10, 77, 0, idx as u8 + 1);
    let mut t = String::new();
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    let _ = writeln!(t, "[daemon]");
    let _ = writeln!(t, "name = {name:?}");
    let _ = writeln!(t, "runtime_dir = {}", q(&base.join(name)));
    let _ = writeln!(t, "log_level = \"warn\"");
    let _ = writeln!(t, "\n[port]");
    let kind = match plan.port {
        PortArg::Unix => "unix",
        PortArg::Dpdk => "dpdk",
        PortArg::Tap => "tap",
    };
    let _ = writeln!(t, "kind = \"{kind}\"");
    let _ = writeln!(t, "mac = \"02:00:00:00:be:{:02x}\"", idx + 1);
    let _ = writeln!(t, "ipv4 = \"{ip}/24\"");
    let _ = writeln!(t, "mtu = {}", plan.mtu);
    let _ = writeln!(t, "segment = {}", q(&base.join("segment")));
    let _ = writeln!(t, "tap_name = \"iwb{}{idx}\"", std::process::id() % 10000);
    if plan.port == PortArg::Dpdk {
        let vdev = plan.dpdk_vdev.as_deref().unwrap_or("net_memif");
        let role = if idx == 0 { "server" } else { "client" };
        let sock = base.join("memif.sock");
        let dev = if vdev.starts_with("net_memif") {
            // A memif buffer per frame (memif's default is 2048 octets).
            let bsize = (usize::from(plan.mtu) + 14).max(2048);
            format!(
                "--vdev=net_memif{idx},role={role},socket={},id=0,bsize={bsize}",
                sock.display()
            )
        } else {
            format!("--vdev={vdev}{idx}")
        };
        let mut args = vec![
            "--no-pci".to_string(),
            "--no-telemetry".to_string(),
            "--log-level=3".to_string(),
            format!("--file-prefix={name}"),
            dev,
        ];
        // EAL without hugepages where there are too few for both daemons' mbuf pools
        // (jumbo frames: about 40 MiB a worker), as on a machine set up without any.
        let no_huge = match plan.hugepages {
            HugepagesArg::Off => true,
            HugepagesArg::On => false,
            HugepagesArg::Auto => iwarp_abi::segment::free_hugepages() < 128,
        };
        if no_huge {
            // DPDK 22.11 refuses --in-memory beside --no-huge; --no-shconf keeps the run
            // from leaving a configuration in /var/run/dpdk all the same.
            args.push("--no-huge".into());
            args.push("--no-shconf".into());
            args.push("-m".into());
            args.push("512".into());
        } else {
            args.push("--in-memory".into());
        }
        let list: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
        let _ = writeln!(t, "eal_args = [{}]", list.join(", "));
    }
    let _ = writeln!(t, "\n[cores]");
    let workers = plan.daemon_workers.max(1);
    let _ = writeln!(t, "workers = {workers}");
    let cores: Vec<String> = plan
        .daemon_cores
        .iter()
        .skip(idx * workers)
        .take(workers)
        .map(|c| c.to_string())
        .collect();
    if cores.is_empty() {
        let _ = writeln!(t, "polling = \"adaptive\"");
    } else {
        let _ = writeln!(t, "list = [{}]", cores.join(", "));
        // Cores of their own: poll without pause, as a NIC would.
        let _ = writeln!(t, "polling = \"busy\"");
    }
    if plan.stage_timing {
        let _ = writeln!(t, "stage_timing = true");
    }
    if plan.tcp_user_timeout_ms.is_some() || plan.tcp_worker_inflight.is_some() {
        let _ = writeln!(t, "\n[tcp]");
    }
    if let Some(ms) = plan.tcp_user_timeout_ms {
        let _ = writeln!(t, "user_timeout_ms = {ms}");
    }
    if let Some(octets) = plan.tcp_worker_inflight {
        let _ = writeln!(t, "worker_inflight = {octets}");
    }
    let _ = writeln!(t, "\n[shm]");
    let huge = match plan.hugepages {
        HugepagesArg::Auto => "auto",
        HugepagesArg::On => "on",
        HugepagesArg::Off => "off",
    };
    let _ = writeln!(t, "hugepages = \"{huge}\"");
    let defaults = iwarp_config::Config::default().limits;
    // Each connection of the harness takes a QP, two CQs and a PD on each side.
    let need = u32::try_from(plan.qps)
        .unwrap_or(u32::MAX)
        .saturating_add(16);
    if need > defaults.max_qp || need > defaults.max_pd || 2 * need > defaults.max_cq {
        let _ = writeln!(t, "\n[limits]");
        let _ = writeln!(t, "max_qp = {}", need.max(defaults.max_qp));
        let _ = writeln!(t, "max_pd = {}", need.max(defaults.max_pd));
        let _ = writeln!(t, "max_cq = {}", (2 * need).max(defaults.max_cq));
    }
    t
}

impl Endpoints {
    /// Starts two endpoints, or finds the running ones, as `plan` says.
    pub fn start(plan: &EndpointPlan) -> Result<Endpoints> {
        match plan.daemons {
            DaemonsArg::Running => {
                let dir = |i: usize| -> Result<PathBuf> {
                    plan.runtime_dirs.get(i).cloned().ok_or_else(|| {
                        err("--daemons running needs --runtime-dir twice (the two endpoints)")
                    })
                };
                let ep = |i: usize| -> Result<Endpoint> {
                    let d = dir(i)?;
                    if !d.join("control.sock").exists() {
                        return Err(err(format!(
                            "{}: no control.sock: is an iwarp-control running there?",
                            d.display()
                        )));
                    }
                    Ok(Endpoint {
                        name: d
                            .file_name()
                            .map_or("endpoint".into(), |n| n.to_string_lossy().into_owned()),
                        runtime_dir: d,
                        ip: plan.peer_ips.get(i).copied().unwrap_or(Ipv4Addr::new(
                            10,
                            77,
                            0,
                            i as u8 + 1,
                        )),
                        iwarpd: None,
                        control: None,
                    })
                };
                Ok(Endpoints {
                    a: ep(0)?,
                    b: ep(1)?,
                    base: None,
                })
            }
            DaemonsArg::Spawn => Endpoints::spawn(plan),
        }
    }

    fn spawn(plan: &EndpointPlan) -> Result<Endpoints> {
        let iwarpd = find_exe(plan.iwarpd.as_deref(), "IWARPD", "iwarpd")?;
        let control = find_exe(
            plan.iwarp_control.as_deref(),
            "IWARP_CONTROL",
            "iwarp-control",
        )?;
        let base = match plan.runtime_dirs.first() {
            Some(d) => d.join(format!("iwarp-bench-{}", std::process::id())),
            None => std::env::temp_dir().join(format!("iwarp-bench-{}", std::process::id())),
        };
        std::fs::create_dir_all(base.join("segment"))
            .map_err(|e| BenchError::io(format!("creating {}", base.display()), e))?;
        let mut eps = Endpoints {
            a: Endpoint {
                name: String::new(),
                runtime_dir: PathBuf::new(),
                ip: Ipv4Addr::new(10, 77, 0, 1),
                iwarpd: None,
                control: None,
            },
            b: Endpoint {
                name: String::new(),
                runtime_dir: PathBuf::new(),
                ip: Ipv4Addr::new(10, 77, 0, 2),
                iwarpd: None,
                control: None,
            },
            base: Some(base.clone()),
        };
        // On any failure `eps` is dropped, which stops what was started.
        for idx in 0..2 {
            let name = format!("bench{}{}", std::process::id(), ['a', 'b'][idx]);
            let cfg_path = match &plan.daemon_config {
                Some(p) => p.clone(),
                None => {
                    let p = base.join(format!("{name}.toml"));
                    std::fs::write(&p, config_text(plan, &base, idx, &name))
                        .map_err(|e| BenchError::io(format!("writing {}", p.display()), e))?;
                    p
                }
            };
            let runtime = base.join(&name);
            let ip = Ipv4Addr::new(10, 77, 0, idx as u8 + 1);
            let log_d = base.join(format!("{name}.iwarpd.log"));
            let log_c = base.join(format!("{name}.control.log"));
            let open_log = |p: &Path| -> Result<std::fs::File> {
                std::fs::File::create(p)
                    .map_err(|e| BenchError::io(format!("creating {}", p.display()), e))
            };
            let mut cmd = Command::new(&iwarpd);
            cmd.arg("--config")
                .arg(&cfg_path)
                .arg("--name")
                .arg(&name)
                .arg("--runtime-dir")
                .arg(&runtime)
                .arg("--ip")
                .arg(format!("{ip}/24"))
                .arg("--mac")
                .arg(format!("02:00:00:00:be:{:02x}", idx + 1));
            if plan.port == PortArg::Unix {
                cmd.arg("--segment").arg(base.join("segment"));
            }
            let log = open_log(&log_d)?;
            let log2 = log
                .try_clone()
                .map_err(|e| BenchError::io("duplicating a log file", e))?;
            let mut d = cmd
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .map_err(|e| err(format!("starting {}: {e}", iwarpd.display())))?;
            let ready = wait_for(&runtime.join("daemon.shm"), &mut d, "iwarpd", &log_d);
            let ep = if idx == 0 { &mut eps.a } else { &mut eps.b };
            ep.name = name.clone();
            ep.runtime_dir = runtime.clone();
            ep.ip = ip;
            ep.iwarpd = Some(d);
            ready?;
            let log = open_log(&log_c)?;
            let log2 = log
                .try_clone()
                .map_err(|e| BenchError::io("duplicating a log file", e))?;
            let mut c = Command::new(&control)
                .arg("--config")
                .arg(&cfg_path)
                .arg("--runtime-dir")
                .arg(&runtime)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .map_err(|e| err(format!("starting {}: {e}", control.display())))?;
            let ready = wait_for(
                &runtime.join("control.sock"),
                &mut c,
                "iwarp-control",
                &log_c,
            );
            ep.control = Some(c);
            ready?;
        }
        Ok(eps)
    }

    /// The daemons' runtime directories (for their stats files).
    /// The process ids of the daemons this run spawned (none for endpoints it was given).
    pub fn pids(&self) -> Vec<u32> {
        [&self.a, &self.b]
            .into_iter()
            .flat_map(|e| [&e.iwarpd, &e.control])
            .filter_map(|c| c.as_ref().map(|c| c.id()))
            .collect()
    }

    /// The process ids of the two iwarpd this run spawned.
    pub fn iwarpd_pids(&self) -> Vec<u32> {
        [&self.a, &self.b]
            .into_iter()
            .filter_map(|e| e.iwarpd.as_ref().map(|c| c.id()))
            .collect()
    }

    pub fn runtime_dirs(&self) -> [&Path; 2] {
        [&self.a.runtime_dir, &self.b.runtime_dir]
    }

    /// Stops what was spawned (control first: it tears the applications' resources down, then
    /// the dataplane) and removes the directory created for them.
    pub fn stop(mut self) -> Result<()> {
        let clean = self.stop_all();
        if clean {
            Ok(())
        } else {
            Err(err(
                "a daemon did not exit cleanly on SIGTERM (killed); see its log",
            ))
        }
    }

    fn stop_all(&mut self) -> bool {
        let mut clean = true;
        for ep in [&mut self.a, &mut self.b] {
            if let Some(mut c) = ep.control.take() {
                clean &= stop_child(&mut c);
            }
        }
        for ep in [&mut self.a, &mut self.b] {
            if let Some(mut d) = ep.iwarpd.take() {
                clean &= stop_child(&mut d);
            }
        }
        if let Some(base) = self.base.take() {
            if clean {
                let _ = std::fs::remove_dir_all(&base);
            } else {
                eprintln!(
                    "iwarp-bench: daemon logs kept in {} (a daemon did not stop cleanly)",
                    base.display()
                );
            }
        }
        clean
    }
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(port: PortArg) -> EndpointPlan {
        EndpointPlan {
            port,
            dpdk_vdev: None,
            hugepages: HugepagesArg::Auto,
            daemon_cores: vec![2],
            daemon_workers: 1,
            daemons: DaemonsArg::Spawn,
            runtime_dirs: vec![],
            peer_ips: vec![],
            iwarpd: None,
            iwarp_control: None,
            daemon_config: None,
            stage_timing: false,
            mtu: 1500,
            cm_port: 18515,
            qps: 1,
            tcp_user_timeout_ms: None,
            tcp_worker_inflight: None,
        }
    }

    #[test]
    fn a_run_with_more_connections_than_the_default_limits_raises_them() {
        let base = Path::new("/tmp/x");
        let small = config_text(&plan(PortArg::Unix), base, 0, "ea");
        assert!(!small.contains("[limits]"), "{small}");
        let big = EndpointPlan {
            qps: 10_000,
            // Cores this machine may not have are another test's matter.
            daemon_cores: vec![],
            ..plan(PortArg::Unix)
        };
        let c = iwarp_config::Config::parse(&config_text(&big, base, 0, "ea"))
            .expect("a valid configuration");
        assert!(c.limits.max_qp >= 10_000);
        assert!(c.limits.max_pd >= 10_000);
        assert!(c.limits.max_cq >= 20_000);
    }

    #[test]
    fn a_user_timeout_reaches_the_spawned_daemons_only_when_asked() {
        let base = Path::new("/tmp/x");
        let default = iwarp_config::Config::default().tcp.user_timeout_ms;
        let p = EndpointPlan {
            daemon_cores: vec![],
            ..plan(PortArg::Unix)
        };
        let c = iwarp_config::Config::parse(&config_text(&p, base, 0, "ea")).unwrap();
        assert_eq!(c.tcp.user_timeout_ms, default);
        let p = EndpointPlan {
            tcp_user_timeout_ms: Some(default * 5),
            ..p
        };
        let c = iwarp_config::Config::parse(&config_text(&p, base, 1, "eb")).unwrap();
        assert_eq!(c.tcp.user_timeout_ms, default * 5);
    }

    #[test]
    fn a_worker_bound_reaches_the_spawned_daemons_only_when_asked() {
        let base = Path::new("/tmp/x");
        let p = EndpointPlan {
            daemon_cores: vec![],
            ..plan(PortArg::Unix)
        };
        let c = iwarp_config::Config::parse(&config_text(&p, base, 0, "ea")).unwrap();
        assert_eq!(
            c.tcp.worker_inflight,
            iwarp_config::Config::default().tcp.worker_inflight
        );
        let p = EndpointPlan {
            tcp_worker_inflight: Some(1 << 30),
            tcp_user_timeout_ms: Some(60_000),
            ..p
        };
        let c = iwarp_config::Config::parse(&config_text(&p, base, 1, "eb")).unwrap();
        assert_eq!(c.tcp.worker_inflight, 1 << 30);
        assert_eq!(c.tcp.user_timeout_ms, 60_000);
    }

    #[test]
    fn spawned_endpoints_get_distinct_addresses_and_a_shared_segment() {
        let base = Path::new("/tmp/x");
        let a = config_text(&plan(PortArg::Unix), base, 0, "ea");
        let b = config_text(&plan(PortArg::Unix), base, 1, "eb");
        assert!(a.contains("ipv4 = \"10.77.0.1/24\""), "{a}");
        assert!(b.contains("ipv4 = \"10.77.0.2/24\""), "{b}");
        assert!(a.contains("segment = \"/tmp/x/segment\""), "{a}");
        assert!(a.contains("list = [2]") && a.contains("\"busy\""), "{a}");
        // No core named for b: it backs off when idle.
        assert!(b.contains("\"adaptive\"") && !b.contains("list ="), "{b}");
        assert!(!a.contains("eal_args"));
    }

    #[test]
    fn each_daemon_gets_its_share_of_the_daemon_cores() {
        let base = Path::new("/tmp/x");
        let mut p = plan(PortArg::Unix);
        p.daemon_workers = 2;
        p.daemon_cores = vec![4, 5, 6, 7];
        let a = config_text(&p, base, 0, "ea");
        let b = config_text(&p, base, 1, "eb");
        assert!(
            a.contains("workers = 2") && a.contains("list = [4, 5]"),
            "{a}"
        );
        assert!(
            b.contains("workers = 2") && b.contains("list = [6, 7]"),
            "{b}"
        );
    }

    #[test]
    fn dpdk_memif_endpoints_are_server_and_client_on_one_socket() {
        let base = Path::new("/tmp/x");
        let a = config_text(&plan(PortArg::Dpdk), base, 0, "ea");
        let b = config_text(&plan(PortArg::Dpdk), base, 1, "eb");
        assert!(a.contains("role=server,socket=/tmp/x/memif.sock"), "{a}");
        assert!(b.contains("role=client,socket=/tmp/x/memif.sock"), "{b}");
        assert!(a.contains("--file-prefix=ea") && b.contains("--file-prefix=eb"));
        assert!(a.contains("mtu = 1500") && a.contains("bsize=2048"), "{a}");
        let jumbo = EndpointPlan {
            mtu: 9000,
            daemon_cores: Vec::new(),
            ..plan(PortArg::Dpdk)
        };
        let a = config_text(&jumbo, base, 0, "ea");
        assert!(a.contains("mtu = 9000") && a.contains("bsize=9014"), "{a}");
        iwarp_config::Config::parse(&a).expect("a valid configuration");
    }

    #[test]
    fn a_missing_executable_is_named() {
        let e = find_exe(
            Some(Path::new("/nonexistent/iwarpd")),
            "IWARPD_UNUSED",
            "iwarpd",
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/iwarpd"), "{e}");
    }
}
