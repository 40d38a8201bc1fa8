//! The extended verbs of rdma-core's `verbs.h`: `ibv_create_qp_ex` with the work request API
//! (`ibv_wr_start` ... `ibv_wr_complete`, man page `ibv_wr_post(3)`), and `ibv_create_cq_ex`
//! with its polling functions (`ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll`, `ibv_wc_read_*`).
//!
//! Both sit on the fast path of `verbs.rs`: the work requests built between `wr_start` and
//! `wr_complete` go into the SQ ring in one batch, as one `ibv_post_send` list does, and a
//! poll reads the CQ ring; neither makes a system call. What iWARP cannot do is refused:
//! at creation where rdma-core can say so there (TSO, atomic write, timestamps, parent
//! domains), at `wr_complete` (as `ibv_wr_post(3)` reports every error) for the UD and XRC
//! setters, which an RC QP has no use for.
#![cfg_attr(test, allow(dead_code))]

use crate::abi::*;
use crate::stub::set_errno;
use crate::verbs::{self, access_of, ctx_of, ibv_wc_of, sg_list, Cq, Qp};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint, c_void};
use core::sync::atomic::{AtomicBool, Ordering};
use iwarp_verbs::Stag;
use iwarp_verbs::{SendWr, WrOpcode};

/// A lock held from one call of the application to a later one (`wr_start` to
/// `wr_complete`, `start_poll` to `end_poll`), which no guard object can span. The regions
/// it guards are a few dozen instructions long, so a waiter yields rather than sleeps.
#[derive(Debug, Default)]
struct SpanLock(AtomicBool);

impl SpanLock {
    fn acquire(&self) {
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    fn release(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Where a built work request's data is, in [`Pending`]'s buffers.
#[derive(Debug, Clone, Copy)]
enum Data {
    None,
    Sge(usize, usize),
    Inline(usize, usize),
}

/// One work request built by a `wr_*` builder and its setters.
#[derive(Debug)]
struct Built {
    wr_id: u64,
    flags: u32,
    op: WrOpcode,
    data: Data,
}

/// The work requests since `wr_start`, and the first error found building them.
#[derive(Debug, Default)]
struct Pending {
    wrs: Vec<Built>,
    sges: Vec<ibv_sge>,
    inline: Vec<u8>,
    error: c_int,
}

impl Pending {
    fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
        self.error = 0;
    }

    fn fail(&mut self, e: c_int) {
        if self.error == 0 {
            self.error = e;
        }
    }
}

/// A QP's `ibv_wr_*` state: the critical region's lock and what was built in it.
#[derive(Debug, Default)]
pub(crate) struct WrState {
    lock: SpanLock,
    /// Touched only by the thread inside the critical region.
    pending: UnsafeCell<Pending>,
}

/// A CQ's `ibv_start_poll` state: the lock held until `ibv_end_poll` and the completion
/// the `read_*` functions report.
#[derive(Debug, Default)]
pub(crate) struct CqPoll {
    lock: SpanLock,
    /// Touched only by the thread between `start_poll` and `end_poll`.
    current: UnsafeCell<ibv_wc>,
}

/// The work request operations this library carries out (`send_ops_flags`); TSO and
/// atomic write are not iWARP operations.
const SEND_OPS: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV) as u64;

/// Sets the extended entry points of a freshly opened context.
pub(crate) fn fill_context(v: &mut verbs_context) {
    v.create_qp_ex = Some(create_qp_ex);
    v.create_cq_ex = Some(create_cq_ex);
}

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex` calls it unless only a PD is given).
unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    let known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 {
        // XRC domains, creation flags, TSO, receive hashing, source QPNs: nothing an iWARP
        // RC QP has.
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the application's PD.
    if unsafe { (*a.pd).context } != ctx {
        return fail(libc::EINVAL);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 && a.send_ops_flags & !SEND_OPS != 0 {
        // ibv_wr_post(3): a QP that cannot do every operation asked for is not created.
        return fail(libc::EOPNOTSUPP);
    }
    let mut plain = plain_init_attr(a);
    // SAFETY: forwarded: the application's PD and attributes.
    let qp = unsafe { verbs::ibv_create_qp(a.pd, &mut plain) };
    if !qp.is_null() {
        a.cap = plain.cap;
    }
    qp
}

/// The plain attributes at the head of extended ones (`ibv_create_qp_ex`,
/// `rdma_create_qp_ex`): the fields both creation paths take.
pub(crate) fn plain_init_attr(a: &ibv_qp_init_attr_ex) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    }
}

/// `ibv_qp_to_qp_ex`: every QP of this library is an `ibv_qp_ex` with the builders set
/// (also one made by `ibv_create_qp` or `rdma_create_qp`).
pub(crate) unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    if qp.is_null() {
        set_errno(libc::EINVAL);
    }
    qp.cast()
}

/// Sets the builders, setters and the critical region's calls of a new QP.
pub(crate) fn fill_qp_ex(q: &mut ibv_qp_ex) {
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_send_tso = Some(wr_send_tso);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_atomic_write = Some(wr_atomic_write);
}

/// The work being built on `qp`.
///
/// # Safety
/// `qp` is a live QP of this library and the caller is inside its critical region, so no
/// other thread touches the pending work.
unsafe fn pending<'a>(qp: *mut ibv_qp_ex) -> &'a mut Pending {
    // SAFETY: the caller's contract; every ibv_qp_ex here is the head of a Qp.
    unsafe { &mut *(*qp.cast::<Qp>()).ex.pending.get() }
}

/// Starts a work request of `op` with the QP's current `wr_id` and `wr_flags`.
///
/// # Safety
/// As [`pending`].
unsafe fn build(qp: *mut ibv_qp_ex, op: WrOpcode) {
    // SAFETY: the caller's QP; the application set these members before the builder.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    // SAFETY: forwarded.
    unsafe { pending(qp) }.wrs.push(Built {
        wr_id,
        flags,
        op,
        data: Data::None,
    });
}

/// Marks the critical region's work as failed with `e` (`wr_complete` reports it).
///
/// # Safety
/// As [`pending`].
unsafe fn refuse(qp: *mut ibv_qp_ex, e: c_int) {
    // SAFETY: forwarded.
    unsafe { pending(qp) }.fail(e);
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: the application's QP; its lock opens the critical region.
    let st = unsafe { &(*qp.cast::<Qp>()).ex };
    st.lock.acquire();
    // SAFETY: inside the region now.
    unsafe { pending(qp) }.clear();
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: inside the region the application opened with wr_start.
    unsafe { pending(qp) }.clear();
    // SAFETY: as above.
    unsafe { &(*qp.cast::<Qp>()).ex }.lock.release();
}

/// Posts every work request built since `wr_start` in one batch, or none of them: the
/// first error found while building, EINVAL for one the QP cannot carry out (a region not
/// registered, too much inline data), ENOMEM when the SQ lacks room for all.
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: inside the region the application opened with wr_start.
    let p = unsafe { pending(qp) };
    // SAFETY: as above.
    let r = unsafe { post(qp.cast::<Qp>(), p) };
    p.clear();
    // SAFETY: as above.
    unsafe { &(*qp.cast::<Qp>()).ex }.lock.release();
    r
}

/// # Safety
/// `q` is a live QP of this library; `p` its pending work.
unsafe fn post(q: *const Qp, p: &Pending) -> c_int {
    if p.error != 0 {
        return p.error;
    }
    // SAFETY: the caller's QP; its context is ours.
    let (q, c) = unsafe { (&*q, ctx_of((*q).ibv.qp_base.context)) };
    let Some(c) = c else {
        return libc::EINVAL;
    };
    let regions = c.regions_read();
    let mut batch = q.qp.batch();
    for b in &p.wrs {
        let (sgs, inline) = match b.data {
            Data::None => (Vec::new(), None),
            Data::Sge(s, e) => {
                // SAFETY: `e - s` SGEs of the pending work's own buffer.
                match unsafe { sg_list(&regions, p.sges[s..e].as_ptr(), (e - s) as c_int) } {
                    Some(v) => (v, None),
                    None => return libc::EINVAL,
                }
            }
            Data::Inline(s, e) => (Vec::new(), Some(&p.inline[s..e])),
        };
        let send = SendWr {
            wr_id: b.wr_id,
            opcode: b.op,
            sg_list: &sgs,
            inline,
            signaled: q.sig_all || b.flags & IBV_SEND_SIGNALED != 0,
            solicited: b.flags & IBV_SEND_SOLICITED != 0,
            fence: b.flags & IBV_SEND_FENCE != 0,
        };
        if batch.send(&send).is_err() {
            return libc::EINVAL;
        }
    }
    match batch.submit() {
        Ok(()) => 0,
        Err(_) => libc::ENOMEM,
    }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: the application calls builders inside its critical region.
    unsafe { build(qp, WrOpcode::Send) }
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: __be32) {
    // SAFETY: as in wr_send. The 32 bits travel in the order the application gave them.
    unsafe { build(qp, WrOpcode::SendWithImm { imm }) }
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: as in wr_send.
    unsafe { build(qp, WrOpcode::SendWithInvalidate { stag: Stag(rkey) }) }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: as in wr_send.
    unsafe {
        build(
            qp,
            WrOpcode::RdmaWrite {
                rkey: Stag(rkey),
                remote_addr,
            },
        )
    }
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm: __be32,
) {
    let op = WrOpcode::RdmaWriteWithImm {
        rkey: Stag(rkey),
        remote_addr,
        imm: imm as u64,
    };
    // SAFETY: as in wr_send.
    unsafe { build(qp, op) }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: as in wr_send.
    unsafe {
        build(
            qp,
            WrOpcode::RdmaRead {
                rkey: Stag(rkey),
                remote_addr,
            },
        )
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let op = WrOpcode::CmpSwap {
        rkey: Stag(rkey),
        remote_addr,
        compare,
        swap,
    };
    // SAFETY: as in wr_send.
    unsafe { build(qp, op) }
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    let op = WrOpcode::FetchAdd {
        rkey: Stag(rkey),
        remote_addr,
        add,
    };
    // SAFETY: as in wr_send.
    unsafe { build(qp, op) }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: as in wr_send.
    unsafe { build(qp, WrOpcode::LocalInvalidate { stag: Stag(rkey) }) }
}

/// Binds a type 2 window. Its STag keeps its key: a bind asking for another `rkey` (as
/// after `ibv_inc_rkey`) fails with EINVAL, since the engine cannot change a window's key.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: the application's window and bind description, read before the builder
    // records the work (NULL checked).
    let op = unsafe {
        if mw.is_null() || info.is_null() || (*info).mr.is_null() || (*mw).rkey != rkey {
            None
        } else {
            let b = &*info;
            window_access(b.mw_access_flags).map(|access| WrOpcode::BindMw {
                mw: Stag(rkey),
                mr: Stag((*b.mr).lkey),
                to: b.addr,
                len: b.length,
                access,
            })
        }
    };
    match op {
        // SAFETY: as in wr_send.
        Some(op) => unsafe { build(qp, op) },
        // SAFETY: as in wr_send.
        None => unsafe { refuse(qp, libc::EINVAL) },
    }
}

/// A window's `IBV_ACCESS_*` rights as Verbs access rights. A window grants remote rights
/// only; that remote write needs local write is a rule for the region under it (checked
/// when the region was registered), not for the window.
pub(crate) fn window_access(ibv: u32) -> Option<u32> {
    access_of(ibv | IBV_ACCESS_LOCAL_WRITE)
        .ok()
        .map(|a| a & !iwarp_verbs::access::LOCAL_WRITE)
}

/// TSO is for UD and raw packet QPs (`send_ops_flags` refuses it at creation).
unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: as in wr_send.
    unsafe { refuse(qp, libc::EOPNOTSUPP) }
}

/// RDMA Atomic Write is not an iWARP operation (`send_ops_flags` refuses it at creation).
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    _rkey: u32,
    _remote_addr: u64,
    _data: *const c_void,
) {
    // SAFETY: as in wr_send.
    unsafe { refuse(qp, libc::EOPNOTSUPP) }
}

/// A UD destination: every QP here is RC, which has none.
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, _ah: *mut ibv_ah, _qpn: u32, _qkey: u32) {
    // SAFETY: as in wr_send.
    unsafe { refuse(qp, libc::EINVAL) }
}

/// An XRC target: every QP here is RC, which has none.
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, _srqn: u32) {
    // SAFETY: as in wr_send.
    unsafe { refuse(qp, libc::EINVAL) }
}

/// Attaches `n` SGEs to the last work request (a setter without one fails the region).
///
/// # Safety
/// As [`pending`]; `sg` holds `n` SGEs.
unsafe fn set_sges(qp: *mut ibv_qp_ex, sg: *const ibv_sge, n: usize) {
    // SAFETY: forwarded.
    let p = unsafe { pending(qp) };
    let s = p.sges.len();
    if n > 0 {
        // SAFETY: the caller's list of `n`.
        p.sges
            .extend_from_slice(unsafe { core::slice::from_raw_parts(sg, n) });
    }
    let e = p.sges.len();
    match p.wrs.last_mut() {
        Some(b) => b.data = Data::Sge(s, e),
        None => p.fail(libc::EINVAL),
    }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: inside the critical region; one SGE.
    unsafe { set_sges(qp, &sge, 1) }
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, n: usize, sg: *const ibv_sge) {
    if n > 0 && sg.is_null() {
        // SAFETY: inside the critical region.
        return unsafe { refuse(qp, libc::EINVAL) };
    }
    // SAFETY: inside the critical region; the application's `n` SGEs.
    unsafe { set_sges(qp, sg, n) }
}

/// Copies `bufs` as the last work request's inline data now: the application may reuse
/// them as soon as the setter returns. Only Send and RDMA Write carry inline data.
///
/// # Safety
/// As [`pending`]; each buffer is readable for its length.
unsafe fn set_inline(qp: *mut ibv_qp_ex, bufs: &[(*const u8, usize)]) {
    // SAFETY: forwarded.
    let p = unsafe { pending(qp) };
    let s = p.inline.len();
    for &(a, n) in bufs {
        if n > 0 {
            if a.is_null() {
                p.fail(libc::EINVAL);
                return;
            }
            // SAFETY: the caller's readable buffer.
            p.inline
                .extend_from_slice(unsafe { core::slice::from_raw_parts(a, n) });
        }
    }
    let e = p.inline.len();
    match p.wrs.last_mut() {
        Some(b)
            if matches!(
                b.op,
                WrOpcode::Send
                    | WrOpcode::SendWithImm { .. }
                    | WrOpcode::SendWithInvalidate { .. }
                    | WrOpcode::RdmaWrite { .. }
                    | WrOpcode::RdmaWriteWithImm { .. }
            ) =>
        {
            b.data = Data::Inline(s, e)
        }
        _ => p.fail(libc::EINVAL),
    }
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: inside the critical region; the application's buffer.
    unsafe { set_inline(qp, &[(addr.cast_const().cast(), length)]) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    n: usize,
    bufs: *const ibv_data_buf,
) {
    if n > 0 && bufs.is_null() {
        // SAFETY: inside the critical region.
        return unsafe { refuse(qp, libc::EINVAL) };
    }
    let list: Vec<(*const u8, usize)> = (0..n)
        .map(|i| {
            // SAFETY: the application's `n` buffers.
            let b = unsafe { &*bufs.add(i) };
            (b.addr.cast_const().cast(), b.length)
        })
        .collect();
    // SAFETY: inside the critical region; the application's buffers.
    unsafe { set_inline(qp, &list) }
}

/// `verbs_context.create_cq_ex`: the completion fields of `IBV_WC_STANDARD_FLAGS` (the
/// InfiniBand addressing ones read as 0); timestamps, VLANs, flow tags and tag matching
/// are refused with EOPNOTSUPP, as are parent domains and ignoring overruns.
unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let fail = |e| {
        set_errno(e);
        core::ptr::null_mut()
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        return fail(libc::EINVAL);
    }
    let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        a.flags
    } else {
        0
    };
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0
        || flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
        || a.wc_flags & !(IBV_WC_STANDARD_FLAGS as u64) != 0
    {
        return fail(libc::EOPNOTSUPP);
    }
    let Ok(cqe) = c_int::try_from(a.cqe) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: forwarded: the application's context and channel.
    let cq =
        unsafe { verbs::ibv_create_cq(ctx, cqe, a.cq_context, a.channel, a.comp_vector as c_int) };
    if cq.is_null() {
        return core::ptr::null_mut();
    }
    let ex = cq.cast::<ibv_cq_ex>();
    // SAFETY: every CQ of this library is a Cq, whose head is an ibv_cq_ex; the members set
    // here are read only by the application's polls, which have not begun.
    unsafe {
        (*ex).start_poll = Some(start_poll);
        (*ex).next_poll = Some(next_poll);
        (*ex).end_poll = Some(end_poll);
        (*ex).read_opcode = Some(read_opcode);
        (*ex).read_vendor_err = Some(read_vendor_err);
        (*ex).read_byte_len = Some(read_byte_len);
        (*ex).read_imm_data = Some(read_imm_data);
        (*ex).read_qp_num = Some(read_qp_num);
        (*ex).read_src_qp = Some(read_src_qp);
        (*ex).read_wc_flags = Some(read_wc_flags);
        (*ex).read_slid = Some(read_slid);
        (*ex).read_sl = Some(read_sl);
        (*ex).read_dlid_path_bits = Some(read_dlid_path_bits);
    }
    ex
}

/// Reads one completion into the CQ's current one: 0, ENOENT when the CQ is empty, EIO
/// when the ring holds something unreadable.
///
/// # Safety
/// `cq` is a live CQ of this library, polled by the caller alone (between `start_poll` and
/// `end_poll`).
unsafe fn poll_one(cq: *mut ibv_cq_ex) -> c_int {
    let q = cq.cast::<Cq>();
    // SAFETY: the caller's CQ; only its `cq` member is borrowed.
    match unsafe { &(*q).cq }.poll_one() {
        Ok(None) => libc::ENOENT,
        Ok(Some(w)) => {
            let wc = ibv_wc_of(&w);
            // SAFETY: the caller polls alone; `status` and `wr_id` are what rdma-core's
            // inline readers take from the ibv_cq_ex itself.
            unsafe {
                (*cq).status = wc.status;
                (*cq).wr_id = wc.wr_id;
                *(*q).ex.current.get() = wc;
            }
            0
        }
        Err(_) => libc::EIO,
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the application's CQ and attributes (comp_mask must be 0).
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: the application's CQ.
    let st = unsafe { &(*cq.cast::<Cq>()).ex };
    st.lock.acquire();
    // SAFETY: this thread holds the poll lock.
    let r = unsafe { poll_one(cq) };
    if r != 0 {
        // No end_poll follows a failed start_poll.
        st.lock.release();
    }
    r
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: between start_poll and end_poll.
    unsafe { poll_one(cq) }
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: the application's CQ, whose poll lock start_poll took.
    unsafe { &(*cq.cast::<Cq>()).ex }.lock.release();
}

/// The completion `start_poll` or `next_poll` read last.
///
/// # Safety
/// `cq` is a live CQ of this library, between a successful poll and `end_poll`.
unsafe fn current<'a>(cq: *mut ibv_cq_ex) -> &'a ibv_wc {
    // SAFETY: the caller's contract.
    unsafe { &*(*cq.cast::<Cq>()).ex.current.get() }
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: the application reads after a successful poll.
    unsafe { current(cq) }.opcode
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.vendor_err
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.byte_len
}

/// The Immediate Data, or the invalidated STag (`ibv_wc_read_invalidated_rkey` calls this
/// too), whichever `read_wc_flags` names.
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: as in read_opcode; both union members are 32-bit integers.
    unsafe { current(cq).__bindgen_anon_1.imm_data }
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.qp_num
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.src_qp
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.wc_flags
}

unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.slid as u32
}

unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.sl
}

unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as in read_opcode.
    unsafe { current(cq) }.dlid_path_bits
}

#[cfg(test)]
mod tests {
    //! The offsets Debian's binaries were compiled with (rdma-core 44, x86_64): `verbs.h`'s
    //! inline `ibv_wr_*` and `ibv_wc_read_*` call through these members.
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn ibv_qp_ex_layout() {
        assert_eq!(size_of::<ibv_qp_ex>(), 352);
        assert_eq!(offset_of!(ibv_qp_ex, qp_base), 0);
        assert_eq!(offset_of!(ibv_qp_ex, comp_mask), 160);
        assert_eq!(offset_of!(ibv_qp_ex, wr_id), 168);
        assert_eq!(offset_of!(ibv_qp_ex, wr_flags), 176);
        assert_eq!(offset_of!(ibv_qp_ex, wr_atomic_cmp_swp), 184);
        assert_eq!(offset_of!(ibv_qp_ex, wr_send), 240);
        assert_eq!(offset_of!(ibv_qp_ex, wr_set_sge), 304);
        assert_eq!(offset_of!(ibv_qp_ex, wr_start), 320);
        assert_eq!(offset_of!(ibv_qp_ex, wr_complete), 328);
        assert_eq!(offset_of!(ibv_qp_ex, wr_abort), 336);
        assert_eq!(offset_of!(ibv_qp_ex, wr_atomic_write), 344);
        // ibv_qp_to_qp_ex and the QP pointer are the same address.
        assert_eq!(offset_of!(Qp, ibv), 0);
    }

    #[test]
    fn ibv_cq_ex_layout_and_its_ibv_cq_head() {
        assert_eq!(size_of::<ibv_cq_ex>(), 288);
        assert_eq!(offset_of!(ibv_cq_ex, comp_mask), 128);
        assert_eq!(offset_of!(ibv_cq_ex, status), 132);
        assert_eq!(offset_of!(ibv_cq_ex, wr_id), 136);
        assert_eq!(offset_of!(ibv_cq_ex, start_poll), 144);
        assert_eq!(offset_of!(ibv_cq_ex, read_opcode), 168);
        assert_eq!(offset_of!(ibv_cq_ex, read_wc_flags), 216);
        assert_eq!(offset_of!(ibv_cq_ex, read_completion_ts), 248);
        assert_eq!(offset_of!(ibv_cq_ex, read_completion_wallclock_ns), 280);
        // ibv_cq_ex_to_cq is a cast: the ibv_cq members sit where an ibv_cq has them.
        assert_eq!(offset_of!(Cq, ibv), 0);
        assert_eq!(offset_of!(ibv_cq_ex, context), offset_of!(ibv_cq, context));
        assert_eq!(offset_of!(ibv_cq_ex, channel), offset_of!(ibv_cq, channel));
        assert_eq!(
            offset_of!(ibv_cq_ex, cq_context),
            offset_of!(ibv_cq, cq_context)
        );
        assert_eq!(offset_of!(ibv_cq_ex, handle), offset_of!(ibv_cq, handle));
        assert_eq!(offset_of!(ibv_cq_ex, cqe), offset_of!(ibv_cq, cqe));
        assert_eq!(offset_of!(ibv_cq_ex, mutex), offset_of!(ibv_cq, mutex));
        assert_eq!(offset_of!(ibv_cq_ex, cond), offset_of!(ibv_cq, cond));
        assert_eq!(offset_of!(ibv_cq_ex, comp_events_completed), 120);
        assert_eq!(offset_of!(ibv_cq_ex, async_events_completed), 124);
        assert_eq!(size_of::<ibv_cq>(), offset_of!(ibv_cq_ex, comp_mask));
    }

    #[test]
    fn the_extended_creators_sit_where_verbs_h_looks() {
        assert_eq!(offset_of!(verbs_context, create_qp_ex), 264);
        assert_eq!(offset_of!(verbs_context, create_cq_ex), 200);
        assert_eq!(offset_of!(ibv_qp_init_attr_ex, comp_mask), 60);
        assert_eq!(offset_of!(ibv_qp_init_attr_ex, send_ops_flags), 128);
        assert_eq!(offset_of!(ibv_cq_init_attr_ex, wc_flags), 32);
    }

    #[test]
    fn only_iwarp_operations_may_be_asked_for() {
        assert_eq!(SEND_OPS & IBV_QP_EX_WITH_TSO as u64, 0);
        assert_eq!(SEND_OPS & IBV_QP_EX_WITH_ATOMIC_WRITE as u64, 0);
        assert_ne!(SEND_OPS & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as u64, 0);
    }

    #[test]
    fn a_failure_while_building_is_the_first_one_and_clearing_forgets_it() {
        let mut p = Pending::default();
        p.fail(libc::EINVAL);
        p.fail(libc::EOPNOTSUPP);
        assert_eq!(p.error, libc::EINVAL);
        p.clear();
        assert_eq!(p.error, 0);
    }
}
