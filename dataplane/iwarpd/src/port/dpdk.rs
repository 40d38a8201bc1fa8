//! A DPDK port (feature `dpdk`): frames through a DPDK ethdev (a real NIC bound to vfio-pci
//! in production; `net_memif`, `net_af_packet`, `net_tap` or `net_ring` virtual devices in
//! tests), one RX and one TX queue, bursts of 32, frames copied into and out of mbufs.
//!
//! Not done yet: zero-copy (smoltcp's `phy::Device` hands out `&[u8]` tokens, so an mbuf
//! would have to be wrapped by the device layer — one copy per frame each way is paid and
//! measured today); several queues with RSS (one port, one queue, one core); jumbo frames
//! (one frame = one mbuf of 2048 octets, so `port.mtu` ≤ 2034); setting the NIC's MAC from
//! `port.mac` (the port uses the device's own, which memif takes from its `mac=` devarg).
//!
//! A `DpdkPort` holds raw DPDK pointers, so it is neither `Send` nor `Sync`: it is opened on
//! the poll-mode core that uses it and never leaves it.

use super::Port;
use dpdk_sys as sys;
use std::ffi::{CStr, CString};
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Frames per RX burst and per TX batch (DPDK's l2fwd uses 32 too).
const BURST: usize = 32;
/// Descriptors per RX and TX ring.
const RING: u16 = 1024;
/// Mbufs in the pool: both rings full plus bursts in flight, 2^n - 1 as rte_mempool prefers.
const POOL_MBUFS: u32 = 4095;
/// Per-lcore mbuf cache of the pool.
const POOL_CACHE: u32 = 256;
/// Octets of frame an mbuf of RTE_MBUF_DEFAULT_BUF_SIZE holds (its 2048-octet data room).
const MBUF_DATA_ROOM: usize = 2048;
const ETH_HEADER: usize = 14;
static EAL: OnceLock<Result<(), String>> = OnceLock::new();
/// The EAL arguments EAL was started with (to find a vdev's devargs).
static EAL_ARGS: OnceLock<Vec<String>> = OnceLock::new();

/// Whether the vdev `name` is a memif client (memif's `role` devarg defaults to client).
fn is_memif_client(name: &str) -> bool {
    let Some(args) = EAL_ARGS.get() else {
        return false;
    };
    let mut vdevs = args.iter().enumerate().filter_map(|(i, a)| {
        a.strip_prefix("--vdev=").or_else(|| {
            (a == "--vdev")
                .then(|| args.get(i + 1).map(String::as_str))
                .flatten()
        })
    });
    vdevs.any(|v| {
        let mut parts = v.split(',');
        parts.next() == Some(name)
            && name.starts_with("net_memif")
            && !parts.any(|kv| kv == "role=server")
    })
}

fn dpdk_err(what: &str, rc: i32) -> io::Error {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local string.
    let msg = unsafe { CStr::from_ptr(sys::rte_strerror(rc.abs())) }
        .to_string_lossy()
        .into_owned();
    io::Error::other(format!("{what}: {msg} ({rc})"))
}

/// Initialises DPDK's EAL once per process with `args` (from the configuration's
/// `port.eal_args`); later calls return the first result.
pub fn eal_init(args: &[String]) -> io::Result<()> {
    EAL.get_or_init(|| {
        let _ = EAL_ARGS.set(args.to_vec());
        let mut owned: Vec<CString> = Vec::with_capacity(args.len() + 1);
        owned.push(CString::new("iwarpd").unwrap_or_default());
        for a in args {
            owned.push(
                CString::new(a.as_str())
                    .map_err(|_| format!("EAL argument {a:?} contains a NUL"))?,
            );
        }
        let mut argv: Vec<*mut libc::c_char> = owned
            .iter()
            .map(|c| c.as_ptr() as *mut libc::c_char)
            .collect();
        // SAFETY: argv points at NUL-terminated strings that live in `owned`; EAL may keep
        // pointers into them, so `owned` is leaked below.
        let rc = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        std::mem::forget(owned);
        std::mem::forget(argv);
        if rc < 0 {
            // SAFETY: reads DPDK's thread-local errno.
            let e = unsafe { sys::iw_errno() };
            return Err(dpdk_err("rte_eal_init", e).to_string());
        }
        Ok(())
    })
    .clone()
    .map_err(io::Error::other)
}

pub struct DpdkPort {
    port_id: u16,
    pool: *mut sys::rte_mempool,
    pub mac: [u8; 6],
    mtu: usize,
    rx: [*mut sys::rte_mbuf; BURST],
    tx: [*mut sys::rte_mbuf; BURST],
    tx_len: usize,
    pub tx_dropped: u64,
    /// A memif client restarts its device when its link stays down (see `watch_link`).
    memif_client: bool,
    link_checked: Instant,
    down_since: Option<Instant>,
}

impl DpdkPort {
    /// Opens the ethdev named `name`: a vdev name such as `net_memif0`, or a PCI address
    /// such as `0000:03:00.0` for a NIC bound to vfio-pci. EAL must be initialised first
    /// ([`eal_init`]).
    pub fn open(name: &str, mtu: usize) -> io::Result<DpdkPort> {
        let cname = CString::new(name).map_err(|_| io::Error::other("port name has a NUL"))?;
        let mut port_id = 0u16;
        // SAFETY: valid C string and out-pointer.
        let rc = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port_id) };
        if rc != 0 {
            return Err(dpdk_err(&format!("no DPDK port named {name}"), rc));
        }
        // A memif client cannot start before its server has created the socket (the daemons
        // of a pair start in any order), so its start is retried for a while.
        let memif_client = is_memif_client(name);
        let patience = if memif_client {
            Duration::from_secs(30)
        } else {
            Duration::ZERO
        };
        let mut port = DpdkPort::open_id(port_id, mtu, patience)?;
        port.memif_client = memif_client;
        Ok(port)
    }

    /// Opens the ethdev with DPDK port id `port_id` (the configuration's `port.dpdk_port_id`),
    /// retrying its start for up to `patience`.
    pub fn open_id(port_id: u16, mtu: usize, patience: Duration) -> io::Result<DpdkPort> {
        // One frame must fit one mbuf: no scattered RX or multi-segment TX here.
        if mtu + ETH_HEADER > MBUF_DATA_ROOM {
            return Err(io::Error::other(format!(
                "port.mtu {mtu} does not fit one {MBUF_DATA_ROOM}-octet mbuf (at most {})",
                MBUF_DATA_ROOM - ETH_HEADER
            )));
        }
        static POOLS: AtomicU32 = AtomicU32::new(0);
        let pool_name = CString::new(format!(
            "iw_pool_{port_id}_{}",
            POOLS.fetch_add(1, Ordering::Relaxed)
        ))
        .unwrap_or_default();
        // SAFETY: plain calls on a port id DPDK gave us; every return value is checked, and
        // on any failure what was set up is undone before returning.
        unsafe {
            let socket = sys::rte_eth_dev_socket_id(port_id).max(0);
            let pool = sys::rte_pktmbuf_pool_create(
                pool_name.as_ptr(),
                POOL_MBUFS,
                POOL_CACHE,
                0,
                sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
                socket,
            );
            if pool.is_null() {
                return Err(dpdk_err("rte_pktmbuf_pool_create", sys::iw_errno()));
            }
            let fail = |what: &str, rc: i32| {
                sys::rte_eth_dev_close(port_id);
                sys::rte_mempool_free(pool);
                dpdk_err(what, rc)
            };
            let conf = sys::rte_eth_conf::default();
            let rc = sys::rte_eth_dev_configure(port_id, 1, 1, &conf);
            if rc != 0 {
                return Err(fail("rte_eth_dev_configure", rc));
            }
            let rc =
                sys::rte_eth_rx_queue_setup(port_id, 0, RING, socket as u32, ptr::null(), pool);
            if rc != 0 {
                return Err(fail("rte_eth_rx_queue_setup", rc));
            }
            let rc = sys::rte_eth_tx_queue_setup(port_id, 0, RING, socket as u32, ptr::null());
            if rc != 0 {
                return Err(fail("rte_eth_tx_queue_setup", rc));
            }
            let t = Instant::now();
            loop {
                let rc = sys::rte_eth_dev_start(port_id);
                if rc == 0 {
                    break;
                }
                if t.elapsed() >= patience {
                    return Err(fail("rte_eth_dev_start", rc));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // Some virtual devices do not support promiscuous mode; we only need our MAC.
            let _ = sys::rte_eth_promiscuous_enable(port_id);
            let mut addr = sys::rte_ether_addr::default();
            let rc = sys::rte_eth_macaddr_get(port_id, &mut addr);
            if rc != 0 {
                sys::rte_eth_dev_stop(port_id);
                return Err(fail("rte_eth_macaddr_get", rc));
            }
            Ok(DpdkPort {
                port_id,
                pool,
                mac: addr.addr_bytes,
                mtu,
                rx: [ptr::null_mut(); BURST],
                tx: [ptr::null_mut(); BURST],
                tx_len: 0,
                tx_dropped: 0,
                memif_client: false,
                link_checked: Instant::now(),
                down_since: None,
            })
        }
    }

    /// Whether the link is up (memif: the peer process is connected).
    pub fn link_up(&self) -> bool {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: a started port and a valid out-pointer.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.port_id, &mut link) };
        rc == 0 && link.link_status() != 0
    }

    /// Called when a poll finds nothing: a memif client connects only when its device starts,
    /// and a server that was not ready yet (between its probe and its start it answers "ID
    /// not found") or that restarted leaves it disconnected for good. So a client whose link
    /// has been down for a second restarts its device. Checked at most every 100 ms.
    fn watch_link(&mut self) {
        if !self.memif_client || self.link_checked.elapsed() < Duration::from_millis(100) {
            return;
        }
        self.link_checked = Instant::now();
        if self.link_up() {
            self.down_since = None;
            return;
        }
        let since = *self.down_since.get_or_insert(self.link_checked);
        if since.elapsed() >= Duration::from_secs(1) {
            tracing::info!("DPDK port {}: memif link down, reconnecting", self.port_id);
            // TX mbufs still batched would go to a stopped queue: send or drop them first.
            let _ = self.flush();
            // SAFETY: a started port of ours, stopped and started again on its own core.
            let rc = unsafe {
                sys::rte_eth_dev_stop(self.port_id);
                sys::rte_eth_dev_start(self.port_id)
            };
            if rc != 0 {
                tracing::warn!("DPDK port {}: restart failed ({rc})", self.port_id);
            }
            self.down_since = None;
        }
    }
}

impl Port for DpdkPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn mtu(&self) -> usize {
        self.mtu
    }
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let want = max.min(BURST) as u16;
        // SAFETY: `rx` has room for BURST mbuf pointers; the PMD fills at most `want`.
        let n = unsafe { sys::iw_rx_burst(self.port_id, 0, self.rx.as_mut_ptr(), want) } as usize;
        if n == 0 {
            self.watch_link();
        }
        for &m in &self.rx[..n] {
            // SAFETY: `m` is an mbuf the PMD handed us; its data is data_len octets long, and
            // we free it exactly once after reading.
            unsafe {
                let data = sys::iw_pktmbuf_data(m) as *const u8;
                let len = sys::iw_pktmbuf_data_len(m) as usize;
                f(std::slice::from_raw_parts(data, len));
                sys::iw_pktmbuf_free(m);
            }
        }
        Ok(n)
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.tx_len == BURST {
            self.flush()?;
        }
        let Ok(len) = u16::try_from(frame.len()) else {
            self.tx_dropped += 1;
            return Ok(());
        };
        // SAFETY: the pool outlives the port; append returns room for `len` octets or null.
        unsafe {
            let m = sys::iw_pktmbuf_alloc(self.pool);
            if m.is_null() {
                self.tx_dropped += 1;
                return Ok(());
            }
            let dst = sys::iw_pktmbuf_append(m, len) as *mut u8;
            if dst.is_null() {
                sys::iw_pktmbuf_free(m);
                self.tx_dropped += 1;
                return Ok(());
            }
            ptr::copy_nonoverlapping(frame.as_ptr(), dst, frame.len());
            self.tx[self.tx_len] = m;
        }
        self.tx_len += 1;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.tx_len == 0 {
            return Ok(());
        }
        // SAFETY: the first tx_len entries are mbufs we own; the PMD takes those it sends.
        let sent =
            unsafe { sys::iw_tx_burst(self.port_id, 0, self.tx.as_mut_ptr(), self.tx_len as u16) }
                as usize;
        for &m in &self.tx[sent..self.tx_len] {
            // A full TX ring: the frame is dropped (TCP recovers), its mbuf freed.
            // SAFETY: not taken by the PMD, still ours.
            unsafe { sys::iw_pktmbuf_free(m) };
            self.tx_dropped += 1;
        }
        self.tx_len = 0;
        Ok(())
    }
    fn dropped(&self) -> u64 {
        self.tx_dropped
    }
}

impl Drop for DpdkPort {
    fn drop(&mut self) {
        let _ = self.flush();
        // SAFETY: the port was started in `open_id`; it is stopped and closed once here, and
        // only then its pool freed (no mbuf of it is left in the port's rings or in `tx`).
        unsafe {
            sys::rte_eth_dev_stop(self.port_id);
            sys::rte_eth_dev_close(self.port_id);
            sys::rte_mempool_free(self.pool);
        }
    }
}
