//! Receive: the TCP byte stream in, through the deframer, then DDP placement and RDMAP
//! processing of each segment, with every remote access checked first (RFC 5040 section
//! 7, RFC 7306 section 8). A violation touches no memory: it queues the Terminate the RFCs
//! name, with the offending headers, and stops the stream.

use crate::fifo::TakeFront;
use crate::mem::AccessError;
use crate::qp::{Irq, Orq, QpState, RtrKind, RxRecv};
use crate::rnic::Rnic;
use crate::types::{Access, AsyncEvent, Status, WcOpcode, WorkCompletion};
use iwarp_abi::id::QpId;
use iwarp_wire::ddp::Buffer;
use iwarp_wire::rdmap::{Opcode, RdmapHeader, SegmentRepr};
use iwarp_wire::terminate::{self as t, TermCause};
use iwarp_wire::Layer;

/// Tagged placement errors are DDP's (RFC 5041 section 7.2), except a missing right, which
/// only RDMAP names (RFC 5040 section 4.8), as siw does.
fn tagged_cause(e: AccessError) -> TermCause {
    match e {
        AccessError::InvalidStag => t::DDP_TAGGED_INVALID_STAG,
        AccessError::NotAssociated => t::DDP_TAGGED_STAG_NOT_ASSOCIATED,
        AccessError::Bounds => t::DDP_TAGGED_BASE_BOUNDS,
        AccessError::Rights => t::RDMAP_ACCESS_RIGHTS,
        AccessError::Misaligned => t::RDMAP_CATASTROPHIC_LOCAL,
        // Not outcomes of an access check; named for completeness.
        AccessError::WindowsBound | AccessError::NotInvalid | AccessError::ZeroBased => {
            t::RDMAP_PROTECTION_UNSPECIFIED
        }
    }
}

/// Read Request and atomic source errors are RDMAP remote protection errors; a misaligned
/// atomic is "catastrophic error, localized to RDMAP stream" (RFC 7306 section 8.2).
pub(crate) fn rdmap_cause(e: AccessError) -> TermCause {
    match e {
        AccessError::InvalidStag => t::RDMAP_INVALID_STAG,
        AccessError::NotAssociated => t::RDMAP_STAG_NOT_ASSOCIATED,
        AccessError::Bounds => t::RDMAP_BASE_BOUNDS,
        AccessError::Rights => t::RDMAP_ACCESS_RIGHTS,
        AccessError::Misaligned => t::RDMAP_CATASTROPHIC_LOCAL,
        AccessError::WindowsBound | AccessError::NotInvalid | AccessError::ZeroBased => {
            t::RDMAP_PROTECTION_UNSPECIFIED
        }
    }
}

/// A Send with Invalidate whose STag cannot be invalidated (Verbs figure 23, receive queue
/// remote protection errors): one of another PD, or a window another QP bound, is "not
/// associated" (0x0103); one without remote rights an access rights violation (0x0102);
/// any other, a region with bound windows included, "cannot be invalidated" (0x0109, RFC
/// 5040 section 7.2).
fn invalidate_cause(e: AccessError) -> TermCause {
    match e {
        AccessError::NotAssociated => t::RDMAP_STAG_NOT_ASSOCIATED,
        // Section 7.4.2: an STag with only local rights is not the peer's to invalidate.
        AccessError::Rights => t::RDMAP_ACCESS_RIGHTS,
        _ => t::RDMAP_PROTECTION_CANNOT_INVALIDATE,
    }
}

impl Rnic {
    /// Feeds bytes received on the QP's TCP connection. Returns the bytes consumed (always
    /// all of them: after an error the rest of the stream is discarded, as it must be).
    pub fn handle_stream(&mut self, qp: QpId, bytes: &[u8]) -> usize {
        let Ok(qp) = self.qp_slot(qp) else {
            return bytes.len();
        };
        let Ok(q) = self.qp_mut(qp) else {
            return bytes.len();
        };
        if !matches!(q.state, QpState::Rts | QpState::Closing) {
            return bytes.len();
        }
        let Some(mut deframer) = q.conn.as_mut().and_then(|c| c.deframer.take()) else {
            return bytes.len();
        };
        let result = deframer.feed(bytes, |ulpdu| self.on_ulpdu(qp, ulpdu));
        if let Ok(q) = self.qp_mut(qp) {
            if let Some(c) = q.conn.as_mut() {
                c.deframer = Some(deframer);
            }
        }
        if let Err(e) = result {
            if matches!(e, iwarp_wire::Error::BadCrc { .. }) {
                self.stats.crc_errors += 1;
            }
            let cause = e.terminate_cause().unwrap_or(t::LLP_LOCAL_CATASTROPHIC);
            self.terminate(qp, cause, &[], 0);
        }
        bytes.len()
    }

    fn on_ulpdu(&mut self, qp: u32, ulpdu: &[u8]) {
        let Ok(q) = self.qp_mut(qp) else { return };
        if !matches!(q.state, QpState::Rts | QpState::Closing) {
            return;
        }
        let Some(version) = q.conn.as_ref().map(|c| c.params.rdmap_version) else {
            return;
        };
        let (seg, payload) = match SegmentRepr::parse(ulpdu) {
            Ok(x) => x,
            Err(e) => {
                let cause = e.terminate_cause().unwrap_or(t::DDP_CATASTROPHIC);
                // Headers are copied only when their layout is known (version and opcode
                // errors leave it unknown), as siw does.
                let copy = match cause.layer {
                    Layer::Ddp
                        if cause != t::DDP_TAGGED_INVALID_DDP_VERSION
                            && cause != t::DDP_UNTAGGED_INVALID_DDP_VERSION =>
                    {
                        18.min(ulpdu.len())
                    }
                    _ => 0,
                };
                let copy = if copy >= 14 && ulpdu[0] & 0x80 != 0 {
                    14
                } else if copy >= 18 {
                    18
                } else {
                    0
                };
                self.terminate(qp, cause, ulpdu, copy);
                return;
            }
        };
        if seg.version != version {
            self.terminate(qp, t::RDMAP_INVALID_RDMAP_VERSION, ulpdu, 0);
            return;
        }
        let hl = seg.header_len();
        if self.rx_rtr(qp, &seg, payload, ulpdu, hl) {
            return;
        }
        match seg.opcode {
            Opcode::Write => self.rx_tagged(qp, &seg, payload, ulpdu, hl, false),
            Opcode::ReadResponse => self.rx_tagged(qp, &seg, payload, ulpdu, hl, true),
            Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSe
            | Opcode::SendSeInvalidate
            | Opcode::ImmediateData
            | Opcode::ImmediateDataSe => self.rx_send(qp, &seg, payload, ulpdu, hl),
            Opcode::ReadRequest | Opcode::AtomicRequest => self.rx_request(qp, &seg, ulpdu, hl),
            Opcode::AtomicResponse => self.rx_atomic_response(qp, &seg, ulpdu, hl),
            Opcode::Terminate => self.rx_terminate(qp, &seg),
            Opcode::SendImmediate
            | Opcode::SendInvalidateImmediate
            | Opcode::SendSeImmediate
            | Opcode::SendSeInvalidateImmediate => self.rx_send(qp, &seg, payload, ulpdu, hl),
            Opcode::ReadRequestV2 => self.rx_request(qp, &seg, ulpdu, hl),
            Opcode::ReadResponseV2 => self.rx_read_response_v2(qp, &seg, payload, ulpdu),
        }
    }

    /// Peer-to-peer responder awaiting the RTR (RFC 6581 section 5): the first message must
    /// be exactly the zero-length message agreed on; it is absorbed (no receive WR consumed,
    /// no memory touched, a Read answered with a zero-length Read Response). Anything else
    /// is a Terminate. Returns whether the segment was handled here.
    fn rx_rtr(
        &mut self,
        qp: u32,
        seg: &SegmentRepr,
        payload: &[u8],
        ulpdu: &[u8],
        hl: usize,
    ) -> bool {
        let Ok(q) = self.qp_mut(qp) else { return true };
        let Some(conn) = q.conn.as_mut() else {
            return true;
        };
        let Some(kind) = conn.rtr_rx else {
            return false;
        };
        let agreed = seg.last
            && payload.is_empty()
            && match (kind, seg.opcode, seg.buffer, seg.header) {
                (RtrKind::Send, Opcode::Send, Buffer::Untagged { msn, mo: 0, .. }, _) => {
                    msn == conn.msn_rx[0]
                }
                (RtrKind::Write, Opcode::Write, Buffer::Tagged { .. }, _) => true,
                (
                    RtrKind::Read,
                    Opcode::ReadRequest,
                    Buffer::Untagged { msn, .. },
                    RdmapHeader::ReadRequest(r),
                ) => msn == conn.msn_rx[1] && r.size == 0,
                _ => false,
            };
        if !agreed {
            self.terminate(qp, t::RDMAP_UNEXPECTED_OPCODE, ulpdu, hl);
            return true;
        }
        conn.rtr_rx = None;
        match (kind, seg.header) {
            (RtrKind::Send, _) => conn.msn_rx[0] = conn.msn_rx[0].wrapping_add(1),
            (RtrKind::Read, RdmapHeader::ReadRequest(r)) => {
                conn.msn_rx[1] = conn.msn_rx[1].wrapping_add(1);
                conn.irq.push_back(Irq::Read {
                    sink_stag: r.sink_stag,
                    sink_to: r.sink_to,
                    src_stag: r.src_stag,
                    src_to: r.src_to,
                    len: 0,
                    sent: 0,
                });
            }
            _ => {}
        }
        true
    }

    fn rx_tagged(
        &mut self,
        qp: u32,
        seg: &SegmentRepr,
        payload: &[u8],
        ulpdu: &[u8],
        hl: usize,
        response: bool,
    ) {
        let Buffer::Tagged { stag, to } = seg.buffer else {
            return;
        };
        let Rnic { mem, qps, .. } = self;
        let Some(Some(q)) = qps.get_mut(qp as usize) else {
            return;
        };
        let (pd, id) = (q.pd, q.id);
        let Some(conn) = q.conn.as_mut() else { return };
        if response {
            // A Read Response answers the oldest outstanding Read (RFC 5040 section 5.5).
            match conn.orq.front() {
                Some(Orq::Read {
                    sink_stag,
                    sink_to,
                    len,
                    ..
                }) if *sink_stag == stag => {
                    // Only the sink range the Read Request advertised may be written, even
                    // where the STag's region is larger.
                    let end = to.checked_add(payload.len() as u64);
                    if to < *sink_to || end.is_none_or(|e| e > sink_to + *len as u64) {
                        self.terminate(qp, t::DDP_TAGGED_BASE_BOUNDS, ulpdu, hl);
                        return;
                    }
                }
                Some(Orq::Rtr) if payload.is_empty() && seg.last => {
                    conn.orq.take_front();
                    return;
                }
                _ => {
                    self.terminate(qp, t::RDMAP_UNEXPECTED_OPCODE, ulpdu, hl);
                    return;
                }
            }
        }
        // The response to a zero-length Read (a fence, Verbs section 8.2.2.2) places nothing
        // and its sink need name no valid STag.
        let empty_response = response
            && payload.is_empty()
            && matches!(conn.orq.front(), Some(Orq::Read { len: 0, .. }));
        if !empty_response {
            match mem.resolve_remote(
                stag,
                pd,
                id,
                Access::REMOTE_WRITE,
                to,
                payload.len() as u64,
                false,
            ) {
                Ok(r) => r.raw.write(r.offset, payload),
                Err(e) => {
                    self.terminate(qp, tagged_cause(e), ulpdu, hl);
                    return;
                }
            }
        }
        if response && seg.last {
            if let Some(Orq::Read { seq, len, .. }) = conn.orq.take_front() {
                self.finish_wr(qp, seq, Status::Success, len);
            }
        }
    }

    fn rx_send(&mut self, qp: u32, seg: &SegmentRepr, payload: &[u8], ulpdu: &[u8], hl: usize) {
        let Buffer::Untagged {
            msn, mo, rsvd_ulp, ..
        } = seg.buffer
        else {
            return;
        };
        // V2 draft section 5.3: in a Send with Immediate the last segment carries only the
        // eight octets of immediate data, which are delivered, not placed.
        let imm_tail = seg.last
            && matches!(
                seg.opcode,
                Opcode::SendImmediate
                    | Opcode::SendInvalidateImmediate
                    | Opcode::SendSeImmediate
                    | Opcode::SendSeInvalidateImmediate
            );
        if imm_tail && payload.len() != 8 {
            self.terminate(qp, t::RDMAP_CATASTROPHIC_LOCAL, ulpdu, hl);
            return;
        }
        let place = if imm_tail { &[][..] } else { payload };
        let Rnic {
            mem,
            qps,
            srqs,
            events,
            ..
        } = self;
        let Some(Some(q)) = qps.get_mut(qp as usize) else {
            return;
        };
        let (pd, cq, id) = (q.pd, q.recv_cq, q.id);
        let Some(conn) = q.conn.as_mut() else { return };
        if msn != conn.msn_rx[0] {
            self.terminate(qp, t::DDP_UNTAGGED_MSN_RANGE, ulpdu, 18);
            return;
        }
        if mo != conn.mo_rx[0] {
            self.terminate(qp, t::DDP_UNTAGGED_INVALID_MO, ulpdu, 18);
            return;
        }
        if conn.rx_recv.is_none() {
            let wr = match q.srq {
                Some(srq) => {
                    let Some(Some(s)) = srqs.get_mut(srq as usize) else {
                        return;
                    };
                    let wr = s.rq.take_front();
                    if s.limit.is_some_and(|l| s.rq.len() < l) {
                        s.limit = None;
                        events.push_back(AsyncEvent::SrqLimitReached { srq: s.id });
                    }
                    wr
                }
                None => q.rq.take_front(),
            };
            let Some(wr) = wr else {
                self.terminate(qp, t::DDP_UNTAGGED_NO_BUFFER, ulpdu, 18);
                return;
            };
            if let Some(status) = wr.refused {
                // A receive accepted although unusable fails when consumed, in its turn
                // (Verbs figure 23, "Invalid WQE format": Local Catastrophic Error).
                self.push_wc(cq, recv_wc(id, wr.wr_id, WcOpcode::Recv, status, 0));
                self.terminate(qp, t::RDMAP_LOCAL_CATASTROPHIC, ulpdu, 0);
                return;
            }
            conn.rx_recv = Some(RxRecv { wr, received: 0 });
        }
        let Some(mut rx) = conn.rx_recv else { return };
        // Scatter the payload into the receive WR's SGL at message offset `mo`.
        if mo as u64 + place.len() as u64 > rx.wr.capacity() {
            conn.rx_recv = None;
            self.terminate(qp, t::DDP_UNTAGGED_TOO_LONG, ulpdu, 18);
            self.push_wc(
                cq,
                recv_wc(id, rx.wr.wr_id, WcOpcode::Recv, Status::LocalLengthError, 0),
            );
            return;
        }
        let mut skip = mo as u64;
        let mut rest = place;
        for sge in rx.wr.sgl() {
            if rest.is_empty() {
                break;
            }
            if skip >= sge.len as u64 {
                skip -= sge.len as u64;
                continue;
            }
            let n = ((sge.len as u64 - skip) as usize).min(rest.len());
            match mem.resolve(
                sge.stag,
                pd,
                Access::LOCAL_WRITE,
                sge.to + skip,
                n as u64,
                false,
            ) {
                Ok(r) => r.raw.write(r.offset, &rest[..n]),
                Err(_) => {
                    conn.rx_recv = None;
                    self.terminate(qp, t::RDMAP_LOCAL_CATASTROPHIC, ulpdu, 0);
                    self.push_wc(
                        cq,
                        recv_wc(
                            id,
                            rx.wr.wr_id,
                            WcOpcode::Recv,
                            Status::LocalProtectionError,
                            0,
                        ),
                    );
                    return;
                }
            }
            rest = &rest[n..];
            skip = 0;
        }
        rx.received += place.len() as u32;
        conn.mo_rx[0] = mo + place.len() as u32;
        if !seg.last {
            conn.rx_recv = Some(rx);
            return;
        }
        conn.msn_rx[0] = conn.msn_rx[0].wrapping_add(1);
        conn.mo_rx[0] = 0;
        conn.rx_recv = None;
        let mut wc = recv_wc(
            id,
            rx.wr.wr_id,
            WcOpcode::Recv,
            Status::Success,
            rx.received,
        );
        wc.solicited = seg.opcode.solicited();
        if let RdmapHeader::Immediate(imm) = seg.header {
            wc.opcode = WcOpcode::RecvImm;
            wc.imm = Some(imm);
            wc.byte_len = 0;
        }
        if imm_tail {
            let mut b = [0u8; 8];
            b.copy_from_slice(payload);
            wc.opcode = WcOpcode::RecvImm;
            wc.imm = Some(u64::from_be_bytes(b));
        }
        if seg.opcode.carries_invalidate() {
            if let Err(e) = mem.invalidate(rsvd_ulp, pd, id, true) {
                // RFC 5040 section 7.2: the STag cannot be invalidated; the receive WR the
                // message consumed completes in error before the stream is terminated.
                wc.status = Status::RemoteAccessError;
                self.push_wc(cq, wc);
                self.terminate(qp, invalidate_cause(e), ulpdu, hl);
                return;
            }
            wc.invalidated_stag = Some(rsvd_ulp);
        }
        self.push_wc(cq, wc);
    }

    /// Read V2 Response: untagged on queue 3, scattered into the sink the Read V2 named.
    fn rx_read_response_v2(&mut self, qp: u32, seg: &SegmentRepr, payload: &[u8], ulpdu: &[u8]) {
        let Buffer::Untagged { msn, mo, .. } = seg.buffer else {
            return;
        };
        let Rnic { mem, qps, .. } = self;
        let Some(Some(q)) = qps.get_mut(qp as usize) else {
            return;
        };
        let pd = q.pd;
        let Some(conn) = q.conn.as_mut() else { return };
        if msn != conn.msn_rx[3] {
            self.terminate(qp, t::DDP_UNTAGGED_MSN_RANGE, ulpdu, 18);
            return;
        }
        let Some(Orq::ReadV2 {
            seq,
            sink,
            received,
        }) = conn.orq.front_mut()
        else {
            self.terminate(qp, t::RDMAP_UNEXPECTED_OPCODE, ulpdu, 18);
            return;
        };
        if mo != *received {
            self.terminate(qp, t::DDP_UNTAGGED_INVALID_MO, ulpdu, 18);
            return;
        }
        if mo as u64 + payload.len() as u64 > sink.len as u64 {
            self.terminate(qp, t::DDP_UNTAGGED_TOO_LONG, ulpdu, 18);
            return;
        }
        if !payload.is_empty() {
            // An empty segment (a zero-length Read V2's response) places nothing.
            match mem.resolve(
                sink.stag,
                pd,
                Access::LOCAL_WRITE,
                sink.to + mo as u64,
                payload.len() as u64,
                false,
            ) {
                Ok(r) => r.raw.write(r.offset, payload),
                Err(_) => {
                    self.terminate(qp, t::RDMAP_LOCAL_CATASTROPHIC, ulpdu, 0);
                    return;
                }
            }
        }
        *received += payload.len() as u32;
        if seg.last {
            let (seq, len) = (*seq, *received);
            conn.orq.take_front();
            conn.msn_rx[3] = conn.msn_rx[3].wrapping_add(1);
            self.finish_wr(qp, seq, Status::Success, len);
        }
    }

    fn rx_request(&mut self, qp: u32, seg: &SegmentRepr, ulpdu: &[u8], hl: usize) {
        let Buffer::Untagged { msn, .. } = seg.buffer else {
            return;
        };
        let Rnic { mem, qps, .. } = self;
        let Some(Some(q)) = qps.get_mut(qp as usize) else {
            return;
        };
        let (pd, id) = (q.pd, q.id);
        let Some(conn) = q.conn.as_mut() else { return };
        if msn != conn.msn_rx[1] || !seg.last {
            self.terminate(qp, t::DDP_UNTAGGED_MSN_RANGE, ulpdu, 18);
            return;
        }
        // RFC 5040 section 6.4 / RFC 6581: more outstanding requests than our IRD is a
        // peer error; there is no buffer on queue 1 for it.
        if conn.irq.len() >= conn.params.ird as usize {
            self.terminate(qp, t::DDP_UNTAGGED_NO_BUFFER, ulpdu, 18);
            return;
        }
        let entry = match seg.header {
            // A zero-length Read is a fence and may name no valid source STag (Verbs section
            // 8.2.2.2): nothing is read, so nothing is checked.
            RdmapHeader::ReadRequest(r) if r.size == 0 => Irq::Read {
                sink_stag: r.sink_stag,
                sink_to: r.sink_to,
                src_stag: r.src_stag,
                src_to: r.src_to,
                len: 0,
                sent: 0,
            },
            RdmapHeader::ReadRequestV2(r) if r.size == 0 => Irq::ReadV2 {
                src_stag: r.src_stag,
                src_to: r.src_to,
                len: 0,
                sent: 0,
            },
            RdmapHeader::ReadRequest(r) => {
                match mem.resolve_remote(
                    r.src_stag,
                    pd,
                    id,
                    Access::REMOTE_READ,
                    r.src_to,
                    r.size as u64,
                    false,
                ) {
                    Ok(_) => Irq::Read {
                        sink_stag: r.sink_stag,
                        sink_to: r.sink_to,
                        src_stag: r.src_stag,
                        src_to: r.src_to,
                        len: r.size,
                        sent: 0,
                    },
                    Err(e) => {
                        self.terminate(qp, rdmap_cause(e), ulpdu, hl);
                        return;
                    }
                }
            }
            RdmapHeader::ReadRequestV2(r) => {
                match mem.resolve_remote(
                    r.src_stag,
                    pd,
                    id,
                    Access::REMOTE_READ,
                    r.src_to,
                    r.size as u64,
                    false,
                ) {
                    Ok(_) => Irq::ReadV2 {
                        src_stag: r.src_stag,
                        src_to: r.src_to,
                        len: r.size,
                        sent: 0,
                    },
                    Err(e) => {
                        self.terminate(qp, rdmap_cause(e), ulpdu, hl);
                        return;
                    }
                }
            }
            RdmapHeader::AtomicRequest(a) => {
                if let Err(e) =
                    mem.resolve_remote(a.stag, pd, id, Access::REMOTE_ATOMIC, a.to, 8, true)
                {
                    self.terminate(qp, rdmap_cause(e), ulpdu, hl);
                    return;
                }
                // A CmpSwap swap mask of zero swaps no bits, exactly as RFC 7306's definition
                // reads; our own requests send all ones for a plain CmpSwap. (siw's
                // experimental branch sends zero; with us its CmpSwap then leaves memory
                // unchanged and returns the original value: a deliberate choice to follow
                // the RFC, noted in docs/engine.md.)
                Irq::Atomic {
                    request_id: a.request_id,
                    req: a,
                    executed: None,
                }
            }
            _ => return,
        };
        conn.msn_rx[1] = conn.msn_rx[1].wrapping_add(1);
        conn.irq.push_back(entry);
    }

    fn rx_atomic_response(&mut self, qp: u32, seg: &SegmentRepr, ulpdu: &[u8], hl: usize) {
        let (
            Buffer::Untagged { msn, .. },
            RdmapHeader::AtomicResponse {
                request_id,
                original,
            },
        ) = (seg.buffer, seg.header)
        else {
            return;
        };
        let Ok(q) = self.qp_mut(qp) else { return };
        let Some(conn) = q.conn.as_mut() else { return };
        if msn != conn.msn_rx[3] {
            self.terminate(qp, t::DDP_UNTAGGED_MSN_RANGE, ulpdu, 18);
            return;
        }
        match conn.orq.front() {
            Some(Orq::Atomic { request_id: id, .. }) if *id == request_id => {}
            _ => {
                self.terminate(qp, t::RDMAP_UNEXPECTED_OPCODE, ulpdu, hl);
                return;
            }
        }
        conn.msn_rx[3] = conn.msn_rx[3].wrapping_add(1);
        let pd = q.pd;
        if let Some(Orq::Atomic {
            seq,
            result_stag,
            result_to,
            ..
        }) = conn.orq.take_front()
        {
            // The result region is checked again: it may have been deregistered since the
            // request went out, and then the WR fails instead of writing into it.
            match self
                .mem
                .resolve(result_stag, pd, Access::LOCAL_WRITE, result_to, 8, true)
            {
                Ok(result) => {
                    // The original value is returned in the endian format of the target
                    // memory (RFC 7306 section 5.1): the host's.
                    result.raw.write(result.offset, &original.to_ne_bytes());
                    self.finish_wr(qp, seq, Status::Success, 8);
                }
                Err(_) => self.finish_wr(qp, seq, Status::LocalProtectionError, 0),
            }
        }
    }

    fn rx_terminate(&mut self, qp: u32, seg: &SegmentRepr) {
        let RdmapHeader::Terminate(term) = seg.header else {
            return;
        };
        self.stats.terminates_received += 1;
        let Ok(q) = self.qp_mut(qp) else { return };
        let id = q.id;
        self.events.push_back(AsyncEvent::TerminateReceived {
            qp: id,
            cause: term.cause,
        });
        let status = match (term.cause.layer, term.cause.etype) {
            (Layer::Rdmap, t::RDMAP_ETYPE_REMOTE_PROTECTION)
            | (Layer::Ddp, t::DDP_ETYPE_TAGGED) => Status::RemoteAccessError,
            _ => Status::RemoteOperationError,
        };
        self.enter_error(qp, Some(status));
    }
}

fn recv_wc(
    qp: QpId,
    wr_id: u64,
    opcode: WcOpcode,
    status: Status,
    byte_len: u32,
) -> WorkCompletion {
    WorkCompletion::new(wr_id, qp, opcode, status, byte_len)
}
