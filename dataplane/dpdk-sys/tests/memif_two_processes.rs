//! Two *processes* exchanging Ethernet frames through DPDK's `net_memif` virtual device, with
//! nothing but these bindings: one process is the memif server and echoes every frame back
//! with the MAC addresses swapped, the other is the client, sends frames of every length
//! from 60 to 1514 octets, and checks each echo octet for octet.
//!
//! The test runs the scenario twice, once with hugepages and once with `--no-huge` (the
//! fallback when no hugepage is free), and finally, when an `iwarpd` binary built with the
//! `dpdk` feature is found (`IWARPD_BIN`, or `target/<profile>/iwarpd` next to this test),
//! checks that a daemon started on a memif client answers ARP from a memif server in another
//! process and stops cleanly on SIGTERM.
//!
//! Needs root (DPDK's EAL locks /var/run/dpdk and maps hugepages); skipped, saying so,
//! otherwise. The test process itself never starts EAL: it spawns this same binary as the
//! peers (`memif_peer`, which does nothing unless `IW_MEMIF_ROLE` is set), because EAL can
//! start only once per process.

use dpdk_sys as sys;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::ptr;
use std::time::{Duration, Instant};

const BURST: usize = 32;
/// Frames the client sends per scenario.
const FRAMES: usize = 3000;
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x78, 0x01];
const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x78, 0x02];
const ETHERTYPE_TEST: [u8; 2] = [0x88, 0xb5]; // IEEE 802 local experimental EtherType 1

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn free_hugepages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The EAL arguments of one peer. With hugepages, `--in-memory` keeps the two processes
/// independent (no shared /var/run/dpdk/<prefix> config, nothing left behind). DPDK 22.11
/// refuses `--in-memory` together with `--no-huge` ("--legacy-mem is not compatible with
/// --in-memory"), so without hugepages each peer runs `--no-huge --no-shconf` under its own
/// `--file-prefix`. `--no-pci` keeps EAL off real NICs; `-l` gives each peer its own core
/// where there are two.
fn eal_args(role: &str, sock: &Path, no_huge: bool) -> Vec<String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let core = if role == "client" { 1 % cores } else { 0 };
    let mac = if role == "client" {
        CLIENT_MAC
    } else {
        SERVER_MAC
    };
    let mac: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    let mut a = vec![
        "-l".to_string(),
        core.to_string(),
        "--no-pci".into(),
        "--no-telemetry".into(),
        "--log-level=3".into(),
    ];
    if no_huge {
        a.extend([
            "--no-huge".to_string(),
            "--no-shconf".into(),
            format!("--file-prefix={}", file_prefix(sock, role)),
        ]);
    } else {
        a.push("--in-memory".into());
    }
    a.extend(["-m".to_string(), "128".into()]);
    let role = if role == "client" { "client" } else { "server" };
    a.push(format!(
        "--vdev=net_memif0,role={role},id=0,socket={},mac={}",
        sock.display(),
        mac.join(":")
    ));
    a
}

/// A `--file-prefix` unique to one peer of one scenario (EAL keeps its runtime directory,
/// /var/run/dpdk/<prefix>, even with --no-shconf; the scenario's `TempDir` removes it).
fn file_prefix(sock: &Path, role: &str) -> String {
    let scenario = sock
        .parent()
        .and_then(Path::file_name)
        .map_or_else(|| "iw".into(), |n| n.to_string_lossy().into_owned());
    format!("{scenario}-{role}")
}

fn rte_errno_text() -> String {
    // SAFETY: iw_errno reads DPDK's per-thread errno; rte_strerror returns a static string.
    unsafe {
        let e = sys::iw_errno();
        format!(
            "{} ({e})",
            CStr::from_ptr(sys::rte_strerror(e)).to_string_lossy()
        )
    }
}

/// A started ethdev with one RX and one TX queue, for the peers.
struct Dev {
    port: u16,
    pool: *mut sys::rte_mempool,
}

impl Dev {
    fn start(args: &[String]) -> Dev {
        let mut owned: Vec<CString> = vec![CString::new("memif-peer").unwrap()];
        owned.extend(args.iter().map(|a| CString::new(a.as_str()).unwrap()));
        let mut argv: Vec<*mut libc::c_char> = owned
            .iter()
            .map(|c| c.as_ptr() as *mut libc::c_char)
            .collect();
        // SAFETY: argv holds NUL-terminated strings that outlive the process (leaked below,
        // since EAL may keep pointers into them).
        let rc = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        std::mem::forget(owned);
        std::mem::forget(argv);
        assert!(rc >= 0, "rte_eal_init({args:?}): {}", rte_errno_text());
        let name = CString::new("net_memif0").unwrap();
        let mut port = 0u16;
        // SAFETY: a valid C string and out-pointer; every result is checked.
        unsafe {
            assert_eq!(
                sys::rte_eth_dev_get_port_by_name(name.as_ptr(), &mut port),
                0,
                "no net_memif0 (is the net_memif PMD in DPDK's plugin directory?)"
            );
            let pool_name = CString::new("peer_pool").unwrap();
            let pool = sys::rte_pktmbuf_pool_create(
                pool_name.as_ptr(),
                4095,
                256,
                0,
                sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
                sys::rte_socket_id() as i32,
            );
            assert!(!pool.is_null(), "mempool: {}", rte_errno_text());
            let conf = sys::rte_eth_conf::default();
            assert_eq!(sys::rte_eth_dev_configure(port, 1, 1, &conf), 0);
            assert_eq!(
                sys::rte_eth_rx_queue_setup(port, 0, 1024, 0, ptr::null(), pool),
                0
            );
            assert_eq!(
                sys::rte_eth_tx_queue_setup(port, 0, 1024, 0, ptr::null()),
                0
            );
            // A memif client cannot start before its server has created the socket: retry.
            let t = Instant::now();
            while sys::rte_eth_dev_start(port) != 0 {
                assert!(t.elapsed() < Duration::from_secs(30), "rte_eth_dev_start");
                std::thread::sleep(Duration::from_millis(20));
            }
            Dev { port, pool }
        }
    }

    fn mac(&self) -> [u8; 6] {
        let mut a = sys::rte_ether_addr::default();
        // SAFETY: valid port id and out-pointer.
        assert_eq!(unsafe { sys::rte_eth_macaddr_get(self.port, &mut a) }, 0);
        a.addr_bytes
    }

    fn link_up(&self) -> bool {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: valid port id and out-pointer.
        unsafe { sys::rte_eth_link_get_nowait(self.port, &mut link) };
        link.link_status() != 0
    }

    /// Waits until memif has connected the two processes (its link goes up). A memif client
    /// connects only when started, and a server that is between its probe and its own start
    /// answers "ID not found" and disconnects it for good: so a client whose link stays down
    /// for a second restarts its device (`reconnect`).
    fn wait_link(&self, limit: Duration, reconnect: bool) {
        let t = Instant::now();
        let mut tried = Instant::now();
        while !self.link_up() {
            assert!(t.elapsed() < limit, "memif link never came up");
            if reconnect && tried.elapsed() > Duration::from_secs(1) {
                // SAFETY: a started port; stopped and started again on this thread.
                unsafe {
                    sys::rte_eth_dev_stop(self.port);
                    sys::rte_eth_dev_start(self.port);
                }
                tried = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `frames` (copied into fresh mbufs), retrying while the TX ring is full.
    fn send(&self, frames: &[Vec<u8>]) {
        let mut mbufs = [ptr::null_mut(); BURST];
        assert!(frames.len() <= BURST);
        for (slot, f) in mbufs.iter_mut().zip(frames) {
            // SAFETY: the pool is live; append gives room for f.len() octets or null.
            unsafe {
                let m = sys::iw_pktmbuf_alloc(self.pool);
                assert!(!m.is_null(), "mempool empty");
                let dst = sys::iw_pktmbuf_append(m, f.len() as u16) as *mut u8;
                assert!(!dst.is_null(), "frame larger than an mbuf");
                ptr::copy_nonoverlapping(f.as_ptr(), dst, f.len());
                *slot = m;
            }
        }
        self.tx_all(&mut mbufs[..frames.len()]);
    }

    /// Hands every mbuf to the PMD, retrying the ones a full ring refused.
    fn tx_all(&self, mbufs: &mut [*mut sys::rte_mbuf]) {
        let mut done = 0;
        let t = Instant::now();
        while done < mbufs.len() {
            let rest = &mut mbufs[done..];
            // SAFETY: `rest` holds mbufs we own; the PMD takes the first `n` it returns.
            let n = unsafe { sys::iw_tx_burst(self.port, 0, rest.as_mut_ptr(), rest.len() as u16) };
            done += n as usize;
            assert!(t.elapsed() < Duration::from_secs(10), "TX ring stuck");
        }
    }

    /// Receives a burst, giving each frame's octets to `f`; returns the mbufs, not freed.
    fn rx(&self, mbufs: &mut [*mut sys::rte_mbuf; BURST]) -> usize {
        // SAFETY: `mbufs` has room for BURST pointers.
        unsafe { sys::iw_rx_burst(self.port, 0, mbufs.as_mut_ptr(), BURST as u16) as usize }
    }
}

/// The octets of a received mbuf.
///
/// # Safety
/// `m` must be a single-segment mbuf received from the PMD and not yet freed; the slice must
/// not outlive it.
unsafe fn octets<'a>(m: *mut sys::rte_mbuf) -> &'a mut [u8] {
    // SAFETY: the caller's contract; memif delivers single-segment mbufs for ≤ 2 KiB frames.
    unsafe {
        std::slice::from_raw_parts_mut(
            sys::iw_pktmbuf_data(m) as *mut u8,
            sys::iw_pktmbuf_data_len(m) as usize,
        )
    }
}

/// Frame `i`: to the server, from the client, test EtherType, a 4-octet sequence number,
/// then a pattern that depends on `i`, 60 to 1514 octets in all.
fn frame(i: usize) -> Vec<u8> {
    let len = 60 + (i * 97) % (1514 - 60 + 1);
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&SERVER_MAC);
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&ETHERTYPE_TEST);
    f.extend_from_slice(&(i as u32).to_be_bytes());
    while f.len() < len {
        f.push((f.len() as u8).wrapping_mul(31).wrapping_add(i as u8));
    }
    f
}

/// The server: echoes every frame with the MAC addresses swapped (the same mbuf goes back,
/// no copy), until it has echoed `FRAMES` or its time runs out.
fn serve(dev: &Dev) {
    let mut mbufs = [ptr::null_mut(); BURST];
    let mut echoed = 0;
    let t = Instant::now();
    while echoed < FRAMES {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "server: {echoed} echoed"
        );
        let n = dev.rx(&mut mbufs);
        for &m in &mbufs[..n] {
            // SAFETY: a received single-segment mbuf, ours until handed back to TX.
            let f = unsafe { octets(m) };
            if f.len() >= 14 {
                let (dst, src) = f.split_at_mut(6);
                dst.swap_with_slice(&mut src[..6]);
            }
        }
        dev.tx_all(&mut mbufs[..n]);
        echoed += n;
    }
    println!("server: echoed {echoed} frames");
    // The last echoes may still sit in the shared rings: leaving now would take them with
    // the connection (seen: a slow client got 2976 of 3000). Stay until the client, done,
    // disconnects (its link goes down), for a bounded time.
    let t = Instant::now();
    while dev.link_up() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The client: sends FRAMES frames in bursts and checks that each comes back, in order,
/// swapped and otherwise intact.
fn client(dev: &Dev) {
    assert_eq!(dev.mac(), CLIENT_MAC, "memif takes the mac= devarg");
    let mut mbufs = [ptr::null_mut(); BURST];
    let mut next_rx = 0usize;
    let mut bytes = 0usize;
    let t = Instant::now();
    for start in (0..FRAMES).step_by(BURST) {
        let end = (start + BURST).min(FRAMES);
        let burst: Vec<Vec<u8>> = (start..end).map(frame).collect();
        dev.send(&burst);
        while next_rx < end {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "client: only {next_rx} of {FRAMES} echoes"
            );
            let n = dev.rx(&mut mbufs);
            for &m in &mbufs[..n] {
                // SAFETY: a received single-segment mbuf, freed right after this look.
                let got = unsafe { octets(m) }.to_vec();
                // SAFETY: ours, freed once.
                unsafe { sys::iw_pktmbuf_free(m) };
                let mut want = frame(next_rx);
                let (dst, src) = want.split_at_mut(6);
                dst.swap_with_slice(&mut src[..6]);
                assert!(got == want, "echo {next_rx} differs (len {})", got.len());
                bytes += got.len();
                next_rx += 1;
            }
        }
    }
    println!("client: {FRAMES} frames, {bytes} octets echoed intact");
}

/// An ARP prober: a memif server that asks who has `target` until a reply comes back.
fn arp_probe(dev: &Dev, target: [u8; 4]) {
    let mut req = vec![0xff; 6];
    req.extend_from_slice(&SERVER_MAC);
    req.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    req.extend_from_slice(&SERVER_MAC);
    req.extend_from_slice(&[target[0], target[1], target[2], 1]);
    req.extend_from_slice(&[0; 6]);
    req.extend_from_slice(&target);
    let mut mbufs = [ptr::null_mut(); BURST];
    let t = Instant::now();
    let mut last = Instant::now() - Duration::from_secs(1);
    loop {
        assert!(t.elapsed() < Duration::from_secs(30), "no ARP reply");
        if last.elapsed() > Duration::from_millis(100) {
            dev.send(std::slice::from_ref(&req));
            last = Instant::now();
        }
        let n = dev.rx(&mut mbufs);
        let mut answered = None;
        for &m in &mbufs[..n] {
            // SAFETY: a received mbuf, freed right after this look.
            let f = unsafe { octets(m) }.to_vec();
            // SAFETY: ours, freed once.
            unsafe { sys::iw_pktmbuf_free(m) };
            // RFC 826: an ARP reply (op 2) whose sender protocol address is the target.
            if f.len() >= 42
                && f[12..14] == [0x08, 0x06]
                && f[20..22] == [0, 2]
                && f[28..32] == target
                && f[0..6] == SERVER_MAC
            {
                answered = Some([f[22], f[23], f[24], f[25], f[26], f[27]]);
            }
        }
        if let Some(mac) = answered {
            println!("arp: {target:?} is at {mac:02x?}");
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The peer process body; does nothing in an ordinary test run (no `IW_MEMIF_ROLE`).
#[test]
fn memif_peer() {
    let Ok(role) = std::env::var("IW_MEMIF_ROLE") else {
        return;
    };
    let args: Vec<String> = std::env::var("IW_EAL_ARGS")
        .expect("IW_EAL_ARGS")
        .split('\u{1f}')
        .map(str::to_string)
        .collect();
    let dev = Dev::start(&args);
    dev.wait_link(Duration::from_secs(30), role == "client");
    match role.as_str() {
        "server" => serve(&dev),
        "client" => client(&dev),
        "arp" => {
            let ip: std::net::Ipv4Addr = std::env::var("IW_TARGET_IP").unwrap().parse().unwrap();
            arp_probe(&dev, ip.octets())
        }
        other => panic!("unknown role {other}"),
    }
    // No rte_eal_cleanup: in DPDK 22.11 with --no-huge it unmaps memory while EAL's
    // interrupt thread still walks memif's interrupt handles, and that thread crashes
    // (SIGSEGV in rte_intr_fd_get, seen here under gdb) when the peer's disconnect arrives
    // at that moment. Process exit releases everything; iwarpd does not call it either.
    // SAFETY: stops and closes the device once, after the last use of its mbufs, then frees
    // its pool.
    unsafe {
        sys::rte_eth_dev_stop(dev.port);
        sys::rte_eth_dev_close(dev.port);
        sys::rte_mempool_free(dev.pool);
    }
}

fn spawn_peer(role: &str, args: &[String], extra: &[(&str, &str)]) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(exe);
    c.args(["--exact", "memif_peer", "--nocapture", "--test-threads=1"])
        .env("IW_MEMIF_ROLE", role)
        .env("IW_EAL_ARGS", args.join("\u{1f}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        c.env(k, v);
    }
    c.spawn().expect("spawn the peer process")
}

/// Waits for a peer; its exit status and everything it printed.
fn finish(child: Child) -> (bool, String) {
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}\n[{}]",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status
    );
    (out.status.success(), text)
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("iw-memif-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let sock = self.0.join("memif.sock");
        for role in ["server", "client"] {
            let _ =
                std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(file_prefix(&sock, role)));
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn exchange(no_huge: bool) {
    let dir = TempDir::new(if no_huge { "nohuge" } else { "huge" });
    let sock = dir.0.join("memif.sock");
    let server = spawn_peer("server", &eal_args("server", &sock, no_huge), &[]);
    let client = spawn_peer("client", &eal_args("client", &sock, no_huge), &[]);
    let (c_ok, c) = finish(client);
    let (s_ok, s) = finish(server);
    assert!(
        c_ok && s_ok,
        "a peer failed\n--- client:\n{c}\n--- server:\n{s}"
    );
    assert!(
        c.contains(&format!("client: {FRAMES} frames")),
        "client output:\n{c}"
    );
    assert!(s.contains(&format!("server: echoed {FRAMES}")), "{s}");
    let summary = c
        .find("client:")
        .map_or("", |i| c[i..].lines().next().unwrap_or(""));
    println!(
        "{}: {summary}",
        if no_huge { "--no-huge" } else { "hugepages" }
    );
}

#[test]
fn two_processes_exchange_frames_over_memif() {
    if !is_root() {
        eprintln!("two_processes_exchange_frames_over_memif: skipped (needs root)");
        return;
    }
    // 128 MiB of 2 MiB pages per peer.
    if free_hugepages() >= 128 {
        exchange(false);
    } else {
        eprintln!("hugepage scenario skipped: fewer than 128 free 2 MiB hugepages");
    }
    exchange(true);
}

/// The `iwarpd` binary to try: `IWARPD_BIN`, or the one cargo built beside this test.
fn iwarpd_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("IWARPD_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("iwarpd");
    p.exists().then_some(p)
}

#[test]
fn an_iwarpd_on_memif_answers_arp_from_another_process() {
    if !is_root() {
        eprintln!("an_iwarpd_on_memif_answers_arp_from_another_process: skipped (needs root)");
        return;
    }
    let Some(bin) = iwarpd_bin() else {
        eprintln!("skipped: no iwarpd binary (set IWARPD_BIN or build iwarpd --features dpdk)");
        return;
    };
    let dir = TempDir::new("daemon");
    let sock = dir.0.join("memif.sock");
    let mut daemon_eal = eal_args("client", &sock, true);
    // The daemon's MAC comes from the device (memif's mac= devarg).
    let toml = format!(
        "[daemon]\nname = \"memif-t\"\nruntime_dir = \"{}\"\n\n[port]\nkind = \"dpdk\"\n\
         ipv4 = \"10.78.0.2/24\"\neal_args = [{}]\n\n[shm]\nhugepages = \"off\"\n",
        dir.0.join("run").display(),
        daemon_eal
            .iter_mut()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let cfg = dir.0.join("iwarpd.toml");
    std::fs::write(&cfg, toml).unwrap();
    let mut daemon = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start iwarpd");
    // An iwarpd built without the feature refuses port.kind = "dpdk" at once: skip then.
    std::thread::sleep(Duration::from_millis(300));
    if let Some(status) = daemon.try_wait().unwrap() {
        let out = daemon.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("`dpdk` feature") {
            eprintln!(
                "skipped: {} was built without the dpdk feature",
                bin.display()
            );
            return;
        }
        panic!("iwarpd exited ({status}):\n{err}");
    }
    let probe = spawn_peer(
        "arp",
        &eal_args("server", &sock, true),
        &[("IW_TARGET_IP", "10.78.0.2")],
    );
    let probe_out = probe.wait_with_output().unwrap();
    // SAFETY: signals our own child by its pid.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = daemon.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = daemon.kill();
            panic!("iwarpd did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = daemon.wait_with_output().unwrap();
    let daemon_log = String::from_utf8_lossy(&out.stderr);
    let probe_text = format!(
        "{}{}",
        String::from_utf8_lossy(&probe_out.stdout),
        String::from_utf8_lossy(&probe_out.stderr)
    );
    assert!(
        probe_out.status.success(),
        "the ARP probe failed:\n{probe_text}\n--- iwarpd:\n{daemon_log}"
    );
    assert!(status.success(), "iwarpd exit {status}:\n{daemon_log}");
    assert!(
        probe_text.contains("arp: [10, 78, 0, 2] is at [02, 00, 00, 00, 78, 01]"),
        "{probe_text}"
    );
    let arp = probe_text
        .find("arp:")
        .map_or("", |i| probe_text[i..].lines().next().unwrap_or(""));
    println!("iwarpd over memif, another process asking: {arp}; stopped cleanly on SIGTERM");
    assert!(
        !dir.0.join("run").join("pid").exists(),
        "iwarpd left its pid file behind"
    );
}
