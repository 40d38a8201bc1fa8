//! The test pair: two engines, one QP each, wired back to back.
#![allow(dead_code)]

use core::ptr::NonNull;
use iwarp_engine::{
    Access, AsyncEvent, ConnParams, CqId, PdId, QpCaps, QpId, RecvWr, Rnic, SendWr, Sge, SrqId,
    WorkCompletion,
};
use iwarp_wire::mpa::fpdu::mulpdu;
use iwarp_wire::TermCause;

pub const A: usize = 0;
pub const B: usize = 1;
pub const MSS: usize = 1460;
/// The largest Send payload per FPDU (MULPDU less the untagged header).
pub const MAX_SEND: usize = mulpdu(MSS, false) - 18;
/// The largest Write payload per FPDU.
pub const MAX_WRITE: usize = mulpdu(MSS, false) - 14;

pub struct Buf {
    pub ptr: NonNull<u8>,
    pub len: usize,
    pub stag: u32,
}

pub struct Side {
    pub rnic: Rnic,
    pub qp: QpId,
    pub cq: CqId,
    pub pd: PdId,
    pub srq: Option<SrqId>,
    pub bufs: Vec<Buf>,
    pub events: Vec<AsyncEvent>,
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub split: bool,
    rng: u64,
    wire: Vec<u8>,
}

impl Side {
    fn new(params: ConnParams, cq_depth: usize, with_srq: bool) -> Side {
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let cq = rnic.create_cq(cq_depth);
        let srq = with_srq.then(|| rnic.create_srq(pd, 64));
        let qp = rnic
            .create_qp(
                pd,
                cq,
                cq,
                QpCaps {
                    sq_depth: 64,
                    rq_depth: 64,
                    srq,
                },
            )
            .unwrap();
        rnic.connect(qp, params).unwrap();
        Side {
            rnic,
            qp,
            cq,
            pd,
            srq,
            bufs: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl Pair {
    pub fn new(split: bool) -> Pair {
        Self::with(
            ConnParams::new(true, 8, 8, MSS),
            ConnParams::new(true, 8, 8, MSS),
            4096,
            split,
        )
    }

    pub fn with(pa: ConnParams, pb: ConnParams, cq_depth: usize, split: bool) -> Pair {
        Self::build(pa, pb, cq_depth, split, false)
    }

    /// B's QP takes its receives from a shared receive queue.
    pub fn with_srq() -> Pair {
        let p = ConnParams::new(true, 8, 8, MSS);
        Self::build(p, p, 4096, false, true)
    }

    /// Both sides negotiated RDMAP version 2.
    pub fn v2(split: bool) -> Pair {
        let mut p = ConnParams::new(true, 8, 8, MSS);
        p.rdmap_version = 2;
        Self::build(p, p, 4096, split, false)
    }

    fn build(pa: ConnParams, pb: ConnParams, cq_depth: usize, split: bool, srq: bool) -> Pair {
        Pair {
            a: Side::new(pa, cq_depth, false),
            b: Side::new(pb, cq_depth, srq),
            split,
            rng: 0x9e37_79b9_7f4a_7c15,
            wire: vec![0; 1 << 16],
        }
    }

    pub fn side(&mut self, s: usize) -> &mut Side {
        if s == A {
            &mut self.a
        } else {
            &mut self.b
        }
    }

    /// A fresh 8-byte aligned buffer registered VA-based (TO = its address) in the side's PD.
    pub fn buffer(&mut self, s: usize, len: usize, access: Access) -> usize {
        let words = Box::leak(vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice());
        let ptr = NonNull::new(words.as_mut_ptr() as *mut u8).unwrap();
        let side = self.side(s);
        let pd = side.pd;
        // SAFETY: the buffer is leaked, so it stays valid for the rest of the test.
        let stag = unsafe {
            side.rnic
                .register_mr(pd, ptr, len, access, ptr.as_ptr() as u64)
        }
        .expect("the test's rights are valid");
        side.bufs.push(Buf { ptr, len, stag });
        side.bufs.len() - 1
    }

    pub fn sge(&self, s: usize, b: usize, off: usize, len: usize) -> Sge {
        let side = if s == A { &self.a } else { &self.b };
        let buf = &side.bufs[b];
        Sge {
            stag: buf.stag,
            to: buf.ptr.as_ptr() as u64 + off as u64,
            len: len as u32,
        }
    }

    /// The (STag, tagged offset) a peer uses to reach `off` in buffer `b` of side `s`.
    pub fn remote(&self, s: usize, b: usize, off: usize) -> (u32, u64) {
        let sge = self.sge(s, b, off, 0);
        (sge.stag, sge.to)
    }

    pub fn fill(&mut self, s: usize, b: usize, len: usize, seed: u8) {
        let buf = &self.side(s).bufs[b];
        for i in 0..len {
            // SAFETY: in bounds of the leaked buffer; no engine call runs concurrently.
            unsafe { *buf.ptr.as_ptr().add(i) = seed.wrapping_add((i * 7 + i / 251) as u8) };
        }
    }

    pub fn bytes(&mut self, s: usize, b: usize, len: usize) -> Vec<u8> {
        let buf = &self.side(s).bufs[b];
        assert!(len <= buf.len);
        // SAFETY: in bounds; no engine call runs concurrently.
        unsafe { std::slice::from_raw_parts(buf.ptr.as_ptr(), len).to_vec() }
    }

    pub fn set_u64(&mut self, s: usize, b: usize, off: usize, v: u64) {
        let buf = &self.side(s).bufs[b];
        // SAFETY: in bounds and aligned (buffers are u64 arrays, offsets multiples of 8).
        unsafe { *(buf.ptr.as_ptr().add(off) as *mut u64) = v };
    }

    pub fn get_u64(&mut self, s: usize, b: usize, off: usize) -> u64 {
        let buf = &self.side(s).bufs[b];
        // SAFETY: as in set_u64.
        unsafe { *(buf.ptr.as_ptr().add(off) as *const u64) }
    }

    pub fn post_send(&mut self, s: usize, wr: SendWr) {
        let side = self.side(s);
        side.rnic.post_send(side.qp, wr).unwrap();
    }

    pub fn post_recv(&mut self, s: usize, wr_id: u64, sgl: &[Sge]) {
        let side = self.side(s);
        side.rnic
            .post_recv(side.qp, RecvWr::new(wr_id, sgl))
            .unwrap();
    }

    fn next_rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Moves FPDUs both ways until neither side has anything to send. With `split`, each
    /// FPDU reaches the receiver in random pieces, as TCP may deliver it.
    pub fn drive(&mut self) {
        loop {
            let mut moved = false;
            for dir in [A, B] {
                loop {
                    let mut wire = std::mem::take(&mut self.wire);
                    let (from, to) = if dir == A {
                        (&mut self.a, &mut self.b)
                    } else {
                        (&mut self.b, &mut self.a)
                    };
                    let Some(n) = from.rnic.poll_transmit(from.qp, &mut wire) else {
                        self.wire = wire;
                        break;
                    };
                    assert!(n <= MSS, "an FPDU of {n} octets does not fit one segment");
                    moved = true;
                    if self.split {
                        let mut at = 0;
                        while at < n {
                            let k = (self.next_rand() as usize % 300 + 1).min(n - at);
                            let to = if dir == A { &mut self.b } else { &mut self.a };
                            to.rnic.handle_stream(to.qp, &wire[at..at + k]);
                            at += k;
                        }
                    } else {
                        to.rnic.handle_stream(to.qp, &wire[..n]);
                    }
                    self.wire = wire;
                }
            }
            for s in [A, B] {
                let side = self.side(s);
                while let Some(e) = side.rnic.poll_event() {
                    side.events.push(e);
                }
            }
            if !moved {
                break;
            }
        }
    }

    pub fn wcs(&mut self, s: usize) -> Vec<WorkCompletion> {
        let side = self.side(s);
        let mut out = vec![WorkCompletion::default(); 64];
        let n = side.rnic.poll_cq(side.cq, &mut out).unwrap();
        out.truncate(n);
        out
    }

    pub fn one_wc(&mut self, s: usize) -> WorkCompletion {
        let w = self.wcs(s);
        assert_eq!(w.len(), 1, "expected one completion on side {s}, got {w:?}");
        w[0]
    }

    pub fn sent_cause(&mut self, s: usize) -> Option<TermCause> {
        self.drive();
        self.side(s).events.iter().find_map(|e| match e {
            AsyncEvent::TerminateSent { cause, .. } => Some(*cause),
            _ => None,
        })
    }

    pub fn received_cause(&mut self, s: usize) -> Option<TermCause> {
        self.drive();
        self.side(s).events.iter().find_map(|e| match e {
            AsyncEvent::TerminateReceived { cause, .. } => Some(*cause),
            _ => None,
        })
    }
}
