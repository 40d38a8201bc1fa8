//! A DPDK port (feature `dpdk`): frames through a DPDK ethdev (a real NIC bound to vfio-pci
//! in production; `net_memif`, `net_af_packet`, `net_tap` or `net_ring` virtual devices in
//! tests), one RX and one TX queue per poll-mode worker, bursts of 32, one mbuf pool per
//! queue. smoltcp builds each frame it sends straight into an mbuf ([`Port::tx_with`]) and
//! reads each frame it receives in its mbuf ([`RxMbuf`], freed once read).
//!
//! With several workers each [`DpdkPort`] is one queue pair of the device: a worker receives
//! what the device put on its queue (memif: what the peer sent on the queue of the same
//! number; a NIC: by its hash, or everything on queue 0 without RSS) and
//! [`super::steer`] hands each frame to the worker that owns its connection.
//!
//! Back-pressure: the frames a full TX ring does not take (`rte_eth_tx_burst` sends fewer
//! than given) stay in the queue, up to [`TX_HOLD`], and go first at the next flush; while
//! any wait, [`Port::tx_ready`] says no and the device leaves TCP's segments in TCP, unsent
//! and untimed, instead of the port dropping them for TCP to resend by timeout. Only a frame
//! beyond that bound (or with no mbuf free) is dropped, counted in [`Port::dropped`], and the
//! held frames once the ring has taken none of them for [`STALL`].
//!
//! Jumbo frames: each frame is one mbuf, whose data room the pools size from `port.mtu`
//! (2048 octets up to an MTU of 2034, the frame beyond it), and the device is given the MTU
//! where it says it takes it. memif says 1500 (DPDK 22.11) but carries any frame, in
//! several of its buffers (`bsize=` devarg, 2048 by default) where one is too small; it is
//! left at its default. A received frame longer than one mbuf (a peer whose MTU is larger
//! than ours) is dropped and counted.
//!
//! TCP checksums: with `port.checksum_offload` on (the default) the port asks the device for
//! each direction it offers (most NICs offer both; `net_tap` does both in software; memif
//! neither). Computing on transmit: each TCP frame sent goes with the pseudo-header sum in its
//! checksum field and the offload flags on its mbuf (and through `rte_eth_tx_prepare`), and
//! smoltcp leaves the checksum to the device. Checking on receive: a frame the device found
//! bad is dropped and counted, one it did not check is checked here
//! (`port/tcp_checksum.rs`). A direction the device does not take is done in software (by
//! smoltcp on transmit, by the device layer on receive).
//!
//! Not done yet: programming the NIC to steer by
//! destination port (rte_flow), so that a frame lands on its owner's queue without a
//! hand-over; setting the NIC's MAC from `port.mac` (the port uses the device's own, which
//! memif takes from its `mac=` devarg).

use super::Port;
use super::{tcp_checksum, TcpChecksumOffload, STALL};
use dpdk_sys as sys;
use smoltcp::wire::ETHERNET_HEADER_LEN;
use std::ffi::{CStr, CString};
use std::io;
use std::ops::Deref;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Frames per RX burst and per TX batch (DPDK's l2fwd uses 32 too).
const BURST: usize = 32;
/// A memif client looks at its link after this many empty bursts (see `watch_link`): a few
/// microseconds of busy polling, 13 ms of an adaptive loop's longest sleeps by default
/// (`cores.max_idle_sleep_us`).
const EMPTY_BURSTS_PER_LINK_CHECK: u32 = 64;
/// Descriptors per RX and TX ring.
const RING: u16 = 1024;
/// Frames a queue holds that its full TX ring did not take, retried first at the next flush.
/// While any are held [`Port::tx_ready`] says no, but a round of the device already open
/// adds a frame per sending connection: room for a few hundred such, the rest dropped.
pub const TX_HOLD: usize = 512;
/// Mbufs in the pool: both rings full plus bursts in flight, 2^n - 1 as rte_mempool prefers.
const POOL_MBUFS: u32 = 4095;
/// Per-lcore mbuf cache of the pool.
const POOL_CACHE: u32 = 256;
/// Octets of frame an mbuf holds at least (DPDK's default data room,
/// RTE_MBUF_DEFAULT_BUF_SIZE less the headroom).
const MIN_MBUF_FRAME: usize = 2048;
static EAL: OnceLock<Result<(), String>> = OnceLock::new();
/// The EAL arguments EAL was started with (to find a vdev's devargs).
static EAL_ARGS: OnceLock<Vec<String>> = OnceLock::new();

/// The devargs of the memif vdev `name` in the EAL arguments (`key=value` pairs after its
/// name); None when `name` is no memif vdev.
fn memif_devargs(name: &str) -> Option<Vec<String>> {
    if !name.starts_with("net_memif") {
        return None;
    }
    let args = EAL_ARGS.get()?;
    let mut vdevs = args.iter().enumerate().filter_map(|(i, a)| {
        a.strip_prefix("--vdev=").or_else(|| {
            (a == "--vdev")
                .then(|| args.get(i + 1).map(String::as_str))
                .flatten()
        })
    });
    let v = vdevs.find(|v| v.split(',').next() == Some(name))?;
    Some(v.split(',').skip(1).map(str::to_string).collect())
}

/// Whether the vdev `name` is a memif client (memif's `role` devarg defaults to client).
fn is_memif_client(name: &str) -> bool {
    memif_devargs(name).is_some_and(|kv| !kv.iter().any(|kv| kv == "role=server"))
}

/// memif's buffer size (`bsize=`, 2048 by default) where frames of `mtu` do not fit one:
/// memif then carries each frame in a chain of buffers, which measured half the rate of
/// 64 KiB Writes with 9000-octet frames (docs/performance.md).
fn memif_bsize_short(name: &str, mtu: usize) -> Option<usize> {
    let bsize = memif_devargs(name)?
        .iter()
        .find_map(|kv| kv.strip_prefix("bsize=").and_then(|v| v.parse().ok()))
        .unwrap_or(2048);
    (bsize < mtu + ETHERNET_HEADER_LEN).then_some(bsize)
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
        // EAL pins the thread that initialises it to its main lcore (the first of `-l`, or
        // core 0); our workers pin themselves, so the caller's own affinity is put back.
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut cpus: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: fills `cpus` (of `size` octets) for the calling thread (pid 0).
        let saved = unsafe { libc::sched_getaffinity(0, size, &mut cpus) } == 0;
        // SAFETY: argv points at NUL-terminated strings that live in `owned`; EAL may keep
        // pointers into them, so `owned` is leaked below.
        let rc = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        if saved {
            // SAFETY: the set read above, for the calling thread.
            unsafe { libc::sched_setaffinity(0, size, &cpus) };
        }
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

/// The device: stopped, closed and its pools freed when the last of its queues goes.
struct Device {
    port_id: u16,
    pools: Vec<*mut sys::rte_mempool>,
}

// SAFETY: the pool pointers are only used by `drop`, once, by whichever thread drops the
// last queue; mempool free and ethdev stop/close may be called from any thread.
unsafe impl Send for Device {}
// SAFETY: a shared `&Device` gives access to nothing (its fields are private to this module
// and read only by `drop`).
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the port was started in `open_id`; it is stopped and closed once here, when
        // no queue of it is used any more, and only then its pools freed (no mbuf of them is
        // left in the port's rings, in any queue's `tx`, which each queue flushed, or in a
        // received frame, each of which holds its queue's `QueueLife`).
        unsafe {
            sys::rte_eth_dev_stop(self.port_id);
            sys::rte_eth_dev_close(self.port_id);
            for &pool in &self.pools {
                sys::rte_mempool_free(pool);
            }
        }
    }
}

/// Keeps a device's pools (and the device) alive while one queue or a frame it received is:
/// one per queue, so that the count each received frame takes stays on its worker's core.
struct QueueLife {
    _dev: Arc<Device>,
}

/// A received frame in its mbuf, which goes back to its pool when the frame is dropped.
pub struct RxMbuf {
    m: *mut sys::rte_mbuf,
    data: *const u8,
    len: usize,
    _life: Arc<QueueLife>,
}

// SAFETY: the mbuf is this frame's alone; freeing it into its pool is safe from any thread
// (DPDK mempools are multi-producer), and `_life` keeps the pool alive wherever it goes.
unsafe impl Send for RxMbuf {}

impl Deref for RxMbuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `data` is the mbuf's first (only) segment, `len` octets long, and the mbuf
        // is ours until this frame is dropped.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

impl Drop for RxMbuf {
    fn drop(&mut self) {
        // SAFETY: ours, freed once; its pool outlives `_life`, dropped after this.
        unsafe { sys::iw_pktmbuf_free(self.m) }
    }
}

/// One RX/TX queue pair of a DPDK device.
pub struct DpdkPort {
    /// Keeps the device open while this queue or a frame it received is.
    life: Arc<QueueLife>,
    port_id: u16,
    queue: u16,
    pool: *mut sys::rte_mempool,
    pub mac: [u8; 6],
    mtu: usize,
    rx: [*mut sys::rte_mbuf; BURST],
    /// Frames to send, oldest first: those the TX ring did not take at the last flush
    /// (`held_since`), then those batched since.
    tx: Box<[*mut sys::rte_mbuf; TX_HOLD]>,
    tx_len: usize,
    /// The first `tx_prepared` of `tx` went through `rte_eth_tx_prepare` already.
    tx_prepared: usize,
    /// The last flush left frames in `tx` (the ring was full): since when the ring last
    /// took one, or since the holding began. Held frames that waited [`STALL`] with none
    /// taken are dropped.
    held_since: Option<Instant>,
    /// Frames lost on the way out: no mbuf, refused by the device's preparation, or no room
    /// left in `tx` while the ring stayed full.
    pub tx_dropped: u64,
    /// Received frames longer than one mbuf, dropped.
    pub rx_dropped: u64,
    /// Received frames whose TCP checksum was wrong, dropped (with receive checksum offload).
    rx_bad_checksum: u64,
    /// The TCP checksum work the device does (see the module's doc).
    offload: TcpChecksumOffload,
    /// A memif client restarts its device when its link stays down (see `watch_link`); only
    /// a device with one queue, since a restart stops every queue under its worker.
    memif_client: bool,
    /// Empty bursts since the link was last looked at.
    empty_bursts: u32,
    link_checked: Instant,
    down_since: Option<Instant>,
}

// SAFETY: a DpdkPort is one queue pair, used by one thread at a time (the worker it is given
// to; `&mut self` for every burst). DPDK allows RX/TX bursts on distinct queues of a device
// from distinct threads, its mempools are safe for concurrent get/put, and the shared
// `Device` is only touched (stop, close, free) by the drop of the last queue.
unsafe impl Send for DpdkPort {}

/// Keeps a device open while it lives, whatever became of its queues ([`DpdkPort::hold`]).
pub struct DeviceHold {
    _life: Arc<QueueLife>,
}

impl DpdkPort {
    /// Keeps this port's device open for as long as the returned hold lives, even once every
    /// queue of it is dropped. For a process that holds both ends of a memif pair: closing
    /// one end sends the other a disconnect, which EAL's interrupt thread handles while
    /// this process closes the other end, and DPDK 22.11 can crash in that thread when the
    /// two meet (SIGSEGV in EAL under memif's callback, in a core dump of `node-pair`).
    pub fn hold(&self) -> DeviceHold {
        DeviceHold {
            _life: Arc::clone(&self.life),
        }
    }

    /// Opens the ethdev named `name`: a vdev name such as `net_memif0`, or a PCI address
    /// such as `0000:03:00.0` for a NIC bound to vfio-pci. EAL must be initialised first
    /// ([`eal_init`]).
    ///
    /// TCP checksums are offloaded where the device can take them.
    pub fn open(name: &str, mtu: usize) -> io::Result<DpdkPort> {
        let mut q = DpdkPort::open_queues(name, mtu, 1, true)?;
        q.pop().ok_or_else(|| io::Error::other("no queue"))
    }

    /// As [`DpdkPort::open`], with `queues` RX/TX queue pairs, one per worker, in order, and
    /// TCP checksums offloaded only if `checksum_offload` (and the device can).
    pub fn open_queues(
        name: &str,
        mtu: usize,
        queues: u16,
        checksum_offload: bool,
    ) -> io::Result<Vec<DpdkPort>> {
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
        if let Some(bsize) = memif_bsize_short(name, mtu) {
            tracing::warn!(
                "DPDK port {name}: frames of up to {} octets span several memif buffers of \
                 {bsize}: add bsize={} to its --vdev for a buffer per frame",
                mtu + ETHERNET_HEADER_LEN,
                mtu + ETHERNET_HEADER_LEN
            );
        }
        let patience = if memif_client {
            Duration::from_secs(30)
        } else {
            Duration::ZERO
        };
        let mut ports = DpdkPort::open_id_queues(port_id, mtu, queues, patience, checksum_offload)?;
        match &mut ports[..] {
            [port] => port.memif_client = memif_client,
            // A restart would stop the queues under the other workers, so a client with
            // several waits for its link here, before any worker has its queue.
            [first, ..] if memif_client => first.await_link(patience)?,
            _ => {}
        }
        Ok(ports)
    }

    /// Opens the ethdev with DPDK port id `port_id` (the first one EAL probed, when the
    /// configuration names no device), retrying its start for up to `patience`.
    pub fn open_id(port_id: u16, mtu: usize, patience: Duration) -> io::Result<DpdkPort> {
        let mut q = DpdkPort::open_id_queues(port_id, mtu, 1, patience, true)?;
        q.pop().ok_or_else(|| io::Error::other("no queue"))
    }

    /// As [`DpdkPort::open_id`], with `queues` RX/TX queue pairs, and TCP checksums
    /// offloaded only if `checksum_offload` (and the device can).
    pub fn open_id_queues(
        port_id: u16,
        mtu: usize,
        queues: u16,
        patience: Duration,
        checksum_offload: bool,
    ) -> io::Result<Vec<DpdkPort>> {
        if queues == 0 {
            return Err(io::Error::other("no queues asked for"));
        }
        // One frame is one mbuf (no scattered RX or multi-segment TX here): the data room
        // holds the headroom DPDK keeps and the largest frame.
        // SAFETY: returns a constant.
        let headroom = usize::from(unsafe { sys::iw_pktmbuf_headroom_default() });
        let data_room =
            u16::try_from((mtu + ETHERNET_HEADER_LEN).max(MIN_MBUF_FRAME) + headroom)
                .map_err(|_| io::Error::other(format!("port.mtu {mtu} does not fit an mbuf")))?;
        // What the device takes, asked before anything is set up that a refusal would undo.
        let info = dev_info(port_id)?;
        let rx_mtu = device_mtu(&info, mtu)?;
        // SAFETY: return constants.
        let (tx_csum, rx_csum) = unsafe {
            (
                sys::iw_tx_offload_tcp_cksum(),
                sys::iw_rx_offload_tcp_cksum(),
            )
        };
        let offload = TcpChecksumOffload {
            tx: checksum_offload && info.tx_offload_capa & tx_csum != 0,
            rx: checksum_offload && info.rx_offload_capa & rx_csum != 0,
        };
        let by = |device: bool| {
            if device {
                "the device"
            } else if checksum_offload {
                "software (the device cannot)"
            } else {
                "software (port.checksum_offload = false)"
            }
        };
        tracing::info!(
            "DPDK port {port_id} ({}): TCP checksums computed by {}, checked by {}",
            driver_name(&info),
            by(offload.tx),
            by(offload.rx),
        );
        static POOLS: AtomicU32 = AtomicU32::new(0);
        // SAFETY: plain calls on a port id DPDK gave us; every return value is checked, and
        // on any failure what was set up is undone before returning.
        unsafe {
            let socket = sys::rte_eth_dev_socket_id(port_id).max(0);
            let mut pools = Vec::new();
            let free = |pools: &[*mut sys::rte_mempool]| {
                for &p in pools {
                    sys::rte_mempool_free(p);
                }
            };
            for _ in 0..queues {
                let pool_name = CString::new(format!(
                    "iw_pool_{port_id}_{}",
                    POOLS.fetch_add(1, Ordering::Relaxed)
                ))
                .unwrap_or_default();
                let pool = sys::rte_pktmbuf_pool_create(
                    pool_name.as_ptr(),
                    POOL_MBUFS,
                    POOL_CACHE,
                    0,
                    data_room,
                    socket,
                );
                if pool.is_null() {
                    let e = sys::iw_errno();
                    free(&pools);
                    return Err(dpdk_err("rte_pktmbuf_pool_create", e));
                }
                pools.push(pool);
            }
            let fail = |what: &str, rc: i32| {
                sys::rte_eth_dev_close(port_id);
                free(&pools);
                dpdk_err(what, rc)
            };
            let mut conf = sys::rte_eth_conf::default();
            conf.rxmode.mtu = rx_mtu;
            if offload.tx {
                conf.txmode.offloads |= tx_csum;
            }
            if offload.rx {
                conf.rxmode.offloads |= rx_csum;
            }
            let rc = sys::rte_eth_dev_configure(port_id, queues, queues, &conf);
            if rc != 0 {
                return Err(fail(
                    &format!("rte_eth_dev_configure ({queues} queues)"),
                    rc,
                ));
            }
            for (q, &pool) in pools.iter().enumerate() {
                let q = q as u16;
                let rc =
                    sys::rte_eth_rx_queue_setup(port_id, q, RING, socket as u32, ptr::null(), pool);
                if rc != 0 {
                    return Err(fail("rte_eth_rx_queue_setup", rc));
                }
                let rc = sys::rte_eth_tx_queue_setup(port_id, q, RING, socket as u32, ptr::null());
                if rc != 0 {
                    return Err(fail("rte_eth_tx_queue_setup", rc));
                }
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
            let dev = Arc::new(Device {
                port_id,
                pools: pools.clone(),
            });
            Ok(pools
                .iter()
                .enumerate()
                .map(|(q, &pool)| DpdkPort {
                    life: Arc::new(QueueLife {
                        _dev: Arc::clone(&dev),
                    }),
                    port_id,
                    queue: q as u16,
                    pool,
                    mac: addr.addr_bytes,
                    mtu,
                    rx: [ptr::null_mut(); BURST],
                    tx: Box::new([ptr::null_mut(); TX_HOLD]),
                    tx_len: 0,
                    tx_prepared: 0,
                    held_since: None,
                    tx_dropped: 0,
                    rx_dropped: 0,
                    rx_bad_checksum: 0,
                    offload,
                    memif_client: false,
                    empty_bursts: 0,
                    link_checked: Instant::now(),
                    down_since: None,
                })
                .collect())
        }
    }

    /// Whether the link is up (memif: the peer process is connected).
    pub fn link_up(&self) -> bool {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: a started port and a valid out-pointer.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.port_id, &mut link) };
        rc == 0 && link.link_status() != 0
    }

    /// Waits up to `patience` for the link, restarting the device each second it stays down
    /// (as `watch_link` does), for a memif client whose queues no worker polls yet.
    fn await_link(&mut self, patience: Duration) -> io::Result<()> {
        let t = Instant::now();
        let mut restarted = Instant::now();
        while !self.link_up() {
            if t.elapsed() >= patience {
                return Err(io::Error::other(format!(
                    "memif link down for {patience:?} (is the server running?)"
                )));
            }
            if restarted.elapsed() >= Duration::from_secs(1) {
                // SAFETY: a started port of ours, whose queues nobody polls yet.
                unsafe {
                    sys::rte_eth_dev_stop(self.port_id);
                    sys::rte_eth_dev_start(self.port_id);
                }
                restarted = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Called when a poll finds nothing: a memif client connects only when its device starts,
    /// and a server that was not ready yet (between its probe and its start it answers "ID
    /// not found") or that restarted leaves it disconnected for good. So a client whose link
    /// has been down for a second restarts its device. Checked at most every 100 ms, and the
    /// clock read only every [`EMPTY_BURSTS_PER_LINK_CHECK`] empty bursts: a busy-polling
    /// core finds nothing most of its turns, and a clock read is a fair share of such a turn.
    fn watch_link(&mut self) {
        if !self.memif_client {
            return;
        }
        self.empty_bursts += 1;
        if self.empty_bursts < EMPTY_BURSTS_PER_LINK_CHECK {
            return;
        }
        self.empty_bursts = 0;
        if self.link_checked.elapsed() < Duration::from_millis(100) {
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
            self.discard_tx();
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

    /// Frames the TX ring has not taken yet (the device stops taking segments from TCP
    /// while there are, see [`Port::tx_ready`]).
    pub fn held(&self) -> usize {
        if self.held_since.is_some() {
            self.tx_len
        } else {
            0
        }
    }

    /// Frees every frame still waiting to be sent, counted as dropped.
    fn discard_tx(&mut self) {
        for &m in &self.tx[..self.tx_len] {
            // SAFETY: not taken by the PMD, still ours; freed once, as `tx_len` goes to 0.
            unsafe { sys::iw_pktmbuf_free(m) };
        }
        self.tx_dropped += self.tx_len as u64;
        self.tx_len = 0;
        self.tx_prepared = 0;
        self.held_since = None;
    }

    /// Room in `tx` for one more frame: a flush once a burst is batched (or while frames are
    /// held, to retry them first); false when the ring is still full and `tx` too.
    fn make_room(&mut self) -> bool {
        if self.tx_len >= BURST {
            let _ = self.flush();
        }
        self.tx_len < TX_HOLD
    }

    /// An mbuf holding `len` octets for a frame to send, or null (no mbuf free, or a frame
    /// longer than an mbuf carries).
    fn alloc(&mut self, len: usize) -> *mut sys::rte_mbuf {
        let Ok(len) = u16::try_from(len) else {
            return ptr::null_mut();
        };
        // SAFETY: the pool outlives the port; append returns room for `len` octets or null,
        // and an mbuf it refused is freed here, so the caller gets one ready or none.
        unsafe {
            let m = sys::iw_pktmbuf_alloc(self.pool);
            if m.is_null() {
                return m;
            }
            if sys::iw_pktmbuf_append(m, len).is_null() {
                sys::iw_pktmbuf_free(m);
                return ptr::null_mut();
            }
            m
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
    type Frame = RxMbuf;

    fn rx_burst<F: FnMut(RxMbuf)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        // Held frames go first, so the device takes segments again as soon as the ring has
        // room (a turn receives before it sends).
        if self.held_since.is_some() {
            let _ = self.flush();
        }
        let want = max.min(BURST) as u16;
        // SAFETY: `rx` has room for BURST mbuf pointers; the PMD fills at most `want`.
        let n = unsafe { sys::iw_rx_burst(self.port_id, self.queue, self.rx.as_mut_ptr(), want) }
            as usize;
        if n == 0 {
            self.watch_link();
        }
        let mut delivered = 0;
        for &m in &self.rx[..n] {
            // SAFETY: `m` is an mbuf the PMD handed us, whose first segment's data is
            // data_len octets long. It goes to `f` in an RxMbuf, which frees it, or is freed
            // here (with any segments chained to it); either way exactly once.
            unsafe {
                let len = sys::iw_pktmbuf_data_len(m) as usize;
                let data = sys::iw_pktmbuf_data(m) as *const u8;
                // A frame longer than one mbuf came in a chain: longer than our MTU.
                if len as u32 != sys::iw_pktmbuf_pkt_len(m) {
                    self.rx_dropped += 1;
                    sys::iw_pktmbuf_free(m);
                } else if self.offload.rx && !checksum_ok(m, std::slice::from_raw_parts(data, len))
                {
                    self.rx_bad_checksum += 1;
                    sys::iw_pktmbuf_free(m);
                } else {
                    f(RxMbuf {
                        m,
                        data,
                        len,
                        _life: Arc::clone(&self.life),
                    });
                    delivered += 1;
                }
            }
        }
        Ok(delivered)
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        if !self.make_room() {
            self.tx_dropped += 1;
            return Ok(());
        }
        let m = self.alloc(frame.len());
        if m.is_null() {
            self.tx_dropped += 1;
            return Ok(());
        }
        // SAFETY: `m` is ours with `frame.len()` octets appended at its data pointer.
        unsafe {
            let dst = sys::iw_pktmbuf_data(m) as *mut u8;
            ptr::copy_nonoverlapping(frame.as_ptr(), dst, frame.len());
            if self.offload.tx {
                offload_checksum(m, std::slice::from_raw_parts_mut(dst, frame.len()));
            }
        }
        self.tx[self.tx_len] = m;
        self.tx_len += 1;
        Ok(())
    }
    fn tx_with<R>(
        &mut self,
        len: usize,
        scratch: &mut Vec<u8>,
        build: impl FnOnce(&mut [u8]) -> (R, bool),
    ) -> (R, bool) {
        let m = if self.make_room() {
            self.alloc(len)
        } else {
            ptr::null_mut()
        };
        if m.is_null() {
            // No mbuf, or no room while the ring stays full: the frame is built (the
            // caller's state moves on) and dropped, as `tx` drops it; TCP retransmits.
            let (r, send, _) = super::build_in_scratch(scratch, len, build);
            self.tx_dropped += u64::from(send);
            return (r, send);
        }
        // SAFETY: `m` is ours with `len` octets appended at its data pointer. The pool's
        // memory was mapped zero-filled and holds only frames written since, so every octet
        // of the slice is initialised.
        let frame =
            unsafe { std::slice::from_raw_parts_mut(sys::iw_pktmbuf_data(m) as *mut u8, len) };
        let (r, send) = build(frame);
        if send {
            if self.offload.tx {
                // SAFETY: `m` is ours and `frame` its data.
                unsafe { offload_checksum(m, frame) };
            }
            self.tx[self.tx_len] = m;
            self.tx_len += 1;
        } else {
            // SAFETY: not queued, still ours.
            unsafe { sys::iw_pktmbuf_free(m) };
        }
        (r, send)
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.offload.tx {
            // The device's own fix-ups for offloads, once per frame (held frames had
            // theirs); a frame it refuses is dropped, those after it prepared in turn.
            while self.tx_prepared < self.tx_len {
                // SAFETY: entries tx_prepared..tx_len are mbufs we own.
                let n = unsafe {
                    sys::iw_tx_prepare(
                        self.port_id,
                        self.queue,
                        self.tx.as_mut_ptr().add(self.tx_prepared),
                        (self.tx_len - self.tx_prepared) as u16,
                    )
                } as usize;
                self.tx_prepared += n;
                if self.tx_prepared < self.tx_len {
                    // SAFETY: refused, not queued anywhere, still ours; removed from `tx`.
                    unsafe { sys::iw_pktmbuf_free(self.tx[self.tx_prepared]) };
                    self.tx_dropped += 1;
                    self.tx
                        .copy_within(self.tx_prepared + 1..self.tx_len, self.tx_prepared);
                    self.tx_len -= 1;
                }
            }
        } else {
            self.tx_prepared = self.tx_len;
        }
        // The PMD takes what its ring has room for (some take at most a burst a call).
        let mut sent = 0;
        while sent < self.tx_len {
            // SAFETY: entries sent..tx_len are mbufs we own; the PMD takes those it sends.
            let n = unsafe {
                sys::iw_tx_burst(
                    self.port_id,
                    self.queue,
                    self.tx.as_mut_ptr().add(sent),
                    (self.tx_len - sent) as u16,
                )
            } as usize;
            if n == 0 {
                break;
            }
            sent += n;
        }
        // A full TX ring: what it did not take waits, first in line for the next flush;
        // a ring that took nothing for `STALL` (a memif peer gone, a link down) has it
        // dropped, so that the device takes TCP's segments again.
        self.tx.copy_within(sent..self.tx_len, 0);
        self.tx_len -= sent;
        self.tx_prepared -= sent;
        if self.tx_len == 0 {
            self.held_since = None;
        } else if sent > 0 || self.held_since.is_none() {
            self.held_since = Some(Instant::now());
        } else if self.held_since.is_some_and(|t| t.elapsed() >= STALL) {
            self.discard_tx();
        }
        Ok(())
    }
    fn tx_ready(&self) -> bool {
        self.held_since.is_none()
    }
    fn tx_full(&self) -> bool {
        // Half the held frames: the rest is room for the ACKs made outside TCP's rounds.
        self.tx_len >= TX_HOLD / 2
    }
    fn dropped(&self) -> u64 {
        self.tx_dropped + self.rx_dropped
    }
    fn tcp_checksum_offload(&self) -> TcpChecksumOffload {
        self.offload
    }
    fn bad_checksums(&self) -> u64 {
        self.rx_bad_checksum
    }
}

/// Marks a TCP frame to send for the device to fill in its checksum ([`tcp_checksum`]);
/// anything else goes as it is.
///
/// # Safety
/// `m` is an mbuf we own and `frame` its data.
unsafe fn offload_checksum(m: *mut sys::rte_mbuf, frame: &mut [u8]) {
    if let Some(l3_len) = tcp_checksum::prepare_for_offload(frame) {
        sys::iw_pktmbuf_tx_tcp_cksum(m, ETHERNET_HEADER_LEN as u16, l3_len as u16);
    }
}

/// Whether a received frame's TCP checksum is right, as the device found it, or checked here
/// where the device did not.
///
/// # Safety
/// `m` is an mbuf we own and `frame` its data.
unsafe fn checksum_ok(m: *const sys::rte_mbuf, frame: &[u8]) -> bool {
    match sys::iw_pktmbuf_rx_l4_cksum(m) as u32 {
        sys::IW_L4_CKSUM_GOOD | sys::IW_L4_CKSUM_VERIFIED => true,
        sys::IW_L4_CKSUM_BAD => false,
        _ => tcp_checksum::tcp_checksum_ok(frame),
    }
}

/// What device `port_id` says of itself.
fn dev_info(port_id: u16) -> io::Result<sys::rte_eth_dev_info> {
    let mut info = sys::rte_eth_dev_info::default();
    // SAFETY: a port id DPDK gave us and a valid out-pointer.
    let rc = unsafe { sys::rte_eth_dev_info_get(port_id, &mut info) };
    if rc != 0 {
        return Err(dpdk_err("rte_eth_dev_info_get", rc));
    }
    Ok(info)
}

/// The name of a device's driver (`net_memif`, `net_ice`, ...).
fn driver_name(info: &sys::rte_eth_dev_info) -> String {
    if info.driver_name.is_null() {
        return String::new();
    }
    // SAFETY: the driver's name, a static C string.
    unsafe { CStr::from_ptr(info.driver_name) }
        .to_string_lossy()
        .into_owned()
}

/// The MTU to configure a device (described by `info`) with for `mtu`: `mtu` where the
/// device takes it; DPDK's default (0: 1500) for memif, which says it takes no more but
/// carries frames of any length; an error naming the device's limit for any other device.
fn device_mtu(info: &sys::rte_eth_dev_info, mtu: usize) -> io::Result<u32> {
    let driver = driver_name(info);
    // The frame's overhead beyond the MTU as ethdev reckons it when it checks one.
    let max_mtu = u32::from(info.max_mtu);
    let overhead = if max_mtu != u32::from(u16::MAX) && info.max_rx_pktlen > max_mtu {
        info.max_rx_pktlen - max_mtu
    } else {
        ETHERNET_HEADER_LEN as u32 + 4
    };
    let max = (info.max_rx_pktlen.saturating_sub(overhead)).min(max_mtu) as usize;
    let min = usize::from(info.min_mtu);
    if (min..=max).contains(&mtu) {
        Ok(mtu as u32)
    } else if driver == "net_memif" {
        Ok(0)
    } else {
        Err(io::Error::other(format!(
            "port.mtu {mtu}: the device ({driver}) takes an MTU of {min}..={max}"
        )))
    }
}

impl Drop for DpdkPort {
    fn drop(&mut self) {
        // The device goes with the last queue and the last frame they received.
        let _ = self.flush();
        self.discard_tx();
    }
}
