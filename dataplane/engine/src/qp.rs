//! Queue pairs: the Verbs state machine (section 6.2, figure 4) and per-connection state.

use crate::types::{RecvWr, SendWr, Status, WcOpcode};
use iwarp_abi::id::{PdId, QpId};
use iwarp_wire::mpa::{Deframer, FpduEmitter, MpaParams};
use iwarp_wire::terminate::TerminateRepr;
use std::collections::VecDeque;

pub use iwarp_abi::qp::QpState;

/// The peer-to-peer "Ready to Receive" message MPA revision 2 negotiation agreed on
/// (RFC 6581 section 5): a zero-length Send, RDMA Write or RDMA Read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrKind {
    Send,
    Write,
    Read,
}

/// Peer-to-peer mode (RFC 6581): the MPA initiator sends the RTR as its first FPDU; the
/// responder sends nothing until it has received that RTR, and refuses any other first
/// message with a Terminate (hardware RNICs do the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerToPeer {
    pub rtr: RtrKind,
    /// True on the MPA initiator (the side that sent the MPA Request).
    pub initiator: bool,
}

/// The STag carried by the RTR Write and Read. Not zero: Chelsio hardware refuses a tagged
/// segment with STag 0 even at zero length. A zero-length RTR is never
/// checked against the STag table, on either side.
pub const RTR_STAG: u32 = 0x0000_0100;

/// What connection setup (MPA negotiation, in the control plane) agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnParams {
    /// CRC and markers for what we send.
    pub tx: MpaParams,
    /// CRC and markers for what we receive.
    pub rx: MpaParams,
    /// Inbound Read/atomic requests we accept at once.
    pub ird: u16,
    /// Outbound Read/atomic requests we may have outstanding (never more than the peer's IRD).
    pub ord: u16,
    /// RDMAP version 1, or 2 when both peers asked for it.
    pub rdmap_version: u8,
    /// The largest FPDU we send: the TCP MSS, so that each FPDU fits one segment.
    pub max_fpdu: usize,
    /// The largest ULPDU we accept.
    pub max_rx_ulpdu: usize,
    /// Peer-to-peer mode with its RTR, when MPA negotiation agreed on one.
    pub p2p: Option<PeerToPeer>,
}

impl ConnParams {
    pub fn new(crc: bool, ird: u16, ord: u16, max_fpdu: usize) -> ConnParams {
        let p = MpaParams {
            crc,
            markers: false,
        };
        ConnParams {
            tx: p,
            rx: p,
            ird,
            ord,
            rdmap_version: 1,
            max_fpdu,
            max_rx_ulpdu: 65535,
            p2p: None,
        }
    }
}

/// A Send Queue WR between posting and completion. Completions leave in SQ order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inflight {
    pub seq: u64,
    pub wr_id: u64,
    pub opcode: WcOpcode,
    pub signaled: bool,
    pub done: Option<(Status, u32)>,
}

/// An outstanding Read or atomic (the ORQ, bounded by ORD).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Orq {
    /// Read V2: the response comes untagged on queue 3 and is scattered into `sink`.
    ReadV2 {
        seq: u64,
        sink: crate::types::Sge,
        received: u32,
    },
    Read {
        seq: u64,
        sink_stag: u32,
        sink_to: u64,
        len: u32,
    },
    /// The peer-to-peer RTR sent as a zero-length Read (RFC 6581 section 5): its zero-length
    /// response completes nothing.
    Rtr,
    /// The result lands in the local 8 octets at `result_to` of `result_stag`, checked again
    /// when the response arrives: the region may have been deregistered since.
    Atomic {
        seq: u64,
        request_id: u32,
        result_stag: u32,
        result_to: u64,
    },
}

/// An accepted inbound Read or atomic waiting to be answered (the IRQ, bounded by IRD).
/// Each was checked on arrival, and its source is checked again for every segment it sends:
/// the consumer may invalidate or deregister the memory meanwhile, and then it must fail
/// with a protection error (Verbs section 7.10.4.1), never read memory no longer registered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Irq {
    ReadV2 {
        src_stag: u32,
        src_to: u64,
        len: u32,
        sent: u32,
    },
    Read {
        sink_stag: u32,
        sink_to: u64,
        src_stag: u32,
        src_to: u64,
        len: u32,
        sent: u32,
    },
    /// Executed when its response is generated, so that it sees every earlier request of
    /// the stream done (RFC 7306 section 7: a second atomic is not processed before the
    /// first response, an atomic not before an earlier Read's response).
    Atomic {
        request_id: u32,
        req: iwarp_wire::rdmap::AtomicRequest,
        /// The original value once the operation ran (it runs exactly once).
        executed: Option<u64>,
    },
}

/// Where the transmission of the SQ WR in [`Qp::tx_wr`] stands. The WR itself stays put
/// there: a WR is hundreds of octets (its SGL and inline data), and this record is copied out
/// and back on every segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxCur {
    pub seq: u64,
    pub offset: u64,
    /// Write with Immediate: the Write is done, the Immediate Data message is next.
    pub imm_phase: bool,
}

/// An inbound untagged Send being placed into a receive WR.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RxRecv {
    pub wr: RecvWr,
    pub received: u32,
}

/// State that exists once the QP is connected (RTS and after).
#[derive(Debug)]
pub(crate) struct Conn {
    pub params: ConnParams,
    pub emitter: FpduEmitter,
    pub deframer: Option<Deframer>,
    pub scratch: Vec<u8>,
    /// Next MSN to send, per untagged queue (RFC 5041: MSNs start at 1).
    pub msn_tx: [u32; 4],
    /// Next MSN expected, per untagged queue.
    pub msn_rx: [u32; 4],
    pub mo_rx: [u32; 4],
    pub cur: Option<TxCur>,
    pub orq: VecDeque<Orq>,
    pub irq: VecDeque<Irq>,
    pub rx_recv: Option<RxRecv>,
    pub terminate: Option<TerminateRepr>,
    pub irq_burst: u32,
    pub next_request_id: u32,
    /// Initiator: the RTR still to send (first, before anything else).
    pub rtr_tx: Option<RtrKind>,
    /// Responder: the RTR still awaited (nothing is sent until it arrives).
    pub rtr_rx: Option<RtrKind>,
}

impl Conn {
    pub fn new(params: ConnParams) -> Conn {
        Conn {
            params,
            emitter: FpduEmitter::new(params.tx, 0),
            deframer: Some(Deframer::new(params.rx, params.max_rx_ulpdu, 0)),
            scratch: vec![0; params.max_fpdu],
            msn_tx: [1; 4],
            msn_rx: [1; 4],
            mo_rx: [0; 4],
            cur: None,
            orq: VecDeque::with_capacity(params.ord as usize),
            irq: VecDeque::with_capacity(params.ird as usize),
            rx_recv: None,
            terminate: None,
            irq_burst: 0,
            next_request_id: 1,
            rtr_tx: params.p2p.filter(|p| p.initiator).map(|p| p.rtr),
            rtr_rx: params.p2p.filter(|p| !p.initiator).map(|p| p.rtr),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Qp {
    pub id: QpId,
    pub pd: PdId,
    /// The CQs' slots in `Rnic::cqs`.
    pub send_cq: u32,
    pub recv_cq: u32,
    pub state: QpState,
    pub sq: VecDeque<SendWr>,
    /// The WR taken off the SQ for transmission: the one `Conn::cur` describes, while that
    /// is set.
    pub tx_wr: Option<SendWr>,
    pub sq_depth: usize,
    pub rq: VecDeque<RecvWr>,
    pub rq_depth: usize,
    pub inflight: VecDeque<Inflight>,
    pub next_seq: u64,
    pub conn: Option<Conn>,
    /// A graceful close was asked for: go Idle once everything sent completed.
    pub closing: bool,
    /// In the RNIC's transmit ready list (see [`crate::Rnic::next_tx_ready`]).
    pub tx_queued: bool,
    /// Receives come from this shared receive queue (its slot in `Rnic::srqs`) instead of
    /// `rq`.
    pub srq: Option<u32>,
}
