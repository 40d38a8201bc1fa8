//! Record <-> engine conversions. Pure functions, no I/O.

use iwarp_abi::command::Upcall;
use iwarp_abi::qp::Terminated;
use iwarp_abi::wqe::{
    self, cqe_flags, send_flags, AsyncEventKind, Cqe, RecvWqe, SendOpcode, SendWqe,
};
use iwarp_engine::{Access, AsyncEvent, RecvWr, SendOp, SendWr, WorkCompletion};

/// Converts an application's SQ entry. `Err(())` for a corrupted or meaningless entry: the
/// caller completes it with [`wqe::CqeStatus::LocalQpOperationError`].
#[allow(clippy::result_unit_err)]
pub fn send_wr(w: &SendWqe) -> Result<SendWr, ()> {
    let op = w.validate().map_err(|_| ())?;
    let se = w.has(send_flags::SOLICITED);
    let access = Access::from_bits(w.access).ok_or(())?;
    let (rs, rt) = (w.remote_stag, w.remote_to);
    let send_op = match op {
        SendOpcode::Send => SendOp::Send {
            solicited: se,
            invalidate: None,
        },
        SendOpcode::SendInv => SendOp::Send {
            solicited: se,
            invalidate: Some(w.invalidate_stag),
        },
        SendOpcode::Write => SendOp::Write {
            remote_stag: rs,
            remote_to: rt,
        },
        SendOpcode::WriteImm => SendOp::WriteImm {
            remote_stag: rs,
            remote_to: rt,
            imm: w.imm,
            solicited: se,
        },
        SendOpcode::Read => SendOp::Read {
            remote_stag: rs,
            remote_to: rt,
        },
        SendOpcode::ReadV2 => SendOp::ReadV2 {
            remote_stag: rs,
            remote_to: rt,
        },
        SendOpcode::FetchAdd => SendOp::FetchAdd {
            remote_stag: rs,
            remote_to: rt,
            add: w.compare_add,
            add_mask: w.compare_add_mask,
        },
        SendOpcode::CmpSwap => SendOp::CmpSwap {
            remote_stag: rs,
            remote_to: rt,
            compare: w.compare_add,
            compare_mask: w.compare_add_mask,
            swap: w.swap,
            swap_mask: w.swap_mask,
        },
        SendOpcode::Immediate => SendOp::Immediate {
            imm: w.imm,
            solicited: se,
        },
        SendOpcode::SendImm | SendOpcode::SendInvImm => SendOp::SendImm {
            solicited: se,
            invalidate: (op == SendOpcode::SendInvImm).then_some(w.invalidate_stag),
            imm: w.imm,
        },
        SendOpcode::LocalInv => SendOp::LocalInvalidate { stag: w.local_stag },
        SendOpcode::FastReg => SendOp::FastRegister {
            stag: w.local_stag,
            source: w.mr_stag,
            offset: w.mr_offset,
            len: w.mr_len,
            access,
            base_to: w.mr_to,
        },
        SendOpcode::BindMw => SendOp::BindMw {
            mw: w.local_stag,
            mr: w.mr_stag,
            to: w.mr_to,
            len: w.mr_len,
            access,
        },
    };
    let mut wr = if w.has(send_flags::INLINE) {
        SendWr::with_inline(w.wr_id, send_op, w.inline()).ok_or(())?
    } else {
        SendWr::new(w.wr_id, send_op, w.sgl())
    };
    wr.signaled = w.has(send_flags::SIGNALED);
    wr.read_fence = w.has(send_flags::FENCE);
    wr.local_fence = w.has(send_flags::LOCAL_FENCE);
    Ok(wr)
}

/// Converts an application's RQ / S-RQ entry; `Err(())` for a corrupted one.
#[allow(clippy::result_unit_err)]
pub fn recv_wr(w: &RecvWqe) -> Result<RecvWr, ()> {
    w.validate().map_err(|_| ())?;
    Ok(RecvWr::new(w.wr_id, w.sgl()))
}

/// The CQE for an engine completion; its QP number is control's, which the engine was given.
pub fn cqe(wc: &WorkCompletion) -> Cqe {
    let mut flags = 0;
    if wc.imm.is_some() {
        flags |= cqe_flags::IMM;
    }
    if wc.invalidated_stag.is_some() {
        flags |= cqe_flags::INVALIDATED;
    }
    if wc.solicited {
        flags |= cqe_flags::SOLICITED;
    }
    Cqe {
        wr_id: wc.wr_id,
        qp_num: wc.qp.0,
        opcode: wc.opcode as u8,
        status: wc.status as u8,
        flags,
        byte_len: wc.byte_len,
        invalidated_stag: wc.invalidated_stag.unwrap_or(0),
        imm: wc.imm.unwrap_or(0),
        ..Cqe::default()
    }
}

/// The stand-in for an SQ entry [`send_wr`] refused: its id and, as far as its opcode is
/// readable, its operation (what its error completion reports), nothing else. Posted as a
/// failed WR, it never runs, so it is the entry's opcode alone, converted as any entry is.
pub fn stand_in(w: &SendWqe) -> SendWr {
    let opcode = w.op().unwrap_or(SendOpcode::Send);
    let blank = SendWqe {
        wr_id: w.wr_id,
        opcode: opcode as u8,
        ..SendWqe::default()
    };
    // A known opcode with nothing else set always converts; a Send is the last resort.
    send_wr(&blank).unwrap_or_else(|()| {
        let send = SendOp::Send {
            solicited: false,
            invalidate: None,
        };
        SendWr::new(w.wr_id, send, &[])
    })
}

/// The async-event record and the control upcall for an engine event (its ids are control's).
pub fn event(e: &AsyncEvent) -> (wqe::AsyncEvent, Upcall) {
    let mut r;
    let up;
    match *e {
        AsyncEvent::TerminateReceived { qp, cause } | AsyncEvent::TerminateSent { qp, cause } => {
            let received = matches!(e, AsyncEvent::TerminateReceived { .. });
            r = wqe::AsyncEvent::new(if received {
                AsyncEventKind::TerminateReceived
            } else {
                AsyncEventKind::TerminateSent
            });
            r.qp = qp.0;
            r.term_layer = cause.layer as u8;
            r.term_type = cause.etype;
            r.term_code = cause.code;
            up = Upcall::QpTerminated(Terminated {
                qp,
                received,
                layer: r.term_layer,
                etype: r.term_type,
                code: r.term_code,
            });
        }
        AsyncEvent::CqOverflow { cq } => {
            r = wqe::AsyncEvent::new(AsyncEventKind::CqOverflow);
            r.cq = cq.0;
            up = Upcall::CqOverflow { cq: r.cq };
        }
        AsyncEvent::QpError { qp } => {
            r = wqe::AsyncEvent::new(AsyncEventKind::QpError);
            r.qp = qp.0;
            up = Upcall::QpError { qp: r.qp };
        }
        AsyncEvent::ConnectionClosed { qp } => {
            r = wqe::AsyncEvent::new(AsyncEventKind::ConnectionClosed);
            r.qp = qp.0;
            // Control learns of the close from the TCP side (TcpClosed) and tells the
            // application; this records the QP's move out of RTS (to Idle, or on to Error,
            // which a QpError reports after it).
            up = Upcall::QpClosed { qp: r.qp };
        }
        AsyncEvent::SrqLimitReached { srq } => {
            r = wqe::AsyncEvent::new(AsyncEventKind::SrqLimit);
            r.srq = srq.0;
            up = Upcall::SrqLimit { srq: r.srq };
        }
    }
    (r, up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_abi::wqe::{CqeOpcode, CqeStatus, Sge};
    use iwarp_engine::{Status, WcOpcode};

    #[test]
    fn every_send_opcode_converts_with_its_fields() {
        let sge = Sge {
            stag: 0x100,
            len: 8,
            to: 0x2000,
        };
        for v in 0..=SendOpcode::BindMw as u8 {
            // A solicited event is a flag, not an opcode: its old opcode values are unknown.
            let Ok(op) = SendOpcode::try_from(v) else {
                assert!([1, 3, 11, 13, 15].contains(&v), "{v}");
                continue;
            };
            let mut w = SendWqe::new(v as u64, op, &[sge]).unwrap();
            w.remote_stag = 7;
            w.remote_to = 0x40;
            w.imm = 0xabcd;
            w.invalidate_stag = 9;
            w.local_stag = 11;
            w.mr_stag = 12;
            w.access = wqe::access::REMOTE_WRITE;
            w.flags |= send_flags::FENCE;
            if op == SendOpcode::SendInv {
                w.flags |= send_flags::SOLICITED;
            }
            let wr = send_wr(&w).unwrap();
            assert_eq!(wr.wr_id, v as u64);
            assert!(wr.signaled && wr.read_fence && !wr.local_fence);
            assert_eq!(
                wr.sgl(),
                &[Sge {
                    stag: 0x100,
                    to: 0x2000,
                    len: 8
                }]
            );
            let ok = match (op, wr.op) {
                (
                    SendOpcode::Send,
                    SendOp::Send {
                        solicited: false,
                        invalidate: None,
                    },
                ) => true,
                (
                    SendOpcode::SendInv,
                    SendOp::Send {
                        solicited: true,
                        invalidate: Some(9),
                    },
                ) => true,
                (
                    SendOpcode::Write,
                    SendOp::Write {
                        remote_stag: 7,
                        remote_to: 0x40,
                    },
                ) => true,
                (SendOpcode::WriteImm, SendOp::WriteImm { imm: 0xabcd, .. }) => true,
                (
                    SendOpcode::SendInvImm,
                    SendOp::SendImm {
                        solicited: false,
                        invalidate: Some(9),
                        imm: 0xabcd,
                    },
                ) => true,
                (SendOpcode::LocalInv, SendOp::LocalInvalidate { stag: 11 }) => true,
                (
                    SendOpcode::BindMw,
                    SendOp::BindMw {
                        mw: 11,
                        mr: 12,
                        access,
                        ..
                    },
                ) => access == Access::REMOTE_WRITE,
                (
                    SendOpcode::Send
                    | SendOpcode::SendInv
                    | SendOpcode::Write
                    | SendOpcode::WriteImm
                    | SendOpcode::SendInvImm
                    | SendOpcode::LocalInv
                    | SendOpcode::BindMw,
                    _,
                ) => false,
                _ => true,
            };
            assert!(ok, "{op:?} -> {:?}", wr.op);
        }
    }

    #[test]
    fn corrupted_entries_are_refused() {
        let mut w = SendWqe::new(1, SendOpcode::Send, &[]).unwrap();
        w.opcode = 200;
        assert!(send_wr(&w).is_err());
        let mut r = RecvWqe::new(2, &[]).unwrap();
        r.num_sge = 77;
        assert!(recv_wr(&r).is_err());
    }

    #[test]
    fn completion_fields_map() {
        let wc = WorkCompletion {
            wr_id: 5,
            qp: iwarp_engine::QpId(42),
            opcode: WcOpcode::RecvImm,
            status: Status::WrFlushed,
            byte_len: 33,
            imm: Some(1),
            invalidated_stag: None,
            solicited: true,
        };
        let c = cqe(&wc);
        assert_eq!(c.qp_num, 42);
        assert_eq!(c.op().unwrap(), CqeOpcode::RecvImm);
        assert_eq!(c.status().unwrap(), CqeStatus::WrFlushed);
        assert_eq!((c.imm(), c.invalidated(), c.byte_len), (Some(1), None, 33));
        assert_ne!(c.flags & cqe_flags::SOLICITED, 0);
    }

    /// Verbs section 8.3.2: a WQE that cannot be decoded completes in error, reporting the
    /// operation its opcode names (a Send where even that is unreadable).
    #[test]
    fn a_corrupted_entry_completes_as_its_opcode() {
        use iwarp_engine::{CqId, PdId, QpCaps, QpId, Rnic};
        let expect = [
            (SendOpcode::Send as u8, CqeOpcode::Send),
            (SendOpcode::SendInv as u8, CqeOpcode::Send),
            (SendOpcode::SendImm as u8, CqeOpcode::Send),
            (SendOpcode::SendInvImm as u8, CqeOpcode::Send),
            (SendOpcode::Write as u8, CqeOpcode::Write),
            (SendOpcode::WriteImm as u8, CqeOpcode::Write),
            (SendOpcode::Read as u8, CqeOpcode::Read),
            (SendOpcode::ReadV2 as u8, CqeOpcode::Read),
            (SendOpcode::FetchAdd as u8, CqeOpcode::FetchAdd),
            (SendOpcode::CmpSwap as u8, CqeOpcode::CmpSwap),
            (SendOpcode::Immediate as u8, CqeOpcode::Immediate),
            (SendOpcode::LocalInv as u8, CqeOpcode::LocalInv),
            (SendOpcode::FastReg as u8, CqeOpcode::FastReg),
            (SendOpcode::BindMw as u8, CqeOpcode::BindMw),
            (200, CqeOpcode::Send),
        ];
        let mut rnic = Rnic::new();
        let (cq, qp) = (CqId(1), QpId(2));
        rnic.create_cq_at(cq, 32).unwrap();
        let caps = QpCaps {
            sq_depth: 32,
            rq_depth: 1,
            srq: None,
        };
        rnic.create_qp_at(qp, PdId(1), cq, cq, caps).unwrap();
        for (i, &(opcode, _)) in expect.iter().enumerate() {
            let mut w = SendWqe::new(i as u64, SendOpcode::Send, &[]).unwrap();
            w.opcode = opcode;
            w.num_sge = 99;
            assert!(send_wr(&w).is_err());
            rnic.post_send_failed(qp, stand_in(&w), Status::LocalQpOperationError)
                .unwrap();
        }
        rnic.force_error(qp).unwrap();
        let mut wcs = [WorkCompletion::default(); 32];
        let n = rnic.poll_cq(cq, &mut wcs).unwrap();
        assert_eq!(n, expect.len());
        for (wc, (_, op)) in wcs[..n].iter().zip(expect) {
            assert_eq!(wc.opcode, op, "wr {}", wc.wr_id);
        }
    }
}
