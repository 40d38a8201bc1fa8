//! Protection domains, memory regions and windows, completion queues, S-RQs and queue pairs
//! (Verbs sections 7.2–7.4, 8.2), and the fast path `verbs.h` inlines through
//! `ibv_context.ops`: post send/receive write the `iwarp-verbs` rings and poll reads the CQ
//! ring, with no system call.
//!
//! Every object handed to the application is a `#[repr(C)]` struct whose first member is
//! rdma-core's (`ibv_pd`, `ibv_cq`, ...), so the application's pointer is ours as well.
//! What iWARP has no use for (UD and UC QPs, address handles, multicast) is refused with
//! `EOPNOTSUPP`, as rdma-core's siw provider answers.
#![cfg_attr(test, allow(dead_code))]

use crate::abi::*;
use crate::channel::Watcher;
use crate::device::{Ctx, Object};
use crate::stub::set_errno;
use core::ffi::{c_int, c_void};
use iwarp_verbs::Stag;
use iwarp_verbs::{
    access, CompletionQueue, MemoryWindow, ProtectionDomain, QpInitAttr, QpState, QueuePair,
    RecvWr, SendWr, Sg, SharedReceiveQueue, UserMr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Leaks `b` and returns a pointer to it (given back with [`unleak`]).
fn leak<T>(b: Box<T>) -> *mut T {
    Box::into_raw(b)
}

/// # Safety
/// `p` must come from [`leak`] and not be used again.
unsafe fn unleak<T>(p: *mut T) -> Box<T> {
    // SAFETY: the caller's contract.
    unsafe { Box::from_raw(p) }
}

#[repr(C)]
pub(crate) struct Pd {
    ibv: ibv_pd,
    pd: ProtectionDomain,
}

#[repr(C)]
pub(crate) struct Mr {
    ibv: ibv_mr,
    umr: UserMr,
}

#[repr(C)]
pub(crate) struct Mw {
    ibv: ibv_mw,
    mw: MemoryWindow,
}

/// `ibv_cq_ex` begins with the members of `ibv_cq`, so one struct serves both kinds
/// (`ibv_cq_ex_to_cq` is a cast).
#[repr(C)]
pub(crate) struct Cq {
    pub(crate) ibv: ibv_cq_ex,
    pub(crate) cq: Arc<CompletionQueue>,
    /// Delivers this CQ's notifications to its completion channel, if it has one.
    watcher: Option<Watcher>,
    /// The completion `ibv_start_poll` and `ibv_next_poll` last read.
    pub(crate) ex: crate::ex::CqPoll,
}

#[repr(C)]
pub(crate) struct Srq {
    ibv: ibv_srq,
    srq: Arc<SharedReceiveQueue>,
}

/// Every QP is an `ibv_qp_ex` (whose head is the `ibv_qp`), so `ibv_qp_to_qp_ex` works on
/// any of them.
#[repr(C)]
pub(crate) struct Qp {
    pub(crate) ibv: ibv_qp_ex,
    pub(crate) qp: QueuePair,
    max_inline: u32,
    pub(crate) sig_all: bool,
    /// The work requests of the `ibv_wr_*` API since `ibv_wr_start`.
    pub(crate) ex: crate::ex::WrState,
}

/// The `ibv_context` an object's context pointer names, as ours.
///
/// # Safety
/// `ctx` must be a live context of this library.
pub(crate) unsafe fn ctx_of<'a>(ctx: *mut ibv_context) -> Option<&'a mut Ctx> {
    // SAFETY: forwarded.
    unsafe { Ctx::from_ibv(ctx) }
}

/// Names an object for asynchronous events.
fn register(c: &Ctx, kind: Object, num: u32, p: usize) {
    c.objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert((kind, num), p);
}

fn forget(c: &Ctx, kind: Object, num: u32) {
    c.objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(kind, num));
}

/// `IBV_ACCESS_OPTIONAL_RANGE` of verbs.h (a macro bindgen does not evaluate): flags a
/// provider may ignore.
const IBV_ACCESS_OPTIONAL_RANGE: u32 = ((1 << 24) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);

/// `IBV_ACCESS_*` to the Verbs access rights of `iwarp_abi::wqe::access`.
pub(crate) fn access_of(ibv: u32) -> Result<u32, c_int> {
    let known = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC
        | IBV_ACCESS_MW_BIND
        | IBV_ACCESS_RELAXED_ORDERING
        | IBV_ACCESS_OPTIONAL_RANGE;
    if ibv & !known != 0 {
        return Err(libc::EINVAL);
    }
    // Remote write or atomic access needs local write (rdma-core checks the same).
    if ibv & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && ibv & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return Err(libc::EINVAL);
    }
    let map = [
        (IBV_ACCESS_LOCAL_WRITE, access::LOCAL_WRITE),
        (IBV_ACCESS_REMOTE_WRITE, access::REMOTE_WRITE),
        (IBV_ACCESS_REMOTE_READ, access::REMOTE_READ),
        (IBV_ACCESS_REMOTE_ATOMIC, access::REMOTE_ATOMIC),
        (IBV_ACCESS_MW_BIND, access::BIND),
    ];
    Ok(map
        .iter()
        .filter(|(i, _)| ibv & i != 0)
        .fold(0, |a, (_, o)| a | o))
}

pub(crate) unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: the caller's context.
    let Some(c) = (unsafe { ctx_of(ctx) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    match c.rnic.alloc_pd() {
        Ok(pd) => {
            let ibv = ibv_pd {
                context: ctx,
                handle: pd.pd().into(),
            };
            leak(Box::new(Pd { ibv, pd })).cast()
        }
        Err(_) => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

pub(crate) unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    if pd.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a PD of ibv_alloc_pd, deallocated once.
    drop(unsafe { unleak(pd.cast::<Pd>()) });
    0
}

unsafe fn reg(pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, acc: u32) -> *mut ibv_mr {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    if pd.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: a PD of ibv_alloc_pd.
    let p = unsafe { &*pd.cast::<Pd>() };
    let acc = match access_of(acc) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    // SAFETY: rdma-core's contract for ibv_reg_mr: the range is the application's memory,
    // valid while registered.
    match unsafe { p.pd.reg_user_mr(addr.cast(), len, iova, acc) } {
        Ok(umr) => {
            let stag = umr.region().stag();
            let ibv = ibv_mr {
                context: p.ibv.context,
                pd,
                addr,
                length: len,
                handle: stag.into(),
                lkey: stag.into(),
                rkey: stag.into(),
            };
            let m = leak(Box::new(Mr { ibv, umr }));
            // SAFETY: the PD's context is ours.
            if let Some(c) = unsafe { ctx_of(p.ibv.context) } {
                c.regions_write().insert(stag.into(), m as usize);
            }
            m.cast()
        }
        Err(iwarp_verbs::Error::InvalidLength { .. }) => fail(libc::EINVAL),
        Err(_) => fail(libc::ENOMEM),
    }
}

pub(crate) unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    acc: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded; VA-based at the address itself.
    unsafe { reg(pd, addr, len, addr as u64, acc as u32) }
}

pub(crate) unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    acc: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { reg(pd, addr, len, iova, acc as u32) }
}

pub(crate) unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    acc: u32,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { reg(pd, addr, len, iova, acc) }
}

pub(crate) unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a region of ibv_reg_mr; its context is ours.
    let Some(c) = (unsafe { ctx_of((*mr).context) }) else {
        return libc::EINVAL;
    };
    // Out of the table first, so no post can name it while it goes.
    let mut regions = c.regions_write();
    // SAFETY: as above.
    let lkey = unsafe { (*mr).lkey };
    regions.remove(&lkey);
    // SAFETY: a region of ibv_reg_mr, freed here unless deregistration is refused.
    let m = unsafe { unleak(mr.cast::<Mr>()) };
    let Mr { ibv, umr } = *m;
    match umr.deregister() {
        Ok(()) => 0,
        Err((umr, _)) => {
            // Posted work still uses it: the application keeps its handle.
            let back = leak(Box::new(Mr { ibv, umr }));
            regions.insert(lkey, back as usize);
            libc::EBUSY
        }
    }
}

/// Registered regions by lkey, as the context keeps them.
pub(crate) type Regions = HashMap<u32, usize>;

/// The region whose lkey an SGE names, while the caller holds the table's read lock.
fn region(regions: &Regions, lkey: u32) -> Option<&Mr> {
    regions.get(&lkey).map(|p| {
        // SAFETY: a region in the table is allocated until ibv_dereg_mr takes it out, which
        // needs the write lock the caller's read lock excludes.
        unsafe { &*(*p as *const Mr) }
    })
}

pub(crate) unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: the caller's context.
    let Some(c) = (unsafe { ctx_of(ctx) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    if cqe <= 0 || cqe as u32 > c.limits.max_cqe {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    match c.rnic.create_cq(cqe as u32) {
        Ok(cq) => {
            let ibv = ibv_cq_ex {
                context: ctx,
                channel,
                cq_context,
                handle: cq.cq_num().into(),
                cqe,
                ..Default::default()
            };
            let notify = cq.notifier();
            let num = cq.cq_num();
            let p = leak(Box::new(Cq {
                ibv,
                cq,
                watcher: None,
                ex: Default::default(),
            }));
            if let (false, Some(n)) = (channel.is_null(), notify) {
                // SAFETY: just made; the watcher gets its final address.
                unsafe { (*p).watcher = Some(Watcher::start(n, p.cast(), channel)) };
            }
            register(c, Object::Cq, num.into(), p as usize);
            p.cast()
        }
        Err(_) => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

pub(crate) unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a CQ of ibv_create_cq, destroyed once (its QPs hold their own references).
    let mut q = unsafe { unleak(cq.cast::<Cq>()) };
    // SAFETY: its context is ours.
    if let Some(c) = unsafe { ctx_of(q.ibv.context) } {
        forget(c, Object::Cq, q.ibv.handle);
    }
    // Stop its watcher before the CQ goes, then release the channel.
    if q.watcher.take().is_some() && !q.ibv.channel.is_null() {
        // SAFETY: the channel the CQ was created with, kept by its refcnt.
        unsafe { (*q.ibv.channel).refcnt -= 1 };
    }
    0
}

fn wc_status(s: WcStatus) -> ibv_wc_status {
    match s {
        WcStatus::Success => IBV_WC_SUCCESS,
        WcStatus::LocalLengthError => IBV_WC_LOC_LEN_ERR,
        WcStatus::LocalProtectionError => IBV_WC_LOC_PROT_ERR,
        WcStatus::LocalQpOperationError => IBV_WC_LOC_QP_OP_ERR,
        WcStatus::WrFlushed => IBV_WC_WR_FLUSH_ERR,
        WcStatus::RemoteAccessError => IBV_WC_REM_ACCESS_ERR,
        WcStatus::RemoteOperationError => IBV_WC_REM_OP_ERR,
        WcStatus::LlpError => IBV_WC_GENERAL_ERR,
    }
}

/// A completion in rdma-core's terms: its opcode numbers differ from `iwarp_verbs.h`
/// (`IBV_WC_COMP_SWAP` is 3, `IBV_WC_FETCH_ADD` 4), and Immediate Data is a flag.
pub(crate) fn ibv_wc_of(w: &WorkCompletion) -> ibv_wc {
    let opcode = match w.opcode {
        WcOpcode::Send | WcOpcode::Immediate => IBV_WC_SEND,
        WcOpcode::Write => IBV_WC_RDMA_WRITE,
        WcOpcode::Read => IBV_WC_RDMA_READ,
        WcOpcode::CmpSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::LocalInv | WcOpcode::FastReg => IBV_WC_LOCAL_INV,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvImm => IBV_WC_RECV_RDMA_WITH_IMM,
    };
    let mut flags = 0;
    let mut u = ibv_wc__bindgen_ty_1 { imm_data: 0 };
    if let Some(imm) = w.imm_data {
        flags |= IBV_WC_WITH_IMM;
        // The 32 bits the sender put in its work request, in the order it put them.
        u.imm_data = imm as u32;
    } else if let Some(stag) = w.invalidated_stag {
        flags |= IBV_WC_WITH_INV;
        u.invalidated_rkey = stag;
    }
    ibv_wc {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode,
        vendor_err: 0,
        byte_len: w.byte_len,
        __bindgen_anon_1: u,
        qp_num: w.qp_num,
        src_qp: 0,
        wc_flags: flags,
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

/// `ops.poll_cq`: up to `n` completions into `wc`, from the ring only.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    if cq.is_null() || n < 0 || (n > 0 && wc.is_null()) {
        return -1;
    }
    // SAFETY: a CQ of ibv_create_cq.
    let q = unsafe { &*cq.cast::<Cq>() };
    const BATCH: usize = 16;
    let mut got = 0usize;
    let mut buf = [WorkCompletion::BLANK; BATCH];
    while got < n as usize {
        let want = (n as usize - got).min(BATCH);
        let k = match q.cq.poll_cq(&mut buf[..want]) {
            Ok(k) => k,
            Err(_) => return -1,
        };
        for w in &buf[..k] {
            // SAFETY: the caller's array holds `n` entries.
            unsafe { *wc.add(got) = ibv_wc_of(w) };
            got += 1;
        }
        if k < want {
            break;
        }
    }
    got as c_int
}

/// `ops.req_notify_cq`: an event on the CQ's channel for its next completion, or with
/// `solicited` for its next solicited or error completion (see `channel.rs`).
unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited: c_int) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a CQ of ibv_create_cq.
    let q = unsafe { &*cq.cast::<Cq>() };
    match (&q.watcher, q.cq.notifier()) {
        (Some(w), _) => w.arm(solicited != 0),
        // No channel: armed all the same, nobody is told.
        (None, Some(n)) => n.arm_for(solicited != 0),
        (None, None) => return libc::EOPNOTSUPP,
    }
    0
}

pub(crate) unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    if pd.is_null() || attr.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: a PD of ibv_alloc_pd and the caller's attributes.
    let (p, a) = unsafe { (&*pd.cast::<Pd>(), &mut *attr) };
    let p_ctx = p.ibv.context;
    match p.pd.create_srq(a.attr.max_wr.max(1)) {
        Ok(srq) => {
            let ibv = ibv_srq {
                context: p.ibv.context,
                srq_context: a.srq_context,
                pd,
                handle: srq.srq_num().into(),
                ..Default::default()
            };
            let num = srq.srq_num();
            let p = leak(Box::new(Srq { ibv, srq }));
            // SAFETY: the PD's context is ours.
            if let Some(c) = unsafe { ctx_of(p_ctx) } {
                register(c, Object::Srq, num.into(), p as usize);
            }
            p.cast()
        }
        Err(_) => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

pub(crate) unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an S-RQ of ibv_create_srq, destroyed once.
    let s = unsafe { unleak(srq.cast::<Srq>()) };
    // SAFETY: its context is ours.
    if let Some(c) = unsafe { ctx_of(s.ibv.context) } {
        forget(c, Object::Srq, s.ibv.handle);
    }
    drop(s);
    0
}

pub(crate) unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    if srq.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an S-RQ of ibv_create_srq and the caller's attributes.
    let (s, a) = unsafe { (&*srq.cast::<Srq>(), &*attr) };
    if mask as u32 & IBV_SRQ_MAX_WR != 0 {
        // The depth is fixed at creation (Verbs section 9.2.4.3 lets an RNIC refuse).
        return libc::EOPNOTSUPP;
    }
    if mask as u32 & IBV_SRQ_LIMIT != 0 && s.srq.arm_limit(a.srq_limit).is_err() {
        return libc::EINVAL;
    }
    0
}

pub(crate) unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    if srq.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: as in ibv_modify_srq.
    let s = unsafe { &*srq.cast::<Srq>() };
    match s.srq.query() {
        Ok((depth, limit)) => {
            // SAFETY: the caller's attributes.
            unsafe {
                *attr = ibv_srq_attr {
                    max_wr: depth,
                    max_sge: iwarp_abi::wqe::MAX_SGE as u32,
                    srq_limit: limit,
                }
            };
            0
        }
        Err(_) => libc::EIO,
    }
}

pub(crate) unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    if pd.is_null() || attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: a PD of ibv_alloc_pd and the caller's attributes.
    let (p, a) = unsafe { (&*pd.cast::<Pd>(), &mut *attr) };
    // iWARP has reliable connections only; siw refuses the others so.
    if a.qp_type != IBV_QPT_RC {
        return fail(libc::EOPNOTSUPP);
    }
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the application's CQs of ibv_create_cq.
    let (scq, rcq) = unsafe { (&*a.send_cq.cast::<Cq>(), &*a.recv_cq.cast::<Cq>()) };
    // SAFETY: the PD's context is ours.
    let Some(c) = (unsafe { ctx_of(p.ibv.context) }) else {
        return fail(libc::EINVAL);
    };
    let l = &c.limits;
    let cap = &mut a.cap;
    let max_sge = cap.max_send_sge.max(cap.max_recv_sge).max(1);
    if cap.max_send_wr > l.max_sq_depth
        || cap.max_recv_wr > l.max_rq_depth
        || max_sge > l.max_sge
        || cap.max_inline_data > l.max_inline
    {
        return fail(libc::EINVAL);
    }
    let srq = if a.srq.is_null() {
        None
    } else {
        // SAFETY: the application's S-RQ of ibv_create_srq.
        Some(unsafe { &*a.srq.cast::<Srq>() }.srq.clone())
    };
    let init = QpInitAttr {
        send_cq: scq.cq.clone(),
        recv_cq: rcq.cq.clone(),
        sq_depth: cap.max_send_wr.max(1),
        rq_depth: cap.max_recv_wr.max(1),
        max_sge,
        max_inline: cap.max_inline_data,
        ird: l.max_ird,
        ord: l.max_ord,
        srq,
    };
    match p.pd.create_qp(&init) {
        Ok(qp) => {
            cap.max_send_sge = max_sge;
            cap.max_recv_sge = max_sge;
            let mut ibv = ibv_qp_ex {
                qp_base: ibv_qp {
                    context: p.ibv.context,
                    qp_context: a.qp_context,
                    pd,
                    send_cq: a.send_cq,
                    recv_cq: a.recv_cq,
                    srq: a.srq,
                    handle: qp.qp_num().into(),
                    qp_num: qp.qp_num().into(),
                    state: IBV_QPS_RESET,
                    qp_type: a.qp_type,
                    ..Default::default()
                },
                ..Default::default()
            };
            crate::ex::fill_qp_ex(&mut ibv);
            let num = qp.qp_num();
            let p = leak(Box::new(Qp {
                ibv,
                qp,
                max_inline: cap.max_inline_data,
                sig_all: a.sq_sig_all != 0,
                ex: Default::default(),
            }));
            register(c, Object::Qp, num.into(), p as usize);
            p.cast()
        }
        Err(_) => fail(libc::ENOMEM),
    }
}

pub(crate) unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a QP of ibv_create_qp, destroyed once.
    let q = unsafe { unleak(qp.cast::<Qp>()) };
    // SAFETY: its context is ours.
    if let Some(c) = unsafe { ctx_of(q.ibv.qp_base.context) } {
        forget(c, Object::Qp, q.ibv.qp_base.qp_num);
    }
    drop(q);
    0
}

/// Modify QP: on iWARP the connection, not the application, takes a QP to RTS (siw refuses
/// RTR/RTS without one); RESET and INIT are recorded, ERR is carried out.
pub(crate) unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a QP of ibv_create_qp and the caller's attributes.
    let (q, a) = unsafe { (&mut *qp.cast::<Qp>(), &*attr) };
    if mask as u32 & IBV_QP_STATE == 0 {
        return 0;
    }
    match a.qp_state {
        s if s == IBV_QPS_RESET || s == IBV_QPS_INIT => {
            q.ibv.qp_base.state = s;
            0
        }
        s if s == IBV_QPS_RTR || s == IBV_QPS_RTS => {
            if q.ibv.qp_base.state == IBV_QPS_RTS {
                0
            } else {
                libc::EINVAL
            }
        }
        s if s == IBV_QPS_ERR => {
            // SAFETY: the QP's context is ours.
            let Some(c) = (unsafe { ctx_of(q.ibv.qp_base.context) }) else {
                return libc::EINVAL;
            };
            match c.rnic.modify_qp(&q.qp, QpState::Error) {
                Ok(_) => {
                    q.ibv.qp_base.state = s;
                    0
                }
                Err(_) => libc::EINVAL,
            }
        }
        _ => libc::EINVAL,
    }
}

pub(crate) unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a QP of ibv_create_qp.
    let q = unsafe { &mut *qp.cast::<Qp>() };
    // SAFETY: the QP's context is ours.
    let Some(c) = (unsafe { ctx_of(q.ibv.qp_base.context) }) else {
        return libc::EINVAL;
    };
    let state = match c.rnic.query_qp(&q.qp) {
        Ok(QpState::Idle) => q.ibv.qp_base.state,
        Ok(QpState::Rts) => IBV_QPS_RTS,
        Ok(QpState::Closing) => IBV_QPS_SQD,
        Ok(QpState::Terminate) => IBV_QPS_SQE,
        Ok(QpState::Error) => IBV_QPS_ERR,
        Err(_) => return libc::EIO,
    };
    q.ibv.qp_base.state = state;
    // SAFETY: the caller's attributes.
    unsafe {
        *attr = ibv_qp_attr {
            qp_state: state,
            cur_qp_state: state,
            max_rd_atomic: c.limits.max_ord.min(255) as u8,
            max_dest_rd_atomic: c.limits.max_ird.min(255) as u8,
            cap: ibv_qp_cap {
                max_inline_data: q.max_inline,
                ..Default::default()
            },
            ..Default::default()
        };
        if !init.is_null() {
            *init = ibv_qp_init_attr {
                qp_context: q.ibv.qp_base.qp_context,
                send_cq: q.ibv.qp_base.send_cq,
                recv_cq: q.ibv.qp_base.recv_cq,
                srq: q.ibv.qp_base.srq,
                qp_type: q.ibv.qp_base.qp_type,
                sq_sig_all: q.sig_all as c_int,
                ..Default::default()
            };
        }
    }
    0
}

/// The `iwarp-verbs` queue pair behind an application's QP.
///
/// # Safety
/// `qp` must be a live QP of [`ibv_create_qp`].
pub(crate) unsafe fn queue_pair<'a>(qp: *mut ibv_qp) -> &'a QueuePair {
    // SAFETY: the caller's contract; Qp starts with the ibv_qp.
    unsafe { &(*qp.cast::<Qp>()).qp }
}

/// Marks a QP connected: its connection reached RTS.
pub(crate) fn set_rts(qp: *mut ibv_qp) {
    if !qp.is_null() {
        // SAFETY: a QP of ibv_create_qp.
        unsafe { (*qp).state = IBV_QPS_RTS };
    }
}

/// The SGEs of a work request as `iwarp-verbs` scatter/gather elements over the regions
/// they name (tagged offsets relative to each region's first octet).
///
/// # Safety
/// `sg` must hold `n` SGEs.
pub(crate) unsafe fn sg_list<'a>(
    regions: &'a Regions,
    sg: *const ibv_sge,
    n: c_int,
) -> Option<Vec<Sg<'a>>> {
    let mut v = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n.max(0) as usize {
        // SAFETY: the caller's list.
        let s = unsafe { &*sg.add(i) };
        let mr = region(regions, s.lkey)?;
        let region = mr.umr.region();
        let offset = s.addr.checked_sub(mr.ibv.addr as u64)?;
        v.push(Sg {
            mr: region,
            offset,
            len: s.length,
        });
    }
    Some(v)
}

/// What one `ibv_send_wr` asks for.
///
/// # Safety
/// `w` must be the application's valid work request.
unsafe fn opcode(w: &ibv_send_wr) -> Option<WrOpcode> {
    // SAFETY: the union members read are the ones the opcode selects.
    unsafe {
        let rdma = w.wr.rdma;
        let atomic = w.wr.atomic;
        Some(match w.opcode {
            o if o == IBV_WR_SEND => WrOpcode::Send,
            o if o == IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm {
                imm: w.__bindgen_anon_1.imm_data,
            },
            o if o == IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInvalidate {
                stag: Stag(w.__bindgen_anon_1.invalidate_rkey),
            },
            o if o == IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite {
                rkey: Stag(rdma.rkey),
                remote_addr: rdma.remote_addr,
            },
            o if o == IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm {
                rkey: Stag(rdma.rkey),
                remote_addr: rdma.remote_addr,
                imm: w.__bindgen_anon_1.imm_data as u64,
            },
            o if o == IBV_WR_RDMA_READ => WrOpcode::RdmaRead {
                rkey: Stag(rdma.rkey),
                remote_addr: rdma.remote_addr,
            },
            o if o == IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::FetchAdd {
                rkey: Stag(atomic.rkey),
                remote_addr: atomic.remote_addr,
                add: atomic.compare_add,
            },
            o if o == IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::CmpSwap {
                rkey: Stag(atomic.rkey),
                remote_addr: atomic.remote_addr,
                compare: atomic.compare_add,
                swap: atomic.swap,
            },
            o if o == IBV_WR_LOCAL_INV => WrOpcode::LocalInvalidate {
                stag: Stag(w.__bindgen_anon_1.invalidate_rkey),
            },
            o if o == IBV_WR_BIND_MW => {
                let b = w.__bindgen_anon_2.bind_mw;
                let mr = b.bind_info.mr;
                if b.mw.is_null() || mr.is_null() {
                    return None;
                }
                WrOpcode::BindMw {
                    mw: Stag((*b.mw).rkey),
                    mr: Stag((*mr).lkey),
                    to: b.bind_info.addr,
                    len: b.bind_info.length,
                    access: crate::ex::window_access(b.bind_info.mw_access_flags)?,
                }
            }
            _ => return None,
        })
    }
}

/// `ops.post_send`: every work request of the list into the SQ ring, one doorbell.
unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let fail = |at: *mut ibv_send_wr, e: c_int| {
        if !bad.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *bad = at };
        }
        e
    };
    if qp.is_null() {
        return fail(wr, libc::EINVAL);
    }
    // SAFETY: a QP of ibv_create_qp.
    let q = unsafe { &*qp.cast::<Qp>() };
    // SAFETY: the QP's context is ours.
    let Some(c) = (unsafe { ctx_of(q.ibv.qp_base.context) }) else {
        return fail(wr, libc::EINVAL);
    };
    let regions = c.regions_read();
    let mut batch = q.qp.batch();
    let mut inline = Vec::new();
    let mut w = wr;
    while !w.is_null() {
        // SAFETY: the application's list, NULL-terminated.
        let r = unsafe { &*w };
        // SAFETY: as above.
        let Some(op) = (unsafe { opcode(r) }) else {
            return fail(w, libc::EINVAL);
        };
        let flags = r.send_flags;
        let is_inline = flags & IBV_SEND_INLINE != 0;
        let sgs = if is_inline {
            inline.clear();
            for i in 0..r.num_sge.max(0) as usize {
                // SAFETY: the caller's SGEs; inline data is read from their addresses.
                unsafe {
                    let s = &*r.sg_list.add(i);
                    inline.extend_from_slice(core::slice::from_raw_parts(
                        s.addr as *const u8,
                        s.length as usize,
                    ));
                }
            }
            Vec::new()
        } else {
            // SAFETY: the caller's SGEs.
            match unsafe { sg_list(&regions, r.sg_list, r.num_sge) } {
                Some(v) => v,
                None => return fail(w, libc::EINVAL),
            }
        };
        let send = SendWr {
            wr_id: r.wr_id,
            opcode: op,
            sg_list: &sgs,
            inline: is_inline.then_some(&inline[..]),
            signaled: q.sig_all || flags & IBV_SEND_SIGNALED != 0,
            solicited: flags & IBV_SEND_SOLICITED != 0,
            fence: flags & IBV_SEND_FENCE != 0,
        };
        if batch.send(&send).is_err() {
            return fail(w, libc::EINVAL);
        }
        w = r.next;
    }
    match batch.submit() {
        Ok(()) => 0,
        Err(_) => fail(wr, libc::ENOMEM),
    }
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if qp.is_null() {
        // SAFETY: forwarded from the caller.
        return unsafe { recv_failed(bad, wr, libc::EINVAL) };
    }
    // SAFETY: a QP of ibv_create_qp.
    let q = unsafe { &*qp.cast::<Qp>() };
    // SAFETY: forwarded from the caller; the QP's context is ours.
    unsafe { post_recv_list(q.ibv.qp_base.context, wr, bad, |r| q.qp.post_recv(r)) }
}

/// `ops.post_srq_recv`.
unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if srq.is_null() {
        // SAFETY: forwarded from the caller.
        return unsafe { recv_failed(bad, wr, libc::EINVAL) };
    }
    // SAFETY: an S-RQ of ibv_create_srq.
    let s = unsafe { &*srq.cast::<Srq>() };
    // SAFETY: forwarded from the caller; the S-RQ's context is ours.
    unsafe { post_recv_list(s.ibv.context, wr, bad, |r| s.srq.post_recv(r)) }
}

/// Names `at` as the failed receive in `*bad` (when given) and returns `e`.
///
/// # Safety
/// `bad` is null or the caller's writable out-parameter.
unsafe fn recv_failed(bad: *mut *mut ibv_recv_wr, at: *mut ibv_recv_wr, e: c_int) -> c_int {
    if !bad.is_null() {
        // SAFETY: the caller's out-parameter.
        unsafe { *bad = at };
    }
    e
}

/// Posts the application's receive list through `post` (a QP's RQ or an S-RQ), stopping at
/// the first that fails, which `*bad` names.
///
/// # Safety
/// `context` is an `ibv_context` of this library, `wr` a NULL-terminated list of the
/// application's receive WRs, `bad` null or writable.
unsafe fn post_recv_list(
    context: *mut ibv_context,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl Fn(&RecvWr<'_>) -> Result<(), iwarp_verbs::Error>,
) -> c_int {
    // SAFETY: forwarded.
    let Some(c) = (unsafe { ctx_of(context) }) else {
        // SAFETY: forwarded.
        return unsafe { recv_failed(bad, wr, libc::EINVAL) };
    };
    let regions = c.regions_read();
    let mut w = wr;
    while !w.is_null() {
        // SAFETY: the application's list, NULL-terminated.
        let r = unsafe { &*w };
        // SAFETY: the caller's SGEs.
        let Some(sgs) = (unsafe { sg_list(&regions, r.sg_list, r.num_sge) }) else {
            // SAFETY: forwarded.
            return unsafe { recv_failed(bad, w, libc::EINVAL) };
        };
        let recv = RecvWr {
            wr_id: r.wr_id,
            sg_list: &sgs,
        };
        if post(&recv).is_err() {
            // SAFETY: forwarded.
            return unsafe { recv_failed(bad, w, libc::ENOMEM) };
        }
        w = r.next;
    }
    0
}

/// `ops.alloc_mw`: type 2 windows (bound by a posted `IBV_WR_BIND_MW`), and type 1 (bound
/// with `ibv_bind_mw`).
unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, ty: ibv_mw_type) -> *mut ibv_mw {
    if pd.is_null() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: a PD of ibv_alloc_pd.
    let p = unsafe { &*pd.cast::<Pd>() };
    match p.pd.alloc_mw() {
        Ok(mw) => {
            let ibv = ibv_mw {
                context: p.ibv.context,
                pd,
                rkey: mw.stag().into(),
                handle: mw.stag().into(),
                type_: ty,
            };
            leak(Box::new(Mw { ibv, mw })).cast()
        }
        Err(_) => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `ops.dealloc_mw`.
unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    if mw.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a window of alloc_mw, deallocated once.
    drop(unsafe { unleak(mw.cast::<Mw>()) });
    0
}

/// `ops.bind_mw` (`ibv_bind_mw`): a Bind Memory Window work request on `qp`.
unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int {
    if qp.is_null() || mw.is_null() || bind.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the application's QP, window and bind description.
    let (q, w, b) = unsafe { (&*qp.cast::<Qp>(), &*mw, &*bind) };
    if b.bind_info.mr.is_null() {
        return libc::EINVAL;
    }
    let Some(acc) = crate::ex::window_access(b.bind_info.mw_access_flags) else {
        return libc::EINVAL;
    };
    let op = WrOpcode::BindMw {
        mw: Stag(w.rkey),
        // SAFETY: a region of ibv_reg_mr.
        mr: unsafe { Stag((*b.bind_info.mr).lkey) },
        to: b.bind_info.addr,
        len: b.bind_info.length,
        access: acc,
    };
    let mut wr = SendWr::new(b.wr_id, op, &[]);
    wr.signaled = q.sig_all || b.send_flags & IBV_SEND_SIGNALED != 0;
    match q.qp.post_send(&wr) {
        Ok(()) => 0,
        Err(_) => libc::EINVAL,
    }
}

/// Fills the context's operations: the fast path and the calls `verbs.h` inlines.
pub(crate) fn fill_ops(ops: &mut ibv_context_ops) {
    ops.poll_cq = Some(poll_cq);
    ops.req_notify_cq = Some(req_notify_cq);
    ops.post_send = Some(post_send);
    ops.post_recv = Some(post_recv);
    ops.post_srq_recv = Some(post_srq_recv);
    ops.alloc_mw = Some(alloc_mw);
    ops.dealloc_mw = Some(dealloc_mw);
    ops.bind_mw = Some(bind_mw);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_rights_translate_and_remote_write_needs_local_write() {
        assert_eq!(
            access_of(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
            Ok(access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ)
        );
        assert_eq!(access_of(IBV_ACCESS_REMOTE_READ), Ok(access::REMOTE_READ));
        assert_eq!(access_of(IBV_ACCESS_REMOTE_WRITE), Err(libc::EINVAL));
        assert_eq!(access_of(IBV_ACCESS_REMOTE_ATOMIC), Err(libc::EINVAL));
        assert_eq!(access_of(1 << 30), Err(libc::EINVAL));
    }

    #[test]
    fn completion_opcodes_and_flags_are_rdma_cores() {
        let w = |opcode, imm_data, invalidated_stag| WorkCompletion {
            wr_id: 9,
            status: WcStatus::Success,
            opcode,
            byte_len: 8,
            qp_num: 1,
            imm_data,
            invalidated_stag,
        };
        assert_eq!(ibv_wc_of(&w(WcOpcode::CmpSwap, None, None)).opcode, 3);
        assert_eq!(ibv_wc_of(&w(WcOpcode::FetchAdd, None, None)).opcode, 4);
        let imm = ibv_wc_of(&w(WcOpcode::RecvImm, Some(0x1234_5678), None));
        assert_eq!(imm.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        assert_eq!(imm.wc_flags, IBV_WC_WITH_IMM);
        // SAFETY: the member written for a completion with Immediate Data.
        assert_eq!(unsafe { imm.__bindgen_anon_1.imm_data }, 0x1234_5678);
        let inv = ibv_wc_of(&w(WcOpcode::Recv, None, Some(0x77)));
        assert_eq!(inv.wc_flags, IBV_WC_WITH_INV);
        let mut flushed = w(WcOpcode::Send, None, None);
        flushed.status = WcStatus::WrFlushed;
        assert_eq!(ibv_wc_of(&flushed).status, IBV_WC_WR_FLUSH_ERR);
    }
}
