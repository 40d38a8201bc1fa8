//! The C ABI of `iwarp-verbs` (`include/iwarp_verbs.h`): opaque handles that box the Rust
//! objects, integer status codes, and a per-thread last-error message.
//!
//! Every function dereferences handles the caller got from this library; the header states
//! the contract (valid handles, destroy order). Nothing here panics across the boundary: a
//! null handle is an error return, and Rust errors become messages for `iwv_last_error`.

use iwarp_verbs::Stag;
use iwarp_verbs::{
    ConnSettings, Context, Established, Event, FastRegStag, MemoryRegion, MemoryWindow,
    ProtectionDomain, QpInitAttr, QueuePair, RecvWr, SendWr, Sg, SharedBuffer, SharedReceiveQueue,
    WorkCompletion, WrOpcode,
};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub struct IwvCq(Arc<iwarp_verbs::CompletionQueue>);
pub struct IwvSrq(Arc<SharedReceiveQueue>);

/// At most this many SGEs per work request (the QPs this ABI creates allow 4).
const MAX_SGE: usize = 4;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(msg: impl std::fmt::Display) {
    let text = CString::new(msg.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// The value, or `on_err` with the error left for `iwv_last_error`.
fn or_fail<T>(r: Result<T, impl std::fmt::Display>, on_err: T) -> T {
    r.unwrap_or_else(|e| {
        fail(e);
        on_err
    })
}

fn boxed<T>(r: Result<T, impl std::fmt::Display>) -> *mut T {
    or_fail(r.map(|v| Box::into_raw(Box::new(v))), core::ptr::null_mut())
}

fn status(r: Result<(), impl std::fmt::Display>) -> c_int {
    or_fail(r.map(|()| 0), -1)
}

/// The handle behind `p`, or an error for a null one.
///
/// # Safety
/// `p` is null or a live handle of type `T` from this library.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, String> {
    // SAFETY: per this function's contract.
    unsafe { p.as_ref() }.ok_or_else(|| format!("{what} is NULL"))
}

/// # Safety
/// `p` is null or a pointer this library returned and not yet freed.
unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: per this function's contract: it came from Box::into_raw.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// The last error of this thread.
#[no_mangle]
pub extern "C" fn iwv_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// # Safety
/// `runtime_dir` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn iwv_open(runtime_dir: *const c_char) -> *mut Context {
    if runtime_dir.is_null() {
        return boxed(Context::open_default());
    }
    // SAFETY: a NUL-terminated string, per the contract.
    let dir = unsafe { CStr::from_ptr(runtime_dir) };
    match dir.to_str() {
        Ok(d) => boxed(Context::open(Path::new(d))),
        Err(e) => boxed::<Context>(Err(e)),
    }
}

/// # Safety
/// `ctx` is null or a context from `iwv_open`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn iwv_close(ctx: *mut Context) {
    // SAFETY: forwarded contract.
    unsafe { free(ctx) }
}

/// # Safety
/// `ctx` is a live context.
#[no_mangle]
pub unsafe extern "C" fn iwv_alloc_pd(ctx: *mut Context) -> *mut ProtectionDomain {
    // SAFETY: forwarded contract.
    boxed(unsafe { handle(ctx, "context") }.and_then(|c| c.alloc_pd().map_err(|e| e.to_string())))
}

/// # Safety
/// `pd` is null or a PD from `iwv_alloc_pd` whose QPs and regions are gone.
#[no_mangle]
pub unsafe extern "C" fn iwv_dealloc_pd(pd: *mut ProtectionDomain) {
    // SAFETY: forwarded contract.
    unsafe { free(pd) }
}

/// # Safety
/// `ctx` is a live context.
#[no_mangle]
pub unsafe extern "C" fn iwv_create_cq(ctx: *mut Context, depth: u32) -> *mut IwvCq {
    // SAFETY: forwarded contract.
    boxed(
        unsafe { handle(ctx, "context") }
            .and_then(|c| c.create_cq(depth).map(IwvCq).map_err(|e| e.to_string())),
    )
}

/// # Safety
/// `cq` is null or a CQ from `iwv_create_cq`.
#[no_mangle]
pub unsafe extern "C" fn iwv_destroy_cq(cq: *mut IwvCq) {
    // SAFETY: forwarded contract.
    unsafe { free(cq) }
}

/// # Safety
/// `cq` is a live CQ.
#[no_mangle]
pub unsafe extern "C" fn iwv_query_cq(cq: *mut IwvCq) -> i64 {
    // SAFETY: forwarded contract.
    let depth = unsafe { handle(cq, "cq") }.and_then(|c| c.0.query().map_err(|e| e.to_string()));
    or_fail(depth.map(i64::from), -1)
}

/// # Safety
/// `cq` is a live CQ, polled by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn iwv_resize_cq(cq: *mut IwvCq, depth: u32) -> c_int {
    // SAFETY: forwarded contract.
    status(
        unsafe { handle(cq, "cq") }
            .and_then(|c| c.0.resize(depth).map(|_| ()).map_err(|e| e.to_string())),
    )
}

/// # Safety
/// `cq` is a live CQ.
#[no_mangle]
pub unsafe extern "C" fn iwv_cq_num(cq: *const IwvCq) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { handle(cq, "cq") }.map_or(0, |c| c.0.cq_num().into())
}

fn c_wc(wc: &WorkCompletion) -> CWc {
    CWc {
        wr_id: wc.wr_id,
        status: wc.status as c_int,
        opcode: wc.opcode as c_int,
        byte_len: wc.byte_len,
        qp_num: wc.qp_num,
        imm_data: wc.imm_data.unwrap_or(0),
        has_imm: wc.imm_data.is_some() as c_int,
    }
}

/// `struct iwv_wc`.
#[repr(C)]
pub struct CWc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub byte_len: u32,
    pub qp_num: u32,
    pub imm_data: u64,
    pub has_imm: c_int,
}

/// # Safety
/// `cq` is a live CQ; `wc` points to `n` writable `struct iwv_wc`.
#[no_mangle]
pub unsafe extern "C" fn iwv_poll_cq(cq: *mut IwvCq, n: c_int, wc: *mut CWc) -> c_int {
    let polled = (|| {
        // SAFETY: forwarded contract.
        let cq = unsafe { handle(cq, "cq") }?;
        if wc.is_null() || n < 0 {
            return Err("wc is NULL or n is negative".to_string());
        }
        let mut got = 0;
        while got < n {
            let Some(w) = cq.0.poll_one().map_err(|e| e.to_string())? else {
                break;
            };
            // SAFETY: `got < n` and `wc` holds `n` entries, per the contract.
            unsafe { wc.add(got as usize).write(c_wc(&w)) };
            got += 1;
        }
        Ok(got)
    })();
    or_fail(polled, -1)
}

/// # Safety
/// `cq` is a live CQ; `wc` points to a writable `struct iwv_wc`.
#[no_mangle]
pub unsafe extern "C" fn iwv_wait_cq(cq: *mut IwvCq, timeout_ms: c_int, wc: *mut CWc) -> c_int {
    let waited = (|| {
        // SAFETY: forwarded contract.
        let cq = unsafe { handle(cq, "cq") }?;
        if wc.is_null() {
            return Err("wc is NULL".to_string());
        }
        Ok(
            match cq.0.wait(timeout(timeout_ms)).map_err(|e| e.to_string())? {
                Some(w) => {
                    // SAFETY: non-null and writable, per the contract.
                    unsafe { wc.write(c_wc(&w)) };
                    1
                }
                None => 0,
            },
        )
    })();
    or_fail(waited, -1)
}

/// A QP with its own receive queue (`srq` None) or taking receives from an S-RQ.
///
/// # Safety
/// `pd`, `send_cq`, `recv_cq` and any `srq` are null or live handles.
unsafe fn create_qp(
    pd: *mut ProtectionDomain,
    send_cq: *mut IwvCq,
    recv_cq: *mut IwvCq,
    srq: Option<*mut IwvSrq>,
    depth: u32,
) -> *mut QueuePair {
    boxed((|| {
        // SAFETY: forwarded contract.
        let (pd, s, r) = unsafe {
            (
                handle(pd, "pd")?,
                handle(send_cq, "send_cq")?,
                handle(recv_cq, "recv_cq")?,
            )
        };
        let mut attr = QpInitAttr::new(&s.0, depth);
        attr.recv_cq = r.0.clone();
        if let Some(q) = srq {
            // SAFETY: forwarded contract.
            attr.srq = Some(unsafe { handle(q, "srq") }?.0.clone());
        }
        pd.create_qp(&attr).map_err(|e| e.to_string())
    })())
}

/// # Safety
/// `pd`, `send_cq` and `recv_cq` are live handles.
#[no_mangle]
pub unsafe extern "C" fn iwv_create_qp(
    pd: *mut ProtectionDomain,
    send_cq: *mut IwvCq,
    recv_cq: *mut IwvCq,
    depth: u32,
) -> *mut QueuePair {
    // SAFETY: forwarded contract.
    unsafe { create_qp(pd, send_cq, recv_cq, None, depth) }
}

/// # Safety
/// `pd`, `send_cq`, `recv_cq` and `srq` are live handles.
#[no_mangle]
pub unsafe extern "C" fn iwv_create_qp_srq(
    pd: *mut ProtectionDomain,
    send_cq: *mut IwvCq,
    recv_cq: *mut IwvCq,
    srq: *mut IwvSrq,
    depth: u32,
) -> *mut QueuePair {
    // SAFETY: forwarded contract.
    unsafe { create_qp(pd, send_cq, recv_cq, Some(srq), depth) }
}

/// # Safety
/// `pd` is a live PD.
#[no_mangle]
pub unsafe extern "C" fn iwv_create_srq(pd: *mut ProtectionDomain, depth: u32) -> *mut IwvSrq {
    // SAFETY: forwarded contract.
    boxed(
        unsafe { handle(pd, "pd") }
            .and_then(|p| p.create_srq(depth).map(IwvSrq).map_err(|e| e.to_string())),
    )
}

/// # Safety
/// `srq` is null or an S-RQ from `iwv_create_srq` (its QPs keep it alive until destroyed).
#[no_mangle]
pub unsafe extern "C" fn iwv_destroy_srq(srq: *mut IwvSrq) {
    // SAFETY: forwarded contract.
    unsafe { free(srq) }
}

/// # Safety
/// `srq` is a live S-RQ.
#[no_mangle]
pub unsafe extern "C" fn iwv_srq_num(srq: *const IwvSrq) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { handle(srq, "srq") }.map_or(0, |q| q.0.srq_num().into())
}

/// # Safety
/// `srq` is a live S-RQ; `sg_list` holds `num_sge` valid entries.
#[no_mangle]
pub unsafe extern "C" fn iwv_post_srq_recv(
    srq: *mut IwvSrq,
    wr_id: u64,
    sg_list: *const CSge,
    num_sge: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    status(unsafe { handle(srq, "srq") }.and_then(|q| {
        // SAFETY: forwarded contract.
        unsafe {
            with_sgl(sg_list, num_sge, |sgl| {
                q.0.post_recv(&RecvWr {
                    wr_id,
                    sg_list: sgl,
                })
                .map_err(|e| e.to_string())
            })
        }
    }))
}

/// # Safety
/// `srq` is a live S-RQ.
#[no_mangle]
pub unsafe extern "C" fn iwv_arm_srq_limit(srq: *mut IwvSrq, limit: u32) -> c_int {
    // SAFETY: forwarded contract.
    status(
        unsafe { handle(srq, "srq") }.and_then(|q| q.0.arm_limit(limit).map_err(|e| e.to_string())),
    )
}

/// # Safety
/// `srq` is a live S-RQ; `depth` and `limit` are writable.
#[no_mangle]
pub unsafe extern "C" fn iwv_query_srq(
    srq: *mut IwvSrq,
    depth: *mut u32,
    limit: *mut u32,
) -> c_int {
    status((|| {
        // SAFETY: forwarded contract.
        let q = unsafe { handle(srq, "srq") }?;
        if depth.is_null() || limit.is_null() {
            return Err("depth or limit is NULL".to_string());
        }
        let (d, l) = q.0.query().map_err(|e| e.to_string())?;
        // SAFETY: non-null and writable, per the contract.
        unsafe {
            depth.write(d);
            limit.write(l);
        }
        Ok(())
    })())
}

/// # Safety
/// `qp` is null or a QP from `iwv_create_qp`.
#[no_mangle]
pub unsafe extern "C" fn iwv_destroy_qp(qp: *mut QueuePair) {
    // SAFETY: forwarded contract.
    unsafe { free(qp) }
}

/// # Safety
/// `qp` is a live QP.
#[no_mangle]
pub unsafe extern "C" fn iwv_qp_num(qp: *const QueuePair) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { handle(qp, "qp") }.map_or(0, |q| q.qp_num().into())
}

/// `struct iwv_sge`.
#[repr(C)]
pub struct CSge {
    pub mr: *mut MemoryRegion,
    pub offset: u64,
    pub length: u32,
}

/// `struct iwv_send_wr`.
#[repr(C)]
pub struct CSendWr {
    pub wr_id: u64,
    pub opcode: c_int,
    pub sg_list: *const CSge,
    pub num_sge: c_int,
    pub rkey: u32,
    pub remote_addr: u64,
    pub imm_data: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub signaled: c_int,
}

/// Runs `f` on the SGEs of a C list, without allocating.
///
/// # Safety
/// `list` points to `n` `struct iwv_sge` whose `mr` are live regions.
unsafe fn with_sgl<R>(
    list: *const CSge,
    n: c_int,
    f: impl FnOnce(&[Sg<'_>]) -> Result<R, String>,
) -> Result<R, String> {
    if n < 0 || n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        return Err(format!("num_sge {n}: between 0 and {MAX_SGE}, with a list"));
    }
    if n == 0 {
        return f(&[]);
    }
    // SAFETY: `n` entries, per the contract.
    let c = unsafe { core::slice::from_raw_parts(list, n as usize) };
    // SAFETY: each `mr` is null or live, per the contract.
    let first = unsafe { handle(c[0].mr, "sge mr") }?;
    let mut sgl = [Sg {
        mr: first,
        offset: 0,
        len: 0,
    }; MAX_SGE];
    for (s, x) in sgl.iter_mut().zip(c) {
        *s = Sg {
            // SAFETY: as above.
            mr: unsafe { handle(x.mr, "sge mr") }?,
            offset: x.offset,
            len: x.length,
        };
    }
    f(&sgl[..n as usize])
}

fn opcode(wr: &CSendWr) -> Result<WrOpcode, String> {
    let (rkey, remote_addr) = (wr.rkey, wr.remote_addr);
    Ok(match wr.opcode {
        0 => WrOpcode::Send,
        1 => WrOpcode::SendWithImm {
            imm: wr.imm_data as u32,
        },
        2 => WrOpcode::RdmaWrite {
            rkey: Stag(rkey),
            remote_addr,
        },
        3 => WrOpcode::RdmaWriteWithImm {
            rkey: Stag(rkey),
            remote_addr,
            imm: wr.imm_data,
        },
        4 => WrOpcode::RdmaRead {
            rkey: Stag(rkey),
            remote_addr,
        },
        5 => WrOpcode::FetchAdd {
            rkey: Stag(rkey),
            remote_addr,
            add: wr.compare_add,
        },
        6 => WrOpcode::CmpSwap {
            rkey: Stag(rkey),
            remote_addr,
            compare: wr.compare_add,
            swap: wr.swap,
        },
        7 => WrOpcode::SendWithInvalidate { stag: Stag(rkey) },
        8 => WrOpcode::Immediate { imm: wr.imm_data },
        o => return Err(format!("unknown opcode {o}")),
    })
}

/// # Safety
/// `qp` is a live QP; `wr` points to a `struct iwv_send_wr` whose list is valid.
#[no_mangle]
pub unsafe extern "C" fn iwv_post_send(qp: *mut QueuePair, wr: *const CSendWr) -> c_int {
    status((|| {
        // SAFETY: forwarded contract (the handles, then the work request's list).
        unsafe {
            let (qp, wr) = (handle(qp, "qp")?, handle(wr, "wr")?);
            with_sgl(wr.sg_list, wr.num_sge, |sgl| {
                let mut w = SendWr::new(wr.wr_id, opcode(wr)?, sgl);
                w.signaled = wr.signaled != 0;
                qp.post_send(&w).map_err(|e| e.to_string())
            })
        }
    })())
}

/// # Safety
/// `qp` is a live QP; `sg_list` holds `num_sge` valid entries.
#[no_mangle]
pub unsafe extern "C" fn iwv_post_recv(
    qp: *mut QueuePair,
    wr_id: u64,
    sg_list: *const CSge,
    num_sge: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    status(unsafe { handle(qp, "qp") }.and_then(|qp| {
        // SAFETY: forwarded contract.
        unsafe {
            with_sgl(sg_list, num_sge, |sgl| {
                qp.post_recv(&RecvWr {
                    wr_id,
                    sg_list: sgl,
                })
                .map_err(|e| e.to_string())
            })
        }
    }))
}

/// # Safety
/// `ctx` is a live context.
#[no_mangle]
pub unsafe extern "C" fn iwv_alloc_buffer(ctx: *mut Context, len: usize) -> *mut SharedBuffer {
    // SAFETY: forwarded contract.
    boxed(
        unsafe { handle(ctx, "context") }
            .and_then(|c| c.alloc_buffer(len).map_err(|e| e.to_string())),
    )
}

/// # Safety
/// `buf` is a live buffer.
#[no_mangle]
pub unsafe extern "C" fn iwv_buffer_ptr(buf: *mut SharedBuffer) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { handle(buf, "buffer") }.map_or(core::ptr::null_mut(), |b| b.as_ptr().cast())
}

/// # Safety
/// `buf` is null or a buffer from `iwv_alloc_buffer`.
#[no_mangle]
pub unsafe extern "C" fn iwv_free_buffer(buf: *mut SharedBuffer) {
    // SAFETY: forwarded contract.
    unsafe { free(buf) }
}

/// # Safety
/// `pd` and `buf` are live handles.
#[no_mangle]
pub unsafe extern "C" fn iwv_reg_mr(
    pd: *mut ProtectionDomain,
    buf: *mut SharedBuffer,
    offset: u64,
    len: u64,
    access: u32,
) -> *mut MemoryRegion {
    boxed((|| {
        // SAFETY: forwarded contract.
        let (pd, buf) = unsafe { (handle(pd, "pd")?, handle(buf, "buffer")?) };
        pd.reg_mr(buf, offset, len, access)
            .map_err(|e| e.to_string())
    })())
}

/// # Safety
/// `pd` and `buf` are live handles.
#[no_mangle]
pub unsafe extern "C" fn iwv_reg_mr_va(
    pd: *mut ProtectionDomain,
    buf: *mut SharedBuffer,
    offset: u64,
    len: u64,
    access: u32,
    va: u64,
) -> *mut MemoryRegion {
    boxed((|| {
        // SAFETY: forwarded contract.
        let (pd, buf) = unsafe { (handle(pd, "pd")?, handle(buf, "buffer")?) };
        pd.reg_mr_va(buf, offset, len, access, va)
            .map_err(|e| e.to_string())
    })())
}

/// # Safety
/// `mr` is a live region.
#[no_mangle]
pub unsafe extern "C" fn iwv_mr_stag(mr: *const MemoryRegion) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { handle(mr, "mr") }.map_or(0, |m| m.stag().into())
}

/// # Safety
/// `mr` is null or a region from `iwv_reg_mr`; after success it is gone.
#[no_mangle]
pub unsafe extern "C" fn iwv_dereg_mr(mr: *mut MemoryRegion) -> c_int {
    if mr.is_null() {
        fail("mr is NULL");
        return -1;
    }
    // SAFETY: `mr` came from Box::into_raw (the contract); the value is moved out and either
    // written back in place (refused: the caller's handle stays valid) or its allocation
    // freed without dropping it again.
    let m = unsafe { mr.read() };
    match m.deregister() {
        Ok(()) => {
            // SAFETY: as above; MaybeUninit has the same layout and does not drop.
            drop(unsafe { Box::from_raw(mr as *mut core::mem::MaybeUninit<MemoryRegion>) });
            0
        }
        Err((m, e)) => {
            fail(e);
            // SAFETY: as above: the allocation is still ours and holds no value now.
            unsafe { mr.write(m) };
            -1
        }
    }
}

/// # Safety
/// `pd` is a live PD.
#[no_mangle]
pub unsafe extern "C" fn iwv_alloc_mw(pd: *mut ProtectionDomain) -> *mut MemoryWindow {
    // SAFETY: forwarded contract.
    boxed(unsafe { handle(pd, "pd") }.and_then(|p| p.alloc_mw().map_err(|e| e.to_string())))
}

/// # Safety
/// `mw` is null or a window from `iwv_alloc_mw`.
#[no_mangle]
pub unsafe extern "C" fn iwv_dealloc_mw(mw: *mut MemoryWindow) {
    // SAFETY: forwarded contract.
    unsafe { free(mw) }
}

/// # Safety
/// `mw` is a live window.
#[no_mangle]
pub unsafe extern "C" fn iwv_mw_stag(mw: *const MemoryWindow) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { handle(mw, "mw") }.map_or(0, |m| m.stag().into())
}

/// # Safety
/// `pd` is a live PD.
#[no_mangle]
pub unsafe extern "C" fn iwv_alloc_fastreg_stag(pd: *mut ProtectionDomain) -> *mut FastRegStag {
    // SAFETY: forwarded contract.
    boxed(
        unsafe { handle(pd, "pd") }.and_then(|p| p.alloc_fastreg_stag().map_err(|e| e.to_string())),
    )
}

/// # Safety
/// `f` is null or an STag from `iwv_alloc_fastreg_stag`.
#[no_mangle]
pub unsafe extern "C" fn iwv_dealloc_fastreg_stag(f: *mut FastRegStag) {
    // SAFETY: forwarded contract.
    unsafe { free(f) }
}

/// # Safety
/// `f` is a live fast-register STag.
#[no_mangle]
pub unsafe extern "C" fn iwv_fastreg_stag(f: *const FastRegStag) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { handle(f, "fastreg") }.map_or(0, |x| x.stag().into())
}

/// Posts one send work request without a scatter/gather list.
///
/// # Safety
/// `qp` is null or a live QP.
unsafe fn post_bare(qp: *mut QueuePair, wr_id: u64, op: WrOpcode) -> Result<(), String> {
    // SAFETY: forwarded contract.
    unsafe { handle(qp, "qp") }?
        .post_send(&SendWr::new(wr_id, op, &[]))
        .map_err(|e| e.to_string())
}

/// # Safety
/// `qp`, `mw` and `mr` are live handles.
#[no_mangle]
pub unsafe extern "C" fn iwv_post_bind_mw(
    qp: *mut QueuePair,
    wr_id: u64,
    mw: *const MemoryWindow,
    mr: *const MemoryRegion,
    offset: u64,
    len: u64,
    access: u32,
) -> c_int {
    status((|| {
        // SAFETY: forwarded contract.
        let op = unsafe {
            WrOpcode::BindMw {
                mw: handle(mw, "mw")?.stag(),
                mr: handle(mr, "mr")?.stag(),
                to: offset,
                len,
                access,
            }
        };
        // SAFETY: forwarded contract.
        unsafe { post_bare(qp, wr_id, op) }
    })())
}

/// # Safety
/// `qp`, `f` and `mr` are live handles.
#[no_mangle]
pub unsafe extern "C" fn iwv_post_fast_reg(
    qp: *mut QueuePair,
    wr_id: u64,
    f: *const FastRegStag,
    mr: *const MemoryRegion,
    offset: u64,
    len: u64,
    access: u32,
) -> c_int {
    status((|| {
        // SAFETY: forwarded contract.
        let op = unsafe {
            WrOpcode::FastRegister {
                stag: handle(f, "fastreg")?.stag(),
                mr: handle(mr, "mr")?.stag(),
                offset,
                len,
                access,
            }
        };
        // SAFETY: forwarded contract.
        unsafe { post_bare(qp, wr_id, op) }
    })())
}

/// # Safety
/// `qp` is a live QP.
#[no_mangle]
pub unsafe extern "C" fn iwv_post_local_inv(qp: *mut QueuePair, wr_id: u64, stag: u32) -> c_int {
    // SAFETY: forwarded contract.
    status(unsafe { post_bare(qp, wr_id, WrOpcode::LocalInvalidate { stag: Stag(stag) }) })
}

/// `struct iwv_async_event`.
#[repr(C)]
pub struct CAsyncEvent {
    pub kind: c_int,
    pub id: u32,
    pub received: c_int,
    pub layer: u8,
    pub etype: u8,
    pub code: u8,
    pub reason: [c_char; 128],
}

fn c_event(e: &Event) -> Option<CAsyncEvent> {
    let mut c = CAsyncEvent {
        kind: 0,
        id: 0,
        received: 0,
        layer: 0,
        etype: 0,
        code: 0,
        reason: [0; 128],
    };
    match e {
        Event::Disconnected { conn, reason } => {
            (c.kind, c.id) = (1, *conn);
            let n = reason.len().min(127);
            for (d, s) in c.reason.iter_mut().zip(&reason.as_bytes()[..n]) {
                *d = *s as c_char;
            }
        }
        Event::QpTerminated(t) => {
            (c.kind, c.id, c.received) = (2, t.qp.0, t.received as c_int);
            (c.layer, c.etype, c.code) = (t.layer, t.etype, t.code);
        }
        Event::QpError { qp } => (c.kind, c.id) = (3, qp.0),
        Event::CqOverflow { cq } => (c.kind, c.id) = (4, cq.0),
        Event::SrqLimit { srq } => (c.kind, c.id) = (5, srq.0),
        _ => return None,
    }
    Some(c)
}

/// # Safety
/// `ctx` is a live context; `ev` points to a writable `struct iwv_async_event`.
#[no_mangle]
pub unsafe extern "C" fn iwv_get_async_event(
    ctx: *mut Context,
    timeout_ms: c_int,
    ev: *mut CAsyncEvent,
) -> c_int {
    let got = (|| {
        // SAFETY: forwarded contract.
        let ctx = unsafe { handle(ctx, "context") }?;
        if ev.is_null() {
            return Err("ev is NULL".to_string());
        }
        let Some(e) = ctx
            .next_async_event(timeout(timeout_ms))
            .map_err(|e| e.to_string())?
        else {
            return Ok(0);
        };
        let c = c_event(&e).ok_or_else(|| format!("not an asynchronous event: {e:?}"))?;
        // SAFETY: non-null and writable, per the contract.
        unsafe { ev.write(c) };
        Ok(1)
    })();
    or_fail(got, -1)
}

fn settings(pd: *const c_void, len: usize) -> Result<ConnSettings, String> {
    let private_data = if len == 0 {
        Vec::new()
    } else if pd.is_null() {
        return Err("private_data is NULL".into());
    } else {
        // SAFETY: `len` readable octets, per the header's contract.
        unsafe { core::slice::from_raw_parts(pd.cast::<u8>(), len) }.to_vec()
    };
    Ok(ConnSettings {
        rdmap_v2: true,
        private_data,
        ..ConnSettings::default()
    })
}

/// `struct iwv_conn_info`.
#[repr(C)]
pub struct CConnInfo {
    pub conn: u32,
    pub ird: u16,
    pub ord: u16,
    pub rdmap_version: u8,
    pub private_data_len: u8,
    pub private_data: [u8; 255],
}

fn fill(info: *mut CConnInfo, e: &Established) {
    if info.is_null() {
        return;
    }
    let n = e.private_data.len().min(255);
    let mut c = CConnInfo {
        conn: e.conn,
        ird: e.ird,
        ord: e.ord,
        rdmap_version: e.rdmap_version,
        private_data_len: n as u8,
        private_data: [0; 255],
    };
    c.private_data[..n].copy_from_slice(&e.private_data[..n]);
    // SAFETY: non-null and writable, per the header's contract.
    unsafe { info.write(c) };
}

fn timeout(ms: c_int) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// # Safety
/// `ctx` is a live context.
#[no_mangle]
pub unsafe extern "C" fn iwv_listen(ctx: *mut Context, port: u16) -> c_int {
    // SAFETY: forwarded contract.
    status(unsafe { handle(ctx, "context") }.and_then(|c| {
        c.listen(port, &settings(core::ptr::null(), 0)?)
            .map_err(|e| e.to_string())
    }))
}

/// # Safety
/// `ctx` and `qp` are live; `ipv4` is a NUL-terminated string; `private_data` holds
/// `private_data_len` octets; `info` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn iwv_connect(
    ctx: *mut Context,
    qp: *mut QueuePair,
    ipv4: *const c_char,
    port: u16,
    private_data: *const c_void,
    private_data_len: usize,
    timeout_ms: c_int,
    info: *mut CConnInfo,
) -> c_int {
    status((|| {
        // SAFETY: forwarded contract.
        let (ctx, qp) = unsafe { (handle(ctx, "context")?, handle(qp, "qp")?) };
        if ipv4.is_null() {
            return Err("ipv4 is NULL".to_string());
        }
        // SAFETY: NUL-terminated, per the contract.
        let ip = unsafe { CStr::from_ptr(ipv4) }.to_string_lossy();
        let addr: SocketAddr = format!("{ip}:{port}")
            .parse()
            .map_err(|e| format!("{ip}: {e}"))?;
        let s = settings(private_data, private_data_len)?;
        ctx.connect_blocking(qp, addr, &s, timeout(timeout_ms))
            .map(|e| fill(info, &e))
            .map_err(|e| e.to_string())
    })())
}

/// # Safety
/// As for `iwv_connect`.
#[no_mangle]
pub unsafe extern "C" fn iwv_accept(
    ctx: *mut Context,
    qp: *mut QueuePair,
    private_data: *const c_void,
    private_data_len: usize,
    timeout_ms: c_int,
    info: *mut CConnInfo,
) -> c_int {
    status((|| {
        // SAFETY: forwarded contract.
        let (ctx, qp) = unsafe { (handle(ctx, "context")?, handle(qp, "qp")?) };
        let t = timeout(timeout_ms);
        let s = settings(private_data, private_data_len)?;
        let req = ctx.get_request(t).map_err(|e| e.to_string())?;
        ctx.accept_blocking(&req, qp, &s, t)
            .map(|e| fill(info, &e))
            .map_err(|e| e.to_string())
    })())
}

/// # Safety
/// `ctx` is a live context.
#[no_mangle]
pub unsafe extern "C" fn iwv_disconnect(ctx: *mut Context, conn: u32) -> c_int {
    // SAFETY: forwarded contract.
    status(
        unsafe { handle(ctx, "context") }
            .and_then(|c| c.disconnect(conn, false).map_err(|e| e.to_string())),
    )
}
