//! Devices and contexts: one device per reachable endpoint named in `IWARP_RUNTIME_DIR`, an
//! open device as a `verbs_context` in front of its `ibv_context`, and the queries (Verbs
//! section 8.2.2 Query RNIC; the port and GID as Linux siw reports them for an Ethernet
//! interface).
//!
//! Devices live for the process, as rdma-core's do: `ibv_free_device_list` frees only the
//! array, and a device listed again is the same object.
#![cfg_attr(test, allow(dead_code))]

use crate::abi::*;
use crate::events::EventQueue;
use crate::stub::set_errno;
use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};
use iwarp_abi::port_file::PortInfo;
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// An `ibv_device` and what this library knows of its endpoint. `ibv` comes first, so an
/// application's `struct ibv_device *` is a pointer to the whole.
#[repr(C)]
pub(crate) struct Device {
    ibv: ibv_device,
    pub(crate) runtime_dir: PathBuf,
    pub(crate) port: PortInfo,
}

/// Every device listed so far; boxed, so the addresses applications hold stay put while the
/// list grows.
#[allow(clippy::vec_box)]
type Devices = Vec<Box<Device>>;

static DEVICES: Mutex<Devices> = Mutex::new(Vec::new());

fn devices() -> MutexGuard<'static, Devices> {
    DEVICES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The runtime directories to look in: `IWARP_RUNTIME_DIR` (separated by `:`), else the
/// default configuration's, as `iwarp_verbs::Context::open_default` uses.
pub(crate) fn runtime_dirs() -> Vec<PathBuf> {
    match std::env::var_os("IWARP_RUNTIME_DIR") {
        Some(v) => std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        None => vec![iwarp_config::Config::default().runtime_dir()],
    }
}

/// The endpoint in `dir`, if its daemon described its port and its control answers.
fn probe(dir: &Path) -> Option<PortInfo> {
    let port = PortInfo::read(dir).ok()?;
    UnixStream::connect(dir.join("control.sock")).ok()?;
    Some(port)
}

fn copy_name(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

/// The device of `dir`, made on first sight; its name is the daemon's, made unique with a
/// suffix when two endpoints share one.
/// A device already listed keeps the port it was first seen with: open contexts read it
/// without the lock.
fn device_for(list: &mut Devices, dir: &Path, port: PortInfo) -> *mut ibv_device {
    if let Some(d) = list.iter_mut().find(|d| d.runtime_dir == dir) {
        return &mut d.ibv;
    }
    let mut name = port.name.clone();
    let mut n = 1;
    while list
        .iter()
        .any(|d| d.port.name == name || cstr(&d.ibv.name) == name)
    {
        name = format!("{}_{n}", port.name);
        n += 1;
    }
    let mut ibv = ibv_device {
        node_type: IBV_NODE_RNIC,
        transport_type: IBV_TRANSPORT_IWARP,
        ..Default::default()
    };
    copy_name(&mut ibv.name, &name);
    copy_name(&mut ibv.dev_name, &name);
    copy_name(&mut ibv.dev_path, &dir.to_string_lossy());
    copy_name(&mut ibv.ibdev_path, &dir.to_string_lossy());
    list.push(Box::new(Device {
        ibv,
        runtime_dir: dir.to_path_buf(),
        port,
    }));
    let last = list.last_mut().expect("pushed above");
    &mut last.ibv
}

fn cstr(s: &[c_char]) -> String {
    s.iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8 as char)
        .collect()
}

/// GID 0 as siw forms it for an Ethernet interface: the MAC, then zeros.
pub(crate) fn gid_of(mac: [u8; 6]) -> ibv_gid {
    let mut raw = [0u8; 16];
    raw[..6].copy_from_slice(&mac);
    ibv_gid { raw }
}

/// The node GUID as siw forms it: the MAC's modified EUI-64 (ff:fe in the middle, the
/// universal/local bit flipped), in network order as `ibv_get_device_guid` returns it.
pub(crate) fn guid_of(mac: [u8; 6]) -> u64 {
    let eui = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    // The bytes in memory are the GUID in network order.
    u64::from_ne_bytes(eui)
}

/// The largest IB MTU not above the IP MTU (siw's `ib_mtu_int_to_enum`).
pub(crate) fn ibv_mtu_of(mtu: u32) -> ibv_mtu {
    match mtu {
        4096.. => IBV_MTU_4096,
        2048.. => IBV_MTU_2048,
        1024.. => IBV_MTU_1024,
        512.. => IBV_MTU_512,
        _ => IBV_MTU_256,
    }
}

/// An open device: rdma-core's extended context, whose `context` member is the
/// `ibv_context` applications hold, then ours.
#[repr(C)]
pub(crate) struct Ctx {
    vctx: verbs_context,
    pub(crate) rnic: iwarp_verbs::Context,
    pub(crate) limits: iwarp_verbs::RnicAttr,
    pub(crate) device: *mut Device,
    /// Registered regions by lkey (their `verbs::Mr` addresses), for turning an SGE into a
    /// region. Posts hold the read lock, so a region cannot go while one names it.
    regions: RwLock<HashMap<u32, usize>>,
    /// The application's QPs, CQs and S-RQs by kind and number, for naming them in
    /// asynchronous events.
    pub(crate) objects: Mutex<HashMap<(Object, u32), usize>>,
    /// Asynchronous events not yet read, each counted in `async_fd`.
    async_events: EventQueue<ibv_async_event>,
}

/// What an asynchronous event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Object {
    Qp,
    Cq,
    Srq,
}

impl Ctx {
    /// The `Ctx` an application's `ibv_context` belongs to.
    ///
    /// # Safety
    /// `ctx` must come from [`ibv_open_device`] and not be closed.
    pub(crate) unsafe fn from_ibv<'a>(ctx: *mut ibv_context) -> Option<&'a mut Ctx> {
        if ctx.is_null() {
            return None;
        }
        let at = offset_of!(Ctx, vctx) + offset_of!(verbs_context, context);
        // SAFETY: every ibv_context this library hands out is the `vctx.context` of a boxed
        // Ctx (the caller's contract), so stepping back by its offset gives that Ctx.
        Some(unsafe { &mut *ctx.cast::<u8>().sub(at).cast::<Ctx>() })
    }

    pub(crate) fn regions_read(&self) -> RwLockReadGuard<'_, HashMap<u32, usize>> {
        self.regions.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn regions_write(&self) -> RwLockWriteGuard<'_, HashMap<u32, usize>> {
        self.regions.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The application's object of `kind` numbered `num`, if it still exists.
    pub(crate) fn object(&self, kind: Object, num: u32) -> Option<usize> {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(kind, num))
            .copied()
    }

    /// Queues an asynchronous event and counts it in `async_fd`.
    pub(crate) fn post_async(&self, ev: ibv_async_event) {
        self.async_events.post(ev);
    }

    pub(crate) fn port(&self) -> &PortInfo {
        // SAFETY: devices are never freed (see DEVICES), so the pointer stays valid.
        unsafe { &(*self.device).port }
    }
}

/// The port of a device of [`ibv_get_device_list`].
pub(crate) fn port_of(dev: *mut ibv_device) -> PortInfo {
    // SAFETY: every ibv_device handed out is the first member of a Device, never freed.
    unsafe { (*dev.cast::<Device>()).port.clone() }
}

pub(crate) unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let mut list = devices();
    let mut found: Vec<*mut ibv_device> = Vec::new();
    for dir in runtime_dirs() {
        if let Some(port) = probe(&dir) {
            found.push(device_for(&mut list, &dir, port));
        }
    }
    if !num.is_null() {
        // SAFETY: the caller passes a valid int or NULL.
        unsafe { *num = found.len() as c_int };
    }
    // NULL-terminated, allocated with malloc so it matches free() in ibv_free_device_list.
    let bytes = (found.len() + 1) * size_of::<*mut ibv_device>();
    // SAFETY: plain allocation; checked for NULL below.
    let arr = unsafe { libc::malloc(bytes) }.cast::<*mut ibv_device>();
    if arr.is_null() {
        set_errno(libc::ENOMEM);
        return arr;
    }
    for (i, d) in found.iter().chain([&core::ptr::null_mut()]).enumerate() {
        // SAFETY: `arr` has room for found.len() + 1 pointers.
        unsafe { *arr.add(i) = *d };
    }
    arr
}

pub(crate) unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` came from ibv_get_device_list's malloc (or is NULL).
    unsafe { libc::free(list.cast()) };
}

pub(crate) unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    if dev.is_null() {
        return core::ptr::null();
    }
    // SAFETY: a device from ibv_get_device_list; its name is NUL-terminated.
    unsafe { (*dev).name.as_ptr() }
}

pub(crate) unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    if dev.is_null() {
        return 0;
    }
    // SAFETY: every ibv_device handed out is the first member of a Device.
    let d = unsafe { &*dev.cast::<Device>() };
    guid_of(d.port.mac)
}

pub(crate) unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    let list = devices();
    list.iter()
        .position(|d| core::ptr::eq(&d.ibv, dev))
        .map_or(-1, |i| i as c_int)
}

pub(crate) unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    if dev.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let device = dev.cast::<Device>();
    // SAFETY: a device from ibv_get_device_list, never freed.
    let dir = unsafe { (*device).runtime_dir.clone() };
    let (rnic, limits) = match iwarp_verbs::Context::open(&dir).and_then(|c| {
        let l = c.query_rnic()?;
        Ok((c, l))
    }) {
        Ok(x) => x,
        Err(_) => {
            set_errno(libc::ENODEV);
            return core::ptr::null_mut();
        }
    };
    // The asynchronous events, counted in `async_fd`; closed with the context.
    let Some(async_events) = EventQueue::new() else {
        return core::ptr::null_mut();
    };
    let mut ctx = Box::new(Ctx {
        vctx: verbs_context::default(),
        rnic,
        limits,
        device,
        regions: RwLock::new(HashMap::new()),
        objects: Mutex::new(HashMap::new()),
        async_events,
    });
    let v = &mut ctx.vctx;
    v.sz = size_of::<verbs_context>();
    v.query_port = Some(query_port_ex);
    v.query_device_ex = Some(query_device_ex);
    crate::ex::fill_context(v);
    v.context.device = dev;
    v.context.cmd_fd = -1;
    v.context.async_fd = ctx.async_events.fd();
    v.context.num_comp_vectors = 1;
    v.context.abi_compat = usize::MAX as *mut c_void;
    crate::verbs::fill_ops(&mut v.context.ops);
    let ctx = Box::leak(ctx);
    let ibv: *mut ibv_context = &mut ctx.vctx.context;
    // Its connection and asynchronous events are collected from now on.
    crate::cm::watch(ibv);
    ibv
}

pub(crate) unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: the caller passes a context of ibv_open_device, closed once.
    let Some(c) = (unsafe { Ctx::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    crate::cm::unwatch(ctx);
    // SAFETY: `c` was leaked from a Box in ibv_open_device; this is its one release (its
    // eventfd closes with it).
    drop(unsafe { Box::from_raw(c as *mut Ctx) });
    0
}

fn device_attr(c: &Ctx) -> ibv_device_attr {
    let l = &c.limits;
    let mac = c.port().mac;
    let mut a = ibv_device_attr {
        node_guid: guid_of(mac),
        sys_image_guid: guid_of(mac),
        max_mr_size: u64::MAX,
        page_size_cap: !4095u64,
        max_qp: l.max_qp as c_int,
        max_qp_wr: l.max_sq_depth.min(l.max_rq_depth) as c_int,
        device_cap_flags: IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_MGT_EXTENSIONS,
        max_sge: l.max_sge as c_int,
        max_sge_rd: l.max_sge as c_int,
        max_cq: l.max_cq as c_int,
        max_cqe: l.max_cqe as c_int,
        max_mr: l.max_mr as c_int,
        max_pd: l.max_pd as c_int,
        // The inbound Read/atomic queue depth (IRD) and the outbound one (ORD).
        max_qp_rd_atom: l.max_ird as c_int,
        max_res_rd_atom: (l.max_ird as c_int).saturating_mul(l.max_qp as c_int),
        max_qp_init_rd_atom: l.max_ord as c_int,
        // Atomics are carried by RDMAP (RFC 7306) and executed by the responding daemon.
        atomic_cap: IBV_ATOMIC_HCA,
        max_mw: l.max_mw as c_int,
        max_srq: l.max_srq as c_int,
        max_srq_wr: l.max_rq_depth as c_int,
        max_srq_sge: l.max_sge as c_int,
        phys_port_cnt: 1,
        ..Default::default()
    };
    copy_name(&mut a.fw_ver, env!("CARGO_PKG_VERSION"));
    a
}

pub(crate) unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: a context of ibv_open_device.
    let (Some(c), false) = (unsafe { Ctx::from_ibv(ctx) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's attribute struct.
    unsafe { *attr = device_attr(c) };
    0
}

/// `verbs_context.query_device_ex`: the basic attributes and zeros for the extensions
/// this device has none of, within the caller's `attr_size`.
unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: a context of ibv_open_device; `input` is NULL or the caller's.
    let Some(c) = (unsafe { Ctx::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    // SAFETY: as above.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    let mut full = ibv_device_attr_ex {
        orig_attr: device_attr(c),
        phys_port_cnt_ex: 1,
        ..Default::default()
    };
    full.comp_mask = 0;
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: the caller's buffer holds `attr_size` octets; zero what we do not know.
    unsafe {
        core::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
        core::ptr::copy_nonoverlapping(
            (&full as *const ibv_device_attr_ex).cast::<u8>(),
            attr.cast(),
            n,
        );
    }
    0
}

fn port_attr(c: &Ctx) -> ibv_port_attr {
    ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: IBV_MTU_4096,
        active_mtu: ibv_mtu_of(c.port().mtu),
        gid_tbl_len: 1,
        port_cap_flags: 0,
        max_msg_sz: u32::MAX,
        pkey_tbl_len: 1,
        // 1X at 25 Gb/s: a nominal rate, since a software port has no line rate of its own.
        active_width: 1,
        active_speed: 32,
        // LinkUp (IBTA: 5), as siw reports an interface that is up.
        phys_state: 5,
        link_layer: IBV_LINK_LAYER_ETHERNET as u8,
        ..Default::default()
    }
}

/// `verbs_context.query_port`, which `verbs.h`'s inline `ibv_query_port` calls.
unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    attr_size: usize,
) -> c_int {
    // SAFETY: a context of ibv_open_device.
    let Some(c) = (unsafe { Ctx::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let full = port_attr(c);
    let n = attr_size.min(size_of::<ibv_port_attr>());
    // SAFETY: the caller's buffer holds `attr_size` octets.
    unsafe {
        core::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
        core::ptr::copy_nonoverlapping(
            (&full as *const ibv_port_attr).cast::<u8>(),
            attr.cast(),
            n,
        );
    }
    0
}

/// The exported `ibv_query_port`, for programs built before the inline one: they pass
/// rdma-core's older, shorter structure (everything up to `flags`).
pub(crate) unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded with the compat structure's size.
    unsafe { query_port_ex(ctx, port, attr, offset_of!(ibv_port_attr, flags) + 1) }
}

pub(crate) unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: a context of ibv_open_device.
    let Some(c) = (unsafe { Ctx::from_ibv(ctx) }) else {
        return -1;
    };
    if port != 1 || index != 0 || gid.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's GID.
    unsafe { *gid = gid_of(c.port().mac) };
    0
}

/// `ibv_gid_type_sysfs` of rdma-core's driver.h: what the kernel's sysfs says of a GID;
/// an iWARP device's GIDs are of the first kind ("IB/RoCE v1").
const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;

pub(crate) unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut u32,
) -> c_int {
    // SAFETY: a context of ibv_open_device.
    if unsafe { Ctx::from_ibv(ctx) }.is_none() || port != 1 || index != 0 || ty.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's out-parameter.
    unsafe { *ty = IBV_GID_TYPE_SYSFS_IB_ROCE_V1 };
    0
}

pub(crate) unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: a context of ibv_open_device.
    let Some(c) = (unsafe { Ctx::from_ibv(ctx) }) else {
        return libc::EINVAL;
    };
    if flags != 0 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    if port != 1 || index != 0 {
        return libc::EINVAL;
    }
    let e = ibv_gid_entry {
        gid: gid_of(c.port().mac),
        gid_index: 0,
        port_num: 1,
        gid_type: IBV_GID_TYPE_IB,
        ndev_ifindex: 0,
    };
    // SAFETY: the caller's entry, at least as large as ours (checked).
    unsafe { *entry = e };
    0
}

pub(crate) unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: the caller's context.
    let Some(c) = (unsafe { Ctx::from_ibv(ctx) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let Some(e) = c.async_events.take() else {
        return -1;
    };
    // SAFETY: the caller's out-parameter.
    unsafe { *event = e };
    0
}

pub(crate) unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {
    // Events are copies: nothing waits for their acknowledgement.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_and_guid_as_siw_forms_them() {
        let mac = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
        // SAFETY: reading the union's raw view, which is every variant's bytes.
        let raw = unsafe { gid_of(mac).raw };
        assert_eq!(raw, [2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        // 02:00:00 -> 00:00:00 (U/L bit flipped), ff:fe inserted; network order in memory.
        assert_eq!(
            guid_of(mac).to_ne_bytes(),
            [0x00, 0x00, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x01]
        );
    }

    #[test]
    fn active_mtu_is_the_largest_ib_mtu_that_fits() {
        assert_eq!(ibv_mtu_of(1500), IBV_MTU_1024);
        assert_eq!(ibv_mtu_of(9000), IBV_MTU_4096);
        assert_eq!(ibv_mtu_of(2048), IBV_MTU_2048);
        assert_eq!(ibv_mtu_of(100), IBV_MTU_256);
    }

    #[test]
    fn runtime_dirs_split_on_colons() {
        // Only this test reads the variable in this process's unit tests.
        // SAFETY: no other thread of this test binary touches the environment.
        unsafe { std::env::set_var("IWARP_RUNTIME_DIR", "/a::/b/c") };
        assert_eq!(
            runtime_dirs(),
            vec![PathBuf::from("/a"), PathBuf::from("/b/c")]
        );
        // SAFETY: as above.
        unsafe { std::env::remove_var("IWARP_RUNTIME_DIR") };
    }
}
