//! Transmit: turns the Terminate to send, the inbound read queue (IRQ) and the Send Queue
//! into FPDUs, one per `poll_transmit` call, each within the negotiated maximum FPDU size
//! so the daemon can put it in one TCP segment (RFC 5044 section 8).

use crate::fifo::TakeFront;
use crate::mem::{AccessError, MemTable};
use crate::qp::{Conn, Inflight, Irq, Orq, Qp, QpState, RtrKind, TxCur, RTR_STAG};
use crate::rnic::{wc_opcode, Rnic};
use crate::rx::rdmap_cause;
use crate::types::{Access, SendOp, SendWr, Sge, Status};
use iwarp_abi::id::{PdId, QpId};
use iwarp_wire::ddp::{Buffer, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use iwarp_wire::mpa::fpdu::mulpdu;
use iwarp_wire::rdmap::{
    self, AOpCode, AtomicRequest, Opcode, RdmapHeader, ReadRequest, SegmentRepr,
};
use iwarp_wire::terminate::{TermCause, TerminateRepr};

/// After this many IRQ FPDUs in a row, the SQ gets a turn (siw's fairness idea).
const IRQ_BURST: u32 = 8;

/// What a transmit step finished, applied after the borrow of the QP ends.
enum Done {
    None,
    Wr { seq: u64, status: Status, len: u32 },
}

impl Rnic {
    /// Produces the next FPDU of this QP's connection into `out`, at most the negotiated
    /// maximum FPDU size. `None` when there is nothing to send now.
    pub fn poll_transmit(&mut self, qp: QpId, out: &mut [u8]) -> Option<usize> {
        let qp = self.qp_slot(qp).ok()?;
        loop {
            let Rnic { mem, qps, .. } = self;
            let q = qps.get_mut(qp as usize)?.as_mut()?;
            if !matches!(
                q.state,
                QpState::Rts | QpState::Closing | QpState::Terminate
            ) {
                return None;
            }
            let conn = q.conn.as_mut()?;
            // `is_some` first: the Terminate is large, and `take` on every call would move it.
            if let Some(t) = conn
                .terminate
                .is_some()
                .then(|| conn.terminate.take())
                .flatten()
            {
                let n = tx_terminate(conn, out, t);
                // The stream is over once the Terminate is out (RFC 5040 section 7.1).
                self.enter_error(qp, None);
                return n;
            }
            if q.state == QpState::Terminate {
                return None;
            }
            // RFC 6581 section 5: the responder sends nothing before the RTR arrives; the
            // initiator's first FPDU is the RTR.
            if conn.rtr_rx.is_some() {
                return None;
            }
            if let Some(kind) = conn.rtr_tx.take() {
                return tx_rtr(conn, out, kind);
            }
            let sq_ready = conn.cur.is_some() || next_startable(q);
            let conn = q.conn.as_mut()?;
            if !conn.irq.is_empty() && (conn.irq_burst < IRQ_BURST || !sq_ready) {
                conn.irq_burst += 1;
                let (pd, id) = (q.pd, q.id);
                match tx_irq(mem, pd, id, conn, out) {
                    Ok(n) => return n,
                    // The source is gone: the Terminate goes out on the next turn.
                    Err(cause) => {
                        self.terminate(qp, cause, &[], 0);
                        continue;
                    }
                }
            }
            conn.irq_burst = 0;
            let (n, done) = tx_sq(mem, q, out);
            match done {
                Done::None => {}
                // A failed WR completes with its error and ends the stream with a Terminate
                // (`finish_wr`), which the next turn of this loop sends.
                Done::Wr { seq, status, len } => self.finish_wr(qp, seq, status, len),
            }
            match n {
                Some(n) => return Some(n),
                // A WR that sends nothing (Local Invalidate) completed: look again.
                None if matches!(done, Done::Wr { .. }) => continue,
                None => return None,
            }
        }
    }

    /// Whether the QP has anything to transmit right now.
    pub fn wants_transmit(&self, qp: QpId) -> bool {
        let Some(Some(q)) = self.qp_entry(qp) else {
            return false;
        };
        let Some(conn) = q.conn.as_ref() else {
            return false;
        };
        matches!(
            q.state,
            QpState::Rts | QpState::Closing | QpState::Terminate
        ) && (conn.terminate.is_some()
            || (conn.rtr_rx.is_none()
                && (conn.rtr_tx.is_some()
                    || !conn.irq.is_empty()
                    || conn.cur.is_some()
                    || next_startable(q))))
    }
}

/// A Terminate (RFC 5040 section 7.1), on its own queue.
fn tx_terminate(conn: &mut Conn, out: &mut [u8], t: TerminateRepr) -> Option<usize> {
    let seg = SegmentRepr {
        version: conn.params.rdmap_version,
        opcode: Opcode::Terminate,
        last: true,
        buffer: untagged(rdmap::QN_TERMINATE, conn.msn_tx[2], 0, 0),
        header: RdmapHeader::Terminate(t),
    };
    conn.msn_tx[2] = conn.msn_tx[2].wrapping_add(1);
    emit(conn, out, &seg, None)
}

/// The peer-to-peer RTR (RFC 6581 section 5): a zero-length Send, Write or Read. A Read
/// takes an ORQ slot until its zero-length response arrives.
fn tx_rtr(conn: &mut Conn, out: &mut [u8], kind: RtrKind) -> Option<usize> {
    let v = conn.params.rdmap_version;
    let (opcode, buffer, header) = match kind {
        RtrKind::Send => (
            Opcode::Send,
            untagged(rdmap::QN_SEND, conn.msn_tx[0], 0, 0),
            RdmapHeader::None,
        ),
        RtrKind::Write => (
            Opcode::Write,
            Buffer::Tagged {
                stag: RTR_STAG,
                to: 0,
            },
            RdmapHeader::None,
        ),
        RtrKind::Read => (
            Opcode::ReadRequest,
            untagged(rdmap::QN_READ_REQUEST, conn.msn_tx[1], 0, 0),
            RdmapHeader::ReadRequest(ReadRequest {
                sink_stag: RTR_STAG,
                sink_to: 0,
                size: 0,
                src_stag: RTR_STAG,
                src_to: 0,
            }),
        ),
    };
    let seg = SegmentRepr {
        version: v,
        opcode,
        last: true,
        buffer,
        header,
    };
    let Some(n) = emit(conn, out, &seg, None) else {
        // `out` too small: try again on the next call.
        conn.rtr_tx = Some(kind);
        return None;
    };
    match kind {
        RtrKind::Send => conn.msn_tx[0] = conn.msn_tx[0].wrapping_add(1),
        RtrKind::Read => {
            conn.msn_tx[1] = conn.msn_tx[1].wrapping_add(1);
            conn.orq.push_back(Orq::Rtr);
        }
        RtrKind::Write => {}
    }
    Some(n)
}

fn untagged(qn: u32, msn: u32, mo: u32, rsvd_ulp: u32) -> Buffer {
    Buffer::Untagged {
        qn,
        msn,
        mo,
        rsvd_ulp,
    }
}

/// Emits one FPDU: `seg`'s headers, then `payload_len` octets of the scratch buffer.
fn emit(
    conn: &mut Conn,
    out: &mut [u8],
    seg: &SegmentRepr,
    payload_len: Option<usize>,
) -> Option<usize> {
    let mut hdr = [0u8; 128];
    let hl = seg.emit(&mut hdr).ok()?;
    let payload = &conn.scratch[..payload_len.unwrap_or(0)];
    conn.emitter.emit(out, &hdr[..hl], payload).ok()
}

/// Emits one FPDU whose payload is gathered by `fill` — straight into `out` when markers
/// are off, through the scratch buffer when they are on.
fn emit_gathered<F>(
    conn: &mut Conn,
    out: &mut [u8],
    seg: &SegmentRepr,
    n: usize,
    fill: F,
) -> Result<Option<usize>, AccessError>
where
    F: FnOnce(&mut [u8]) -> Result<(), AccessError>,
{
    let mut hdr = [0u8; 128];
    let Ok(hl) = seg.emit(&mut hdr) else {
        return Ok(None);
    };
    if conn.params.tx.markers {
        fill(&mut conn.scratch[..n])?;
        return Ok(conn.emitter.emit(out, &hdr[..hl], &conn.scratch[..n]).ok());
    }
    let mut failed = None;
    let r = conn.emitter.emit_with(out, &hdr[..hl], n, |dst| {
        fill(dst).map_err(|e| {
            failed = Some(e);
            iwarp_wire::Error::Malformed
        })
    });
    match (r, failed) {
        (_, Some(e)) => Err(e),
        (Ok(len), None) => Ok(Some(len)),
        (Err(_), None) => Ok(None),
    }
}

/// What emitting one data segment of the current WR came to.
enum DataSegment {
    /// An FPDU of `len` octets went into the output; `last` if it ended the payload.
    Sent { len: usize, last: bool },
    /// The output buffer had no room; nothing changed.
    Blocked,
    /// A local STag of the WR failed its check.
    Failed,
}

/// The Send opcode for its solicited-event and invalidate variants, with or without
/// immediate data (RFC 5040 section 4.2, V2 draft section 4.1).
fn send_opcode(solicited: bool, invalidate: bool, imm: bool) -> Opcode {
    match (solicited, invalidate, imm) {
        (false, false, false) => Opcode::Send,
        (false, true, false) => Opcode::SendInvalidate,
        (true, false, false) => Opcode::SendSe,
        (true, true, false) => Opcode::SendSeInvalidate,
        (false, false, true) => Opcode::SendImmediate,
        (false, true, true) => Opcode::SendInvalidateImmediate,
        (true, false, true) => Opcode::SendSeImmediate,
        (true, true, true) => Opcode::SendSeInvalidateImmediate,
    }
}

/// Can the SQ's next WR start now? Reads and atomics wait for ORD room, fenced WRs for the
/// outstanding Reads to finish (Verbs sections 6.5 and 8.2.2.2).
fn next_startable(q: &Qp) -> bool {
    let Some(wr) = q.sq.front() else { return false };
    let Some(conn) = q.conn.as_ref() else {
        return false;
    };
    if failure(wr, conn).is_some() {
        // It fails once every WR before it completed, so that those get their own
        // completions rather than a flush (Verbs section 6.2.4 allows either).
        return q.inflight.is_empty();
    }
    if wr.read_fence && !conn.orq.is_empty() {
        return false;
    }
    if wr.local_fence && !q.inflight.is_empty() {
        return false;
    }
    match wr.op {
        SendOp::Read { .. }
        | SendOp::ReadV2 { .. }
        | SendOp::FetchAdd { .. }
        | SendOp::CmpSwap { .. } => conn.orq.len() < conn.params.ord as usize,
        _ => true,
    }
}

/// Why the WR cannot run, if it cannot: refused when posted, or a Read or atomic on a
/// connection with ORD 0, which could never start (Verbs section 8.3.2, figure 23: "Zero
/// ORD" is a completion error of the SQ WR).
fn failure(wr: &SendWr, conn: &Conn) -> Option<Status> {
    let needs_ord = matches!(
        wr.op,
        SendOp::Read { .. }
            | SendOp::ReadV2 { .. }
            | SendOp::FetchAdd { .. }
            | SendOp::CmpSwap { .. }
    );
    wr.refused
        .or((needs_ord && conn.params.ord == 0).then_some(Status::LocalQpOperationError))
}

fn max_payload(conn: &Conn, header: usize) -> u32 {
    let m = mulpdu(conn.params.max_fpdu, conn.params.tx.markers);
    m.saturating_sub(header).max(1) as u32
}

/// The WR's payload from `offset`: its inline data, or gathered from its SGL.
fn payload(
    mem: &MemTable,
    pd: PdId,
    wr: &crate::types::SendWr,
    offset: u64,
    dst: &mut [u8],
) -> Result<(), AccessError> {
    if wr.is_inline {
        let o = offset as usize;
        dst.copy_from_slice(&wr.inline[o..o + dst.len()]);
        return Ok(());
    }
    gather(mem, pd, wr.sgl(), offset, dst)
}

/// Copies `dst.len()` octets of the SGL's concatenation, starting at `offset`, into `dst`,
/// checking every local STag (valid, same PD, in bounds).
fn gather(
    mem: &MemTable,
    pd: PdId,
    sgl: &[Sge],
    mut offset: u64,
    dst: &mut [u8],
) -> Result<(), AccessError> {
    let mut at = 0;
    for sge in sgl {
        if at == dst.len() {
            break;
        }
        if offset >= sge.len as u64 {
            offset -= sge.len as u64;
            continue;
        }
        let n = ((sge.len as u64 - offset) as usize).min(dst.len() - at);
        let r = mem.resolve(
            sge.stag,
            pd,
            Access::LOCAL_READ,
            sge.to + offset,
            n as u64,
            false,
        )?;
        r.raw.read(r.offset, &mut dst[at..at + n]);
        at += n;
        offset = 0;
    }
    Ok(())
}

/// One SQ WR on its way out: what each operation's transmit function works on. `cur` is a
/// copy of the connection's transmit cursor; a function puts it back when the WR goes on.
struct Tx<'a> {
    mem: &'a MemTable,
    pd: PdId,
    conn: &'a mut Conn,
    out: &'a mut [u8],
    wr: &'a SendWr,
    cur: TxCur,
}

impl Tx<'_> {
    /// Emits the next data segment of the WR: at most one MULPDU (less `header_len`) of its
    /// payload from `cur.offset`, gathered from its SGL or inline data, in the segment
    /// `build(offset, last)` describes. Advances `cur.offset` when the FPDU went out.
    fn data_segment(
        &mut self,
        header_len: usize,
        build: impl FnOnce(u64, bool) -> SegmentRepr,
    ) -> DataSegment {
        let total = self.wr.length();
        let n = (total - self.cur.offset).min(max_payload(self.conn, header_len) as u64) as usize;
        let last = self.cur.offset + n as u64 == total;
        let seg = build(self.cur.offset, last);
        let (mem, pd, wr, offset) = (self.mem, self.pd, self.wr, self.cur.offset);
        match emit_gathered(self.conn, self.out, &seg, n, |dst| {
            payload(mem, pd, wr, offset, dst)
        }) {
            Err(_) => DataSegment::Failed,
            Ok(None) => DataSegment::Blocked,
            Ok(Some(len)) => {
                self.cur.offset += n as u64;
                DataSegment::Sent { len, last }
            }
        }
    }

    /// The FPDU of `len` octets went out and more of the WR follows.
    fn goes_on(self, len: usize) -> (Option<usize>, Done) {
        self.conn.cur = Some(self.cur);
        (Some(len), Done::None)
    }

    /// The WR completed with the FPDU `sent`, `len` octets transferred.
    fn completed(self, sent: Option<usize>, len: u32) -> (Option<usize>, Done) {
        self.conn.cur = None;
        (
            sent,
            Done::Wr {
                seq: self.cur.seq,
                status: Status::Success,
                len,
            },
        )
    }

    /// A local STag of the WR failed its check.
    fn failed(self) -> (Option<usize>, Done) {
        self.conn.cur = None;
        (None, failed(self.cur.seq))
    }

    /// Nothing went out (no room in `out`); the WR stays where it was.
    fn blocked(self) -> (Option<usize>, Done) {
        (None, Done::None)
    }
}

/// The next FPDU of the SQ: starts the next WR when none is in transmission (see
/// [`start_wr`]), then gives the one in transmission to the transmit function of its
/// operation.
fn tx_sq(mem: &mut MemTable, q: &mut Qp, out: &mut [u8]) -> (Option<usize>, Done) {
    if q.conn.as_ref().is_some_and(|c| c.cur.is_none()) {
        if let Some(done) = start_wr(mem, q) {
            return done;
        }
    }
    let pd = q.pd;
    let (Some(conn), Some(wr)) = (q.conn.as_mut(), q.tx_wr.as_ref()) else {
        return (None, Done::None);
    };
    let Some(cur) = conn.cur else {
        return (None, Done::None);
    };
    let total = wr.length() as u32;
    let t = Tx {
        mem,
        pd,
        conn,
        out,
        wr,
        cur,
    };
    match wr.op {
        SendOp::Send {
            solicited,
            invalidate,
        } => tx_send(t, solicited, invalidate),
        SendOp::SendImm {
            solicited,
            invalidate,
            imm,
        } => tx_send_imm(t, solicited, invalidate, imm),
        SendOp::Write {
            remote_stag,
            remote_to,
        }
        | SendOp::WriteImm {
            remote_stag,
            remote_to,
            ..
        } if !cur.imm_phase => tx_write(t, remote_stag, remote_to),
        SendOp::WriteImm { imm, solicited, .. } => {
            let op = if solicited {
                Opcode::ImmediateDataSe
            } else {
                Opcode::ImmediateData
            };
            tx_immediate(t, imm, op, total)
        }
        SendOp::Immediate {
            imm,
            solicited: false,
        } => tx_immediate(t, imm, Opcode::ImmediateData, 0),
        SendOp::Immediate {
            imm,
            solicited: true,
        } => tx_immediate(t, imm, Opcode::ImmediateDataSe, 0),
        SendOp::Read {
            remote_stag,
            remote_to,
        } => tx_read_request(t, remote_stag, remote_to, false),
        SendOp::ReadV2 {
            remote_stag,
            remote_to,
        } => tx_read_request(t, remote_stag, remote_to, true),
        SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => tx_atomic(t),
        // A Write's data all went out (its cursor never stays in the immediate phase), and
        // local operations complete in `start_wr`.
        SendOp::Write { .. }
        | SendOp::LocalInvalidate { .. }
        | SendOp::BindMw { .. }
        | SendOp::FastRegister { .. } => (None, Done::None),
    }
}

/// Takes the SQ's next WR, if it may start, into transmission: gives it its place in the
/// completion order, and answers at once what needs no FPDU (a WR that fails before going
/// out, or a local operation, see [`tx_local`]). `None` when the WR now has its transmit
/// cursor and goes on the wire.
fn start_wr(mem: &mut MemTable, q: &mut Qp) -> Option<(Option<usize>, Done)> {
    let (pd, qp) = (q.pd, q.id);
    if !next_startable(q) {
        return Some((None, Done::None));
    }
    // Straight from the SQ into its place for transmission (a WR is large: see TxCur).
    q.tx_wr = q.sq.take_front();
    let Some(wr) = q.tx_wr.as_ref() else {
        return Some((None, Done::None));
    };
    let seq = q.next_seq;
    q.next_seq += 1;
    q.inflight.push_back(Inflight {
        seq,
        wr_id: wr.wr_id,
        opcode: wc_opcode(&wr.op),
        signaled: wr.signaled,
        done: None,
    });
    if let Some(status) = q.conn.as_ref().and_then(|c| failure(wr, c)) {
        // Completes in its turn through `finish_wr`, which ends the stream with a
        // Terminate and flushes the WRs behind it.
        return Some((
            None,
            Done::Wr {
                seq,
                status,
                len: 0,
            },
        ));
    }
    if let Some(status) = tx_local(mem, pd, qp, &wr.op) {
        return Some((
            None,
            Done::Wr {
                seq,
                status,
                len: 0,
            },
        ));
    }
    if let Some(conn) = q.conn.as_mut() {
        conn.cur = Some(TxCur {
            seq,
            offset: 0,
            imm_phase: false,
        });
    }
    None
}

/// Local Invalidate, Bind Memory Window and Fast-Register: work that touches only the local
/// STag table and completes without going on the wire. Their status, or `None` for an
/// operation that goes on the wire.
fn tx_local(mem: &mut MemTable, pd: PdId, qp: QpId, op: &SendOp) -> Option<Status> {
    let result = match *op {
        SendOp::LocalInvalidate { stag } => mem.invalidate(stag, pd, qp, false),
        SendOp::BindMw {
            mw,
            mr,
            to,
            len,
            access,
        } => mem.bind_mw(mw, mr, pd, qp, to, len, access),
        SendOp::FastRegister {
            stag,
            source,
            offset,
            len,
            access,
            base_to,
        } => mem.fast_register(
            pd,
            crate::mem::FastReg {
                stag,
                source,
                offset,
                len,
                access,
                base_to,
            },
        ),
        _ => return None,
    };
    Some(if result.is_ok() {
        Status::Success
    } else {
        Status::LocalProtectionError
    })
}

/// Send, Send with Invalidate and their solicited-event forms (RFC 5040 section 5.3): the
/// payload in untagged segments on the Send queue, the last one with L set.
fn tx_send(mut t: Tx, solicited: bool, invalidate: Option<u32>) -> (Option<usize>, Done) {
    let opcode = send_opcode(solicited, invalidate.is_some(), false);
    let (v, msn) = (t.conn.params.rdmap_version, t.conn.msn_tx[0]);
    let built = |offset: u64, last| SegmentRepr {
        version: v,
        opcode,
        last,
        buffer: untagged(rdmap::QN_SEND, msn, offset as u32, invalidate.unwrap_or(0)),
        header: RdmapHeader::None,
    };
    match t.data_segment(UNTAGGED_HEADER_LEN, built) {
        DataSegment::Failed => t.failed(),
        DataSegment::Blocked => t.blocked(),
        DataSegment::Sent { len, last: true } => {
            t.conn.msn_tx[0] = t.conn.msn_tx[0].wrapping_add(1);
            let total = t.wr.length() as u32;
            t.completed(Some(len), total)
        }
        DataSegment::Sent { len, last: false } => t.goes_on(len),
    }
}

/// Send with Immediate and its forms (V2 draft section 5.3): data segments without L, then
/// a last ULPDU, L set, that carries only the immediate data.
fn tx_send_imm(
    mut t: Tx,
    solicited: bool,
    invalidate: Option<u32>,
    imm: u64,
) -> (Option<usize>, Done) {
    let opcode = send_opcode(solicited, invalidate.is_some(), true);
    let rsvd = invalidate.unwrap_or(0);
    let v = t.conn.params.rdmap_version;
    let total = t.wr.length();
    if t.cur.imm_phase || total == 0 {
        let seg = SegmentRepr {
            version: v,
            opcode,
            last: true,
            buffer: untagged(rdmap::QN_SEND, t.conn.msn_tx[0], total as u32, rsvd),
            header: RdmapHeader::None,
        };
        let bytes = imm.to_be_bytes();
        let Ok(sent) = emit_gathered(t.conn, t.out, &seg, 8, |dst| {
            dst.copy_from_slice(&bytes);
            Ok(())
        }) else {
            return t.blocked();
        };
        if sent.is_none() {
            return t.blocked();
        }
        t.conn.msn_tx[0] = t.conn.msn_tx[0].wrapping_add(1);
        return t.completed(sent, total as u32);
    }
    // Data segments never carry L: the immediate data ends the message.
    let msn = t.conn.msn_tx[0];
    let built = |offset: u64, _| SegmentRepr {
        version: v,
        opcode,
        last: false,
        buffer: untagged(rdmap::QN_SEND, msn, offset as u32, rsvd),
        header: RdmapHeader::None,
    };
    match t.data_segment(UNTAGGED_HEADER_LEN, built) {
        DataSegment::Failed => t.failed(),
        DataSegment::Blocked => t.blocked(),
        DataSegment::Sent { len, last } => {
            t.cur.imm_phase = last;
            t.goes_on(len)
        }
    }
}

/// RDMA Write, and the Write part of Write with Immediate (RFC 5040 section 5.1): the
/// payload in tagged segments at the advertised buffer. Write with Immediate goes on to its
/// Immediate Data message ([`tx_immediate`]).
fn tx_write(mut t: Tx, remote_stag: u32, remote_to: u64) -> (Option<usize>, Done) {
    let v = t.conn.params.rdmap_version;
    let built = |offset: u64, last| SegmentRepr {
        version: v,
        opcode: Opcode::Write,
        last,
        buffer: Buffer::Tagged {
            stag: remote_stag,
            to: remote_to.wrapping_add(offset),
        },
        header: RdmapHeader::None,
    };
    match t.data_segment(TAGGED_HEADER_LEN, built) {
        DataSegment::Failed => t.failed(),
        DataSegment::Blocked => t.blocked(),
        DataSegment::Sent { len, last: true } if matches!(t.wr.op, SendOp::WriteImm { .. }) => {
            t.cur.imm_phase = true;
            t.goes_on(len)
        }
        DataSegment::Sent { len, last: true } => {
            let total = t.wr.length() as u32;
            t.completed(Some(len), total)
        }
        DataSegment::Sent { len, last: false } => t.goes_on(len),
    }
}

/// An Immediate Data message (V2 draft section 4.2): alone, or ending a Write with
/// Immediate; `len` is what the completion reports.
fn tx_immediate(t: Tx, imm: u64, opcode: Opcode, len: u32) -> (Option<usize>, Done) {
    let seg = SegmentRepr {
        version: t.conn.params.rdmap_version,
        opcode,
        last: true,
        buffer: untagged(rdmap::QN_SEND, t.conn.msn_tx[0], 0, 0),
        header: RdmapHeader::Immediate(imm),
    };
    let sent = emit(t.conn, t.out, &seg, None);
    if sent.is_none() {
        return t.blocked();
    }
    t.conn.msn_tx[0] = t.conn.msn_tx[0].wrapping_add(1);
    t.completed(sent, len)
}

/// An RDMA Read Request (RFC 5040 section 5.2), or with `v2` the V2 draft's form without a
/// sink: one segment on the Read Request queue. The WR waits in the ORQ for its response.
fn tx_read_request(t: Tx, remote_stag: u32, remote_to: u64, v2: bool) -> (Option<usize>, Done) {
    let sink = read_sink(t.wr);
    let (opcode, header) = if v2 {
        (
            Opcode::ReadRequestV2,
            RdmapHeader::ReadRequestV2(iwarp_wire::rdmap::ReadRequestV2 {
                size: sink.len,
                src_stag: remote_stag,
                src_to: remote_to,
            }),
        )
    } else {
        (
            Opcode::ReadRequest,
            RdmapHeader::ReadRequest(ReadRequest {
                sink_stag: sink.stag,
                sink_to: sink.to,
                size: sink.len,
                src_stag: remote_stag,
                src_to: remote_to,
            }),
        )
    };
    let seg = SegmentRepr {
        version: t.conn.params.rdmap_version,
        opcode,
        last: true,
        buffer: untagged(rdmap::QN_READ_REQUEST, t.conn.msn_tx[1], 0, 0),
        header,
    };
    let sent = emit(t.conn, t.out, &seg, None);
    if sent.is_some() {
        let seq = t.cur.seq;
        t.conn.msn_tx[1] = t.conn.msn_tx[1].wrapping_add(1);
        t.conn.orq.push_back(if v2 {
            Orq::ReadV2 {
                seq,
                sink,
                received: 0,
            }
        } else {
            Orq::Read {
                seq,
                sink_stag: sink.stag,
                sink_to: sink.to,
                len: sink.len,
            }
        });
        t.conn.cur = None;
    }
    (sent, Done::None)
}

/// An Atomic Request (RFC 7306 section 4): the result buffer, the WR's one SGE, is checked
/// first; the WR waits in the ORQ for its response.
fn tx_atomic(t: Tx) -> (Option<usize>, Done) {
    let sge = t.wr.sgl[0];
    if t.mem
        .resolve(sge.stag, t.pd, Access::LOCAL_WRITE, sge.to, 8, true)
        .is_err()
    {
        return t.failed();
    }
    let request_id = t.conn.next_request_id;
    let req = match t.wr.op {
        SendOp::FetchAdd {
            remote_stag,
            remote_to,
            add,
            add_mask,
        } => AtomicRequest {
            aopcode: AOpCode::FetchAdd,
            request_id,
            stag: remote_stag,
            to: remote_to,
            add_swap: add,
            add_swap_mask: add_mask,
            // RFC 7306 figure 5: not used by FetchAdd; zero and all ones on transmit.
            compare: 0,
            compare_mask: u64::MAX,
        },
        SendOp::CmpSwap {
            remote_stag,
            remote_to,
            compare,
            compare_mask,
            swap,
            swap_mask,
        } => AtomicRequest {
            aopcode: AOpCode::CmpSwap,
            request_id,
            stag: remote_stag,
            to: remote_to,
            add_swap: swap,
            add_swap_mask: swap_mask,
            compare,
            compare_mask,
        },
        _ => return t.blocked(),
    };
    let seg = SegmentRepr {
        version: t.conn.params.rdmap_version,
        opcode: Opcode::AtomicRequest,
        last: true,
        buffer: untagged(rdmap::QN_READ_REQUEST, t.conn.msn_tx[1], 0, 0),
        header: RdmapHeader::AtomicRequest(req),
    };
    let sent = emit(t.conn, t.out, &seg, None);
    if sent.is_some() {
        t.conn.next_request_id = t.conn.next_request_id.wrapping_add(1);
        t.conn.msn_tx[1] = t.conn.msn_tx[1].wrapping_add(1);
        t.conn.orq.push_back(Orq::Atomic {
            seq: t.cur.seq,
            request_id,
            result_stag: sge.stag,
            result_to: sge.to,
        });
        t.conn.cur = None;
    }
    (sent, Done::None)
}

/// The sink a Read advertises: its one SGE, or for a zero-length Read without one (a fence,
/// Verbs section 8.2.2.2) an empty sink under [`RTR_STAG`], which hardware accepts at zero
/// length where it refuses STag 0.
fn read_sink(wr: &SendWr) -> Sge {
    match wr.sgl() {
        [sge, ..] => *sge,
        [] => Sge {
            stag: RTR_STAG,
            to: 0,
            len: 0,
        },
    }
}

/// The WR `seq` failed a local check (Verbs figure 23, local SQ protection error).
fn failed(seq: u64) -> Done {
    Done::Wr {
        seq,
        status: Status::LocalProtectionError,
        len: 0,
    }
}

/// The next FPDU answering the IRQ's oldest request, its source checked again first (see
/// [`Irq`]): the IRQ's dispatcher, one transmit function per kind of response. `Err` with
/// the Terminate's cause when that check fails.
fn tx_irq(
    mem: &MemTable,
    pd: PdId,
    qp: QpId,
    conn: &mut Conn,
    out: &mut [u8],
) -> Result<Option<usize>, TermCause> {
    let src = Source { mem, pd, qp };
    match conn.irq.front().copied() {
        None => Ok(None),
        Some(Irq::Read {
            sink_stag,
            sink_to,
            src_stag,
            src_to,
            len,
            sent,
        }) => tx_read_response(
            src,
            conn,
            out,
            (sink_stag, sink_to),
            (src_stag, src_to),
            len,
            sent,
        ),
        Some(Irq::ReadV2 {
            src_stag,
            src_to,
            len,
            sent,
        }) => tx_read_response_v2(src, conn, out, (src_stag, src_to), len, sent),
        Some(Irq::Atomic {
            request_id,
            req,
            executed,
        }) => tx_atomic_response(src, conn, out, request_id, &req, executed),
    }
}

/// Where a response's data comes from: the responder's memory, as the requester's QP may
/// read it.
#[derive(Clone, Copy)]
struct Source<'a> {
    mem: &'a MemTable,
    pd: PdId,
    qp: QpId,
}

impl Source<'_> {
    /// Reads `dst.len()` octets of the source at `to` (nothing for an empty segment, which
    /// names no memory: a zero-length Read needs no valid STag).
    fn read(self, stag: u32, to: u64, dst: &mut [u8]) -> Result<(), AccessError> {
        if dst.is_empty() {
            return Ok(());
        }
        let r = self.mem.resolve_remote(
            stag,
            self.pd,
            self.qp,
            Access::REMOTE_READ,
            to,
            dst.len() as u64,
            false,
        )?;
        r.raw.read(r.offset, dst);
        Ok(())
    }
}

/// A Read Response segment (RFC 5040): tagged, into the requester's sink.
fn tx_read_response(
    src: Source,
    conn: &mut Conn,
    out: &mut [u8],
    (sink_stag, sink_to): (u32, u64),
    (src_stag, src_to): (u32, u64),
    len: u32,
    sent: u32,
) -> Result<Option<usize>, TermCause> {
    let n = (len - sent).min(max_payload(conn, TAGGED_HEADER_LEN)) as usize;
    let last = sent + n as u32 == len;
    let seg = SegmentRepr {
        version: conn.params.rdmap_version,
        opcode: Opcode::ReadResponse,
        last,
        buffer: Buffer::Tagged {
            stag: sink_stag,
            to: sink_to.wrapping_add(sent as u64),
        },
        header: RdmapHeader::None,
    };
    let fill = |dst: &mut [u8]| src.read(src_stag, src_to.wrapping_add(sent as u64), dst);
    let Some(r) = emit_gathered(conn, out, &seg, n, fill).map_err(rdmap_cause)? else {
        return Ok(None);
    };
    if last {
        conn.irq.take_front();
    } else if let Some(Irq::Read { sent, .. }) = conn.irq.front_mut() {
        *sent += n as u32;
    }
    Ok(Some(r))
}

/// A version-2 Read Response segment: untagged, on the response queue, its offset in MO.
fn tx_read_response_v2(
    src: Source,
    conn: &mut Conn,
    out: &mut [u8],
    (src_stag, src_to): (u32, u64),
    len: u32,
    sent: u32,
) -> Result<Option<usize>, TermCause> {
    let n = (len - sent).min(max_payload(conn, UNTAGGED_HEADER_LEN)) as usize;
    let last = sent + n as u32 == len;
    let seg = SegmentRepr {
        version: conn.params.rdmap_version,
        opcode: Opcode::ReadResponseV2,
        last,
        buffer: untagged(rdmap::QN_RESPONSE, conn.msn_tx[3], sent, 0),
        header: RdmapHeader::None,
    };
    let fill = |dst: &mut [u8]| src.read(src_stag, src_to.wrapping_add(sent as u64), dst);
    let Some(r) = emit_gathered(conn, out, &seg, n, fill).map_err(rdmap_cause)? else {
        return Ok(None);
    };
    if last {
        conn.msn_tx[3] = conn.msn_tx[3].wrapping_add(1);
        conn.irq.take_front();
    } else if let Some(Irq::ReadV2 { sent, .. }) = conn.irq.front_mut() {
        *sent += n as u32;
    }
    Ok(Some(r))
}

/// An Atomic Response (RFC 7306): the operation executed now, with a real
/// atomic instruction on the registered memory, exactly once: if the response does not fit
/// `out` this time, the original value is kept for the next call instead of running the
/// operation again.
fn tx_atomic_response(
    src: Source,
    conn: &mut Conn,
    out: &mut [u8],
    request_id: u32,
    req: &AtomicRequest,
    executed: Option<u64>,
) -> Result<Option<usize>, TermCause> {
    let original = match executed {
        Some(v) => v,
        None => {
            let target = src
                .mem
                .resolve_remote(
                    req.stag,
                    src.pd,
                    src.qp,
                    Access::REMOTE_ATOMIC,
                    req.to,
                    8,
                    true,
                )
                .map_err(rdmap_cause)?;
            let v = match req.aopcode {
                AOpCode::FetchAdd => {
                    target
                        .raw
                        .fetch_add(target.offset, req.add_swap, req.add_swap_mask)
                }
                AOpCode::CmpSwap => target.raw.cmp_swap(
                    target.offset,
                    req.compare,
                    req.compare_mask,
                    req.add_swap,
                    req.add_swap_mask,
                ),
            };
            if let Some(Irq::Atomic { executed, .. }) = conn.irq.front_mut() {
                *executed = Some(v);
            }
            v
        }
    };
    let seg = SegmentRepr {
        version: conn.params.rdmap_version,
        opcode: Opcode::AtomicResponse,
        last: true,
        buffer: untagged(rdmap::QN_RESPONSE, conn.msn_tx[3], 0, 0),
        header: RdmapHeader::AtomicResponse {
            request_id,
            original,
        },
    };
    let Some(r) = emit(conn, out, &seg, None) else {
        return Ok(None);
    };
    conn.msn_tx[3] = conn.msn_tx[3].wrapping_add(1);
    conn.irq.take_front();
    Ok(Some(r))
}
