//! A DPDK port (feature `dpdk`): frames through a DPDK ethdev (a real NIC bound to vfio-pci
//! in production; `net_memif`, `net_af_packet`, `net_tap` or `net_ring` virtual devices in
//! tests), one RX and one TX queue, bursts of 32, frames copied into and out of mbufs
//! (zero-copy mbuf hand-over to smoltcp is future work).

use super::Port;
use dpdk_sys as sys;
use std::ffi::{CStr, CString};
use std::io;
use std::ptr;
use std::sync::OnceLock;

const BURST: usize = 32;
static EAL: OnceLock<Result<(), String>> = OnceLock::new();

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
}

impl DpdkPort {
    /// Opens the ethdev named `name` (a vdev name such as `net_memif0`, or a PCI address).
    /// EAL must be initialised first ([`eal_init`]).
    pub fn open(name: &str, mtu: usize) -> io::Result<DpdkPort> {
        let cname = CString::new(name).map_err(|_| io::Error::other("port name has a NUL"))?;
        let mut port_id = 0u16;
        // SAFETY: valid C string and out-pointer.
        let rc = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port_id) };
        if rc != 0 {
            return Err(dpdk_err(&format!("no DPDK port named {name}"), rc));
        }
        // SAFETY: plain calls on a valid port id; every return value is checked.
        unsafe {
            let socket = sys::rte_eth_dev_socket_id(port_id).max(0);
            let pool_name = CString::new(format!("iw_pool_{port_id}")).unwrap_or_default();
            let pool = sys::rte_pktmbuf_pool_create(
                pool_name.as_ptr(),
                8191,
                256,
                0,
                sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
                socket,
            );
            if pool.is_null() {
                return Err(dpdk_err("rte_pktmbuf_pool_create", sys::iw_errno()));
            }
            let conf = sys::rte_eth_conf::default();
            let rc = sys::rte_eth_dev_configure(port_id, 1, 1, &conf);
            if rc != 0 {
                return Err(dpdk_err("rte_eth_dev_configure", rc));
            }
            let rc =
                sys::rte_eth_rx_queue_setup(port_id, 0, 1024, socket as u32, ptr::null(), pool);
            if rc != 0 {
                return Err(dpdk_err("rte_eth_rx_queue_setup", rc));
            }
            let rc = sys::rte_eth_tx_queue_setup(port_id, 0, 1024, socket as u32, ptr::null());
            if rc != 0 {
                return Err(dpdk_err("rte_eth_tx_queue_setup", rc));
            }
            let rc = sys::rte_eth_dev_start(port_id);
            if rc != 0 {
                return Err(dpdk_err("rte_eth_dev_start", rc));
            }
            // Some virtual devices do not support promiscuous mode; we only need our MAC.
            let _ = sys::rte_eth_promiscuous_enable(port_id);
            let mut addr = sys::rte_ether_addr::default();
            let rc = sys::rte_eth_macaddr_get(port_id, &mut addr);
            if rc != 0 {
                return Err(dpdk_err("rte_eth_macaddr_get", rc));
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
            })
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
        // SAFETY: the pool outlives the port; append returns room for `len` octets or null.
        unsafe {
            let m = sys::iw_pktmbuf_alloc(self.pool);
            if m.is_null() {
                self.tx_dropped += 1;
                return Ok(());
            }
            let dst = sys::iw_pktmbuf_append(m, frame.len() as u16) as *mut u8;
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
}

impl Drop for DpdkPort {
    fn drop(&mut self) {
        let _ = self.flush();
        // SAFETY: the port was started in `open`; stopping and closing it once here.
        unsafe {
            sys::rte_eth_dev_stop(self.port_id);
            sys::rte_eth_dev_close(self.port_id);
        }
    }
}
