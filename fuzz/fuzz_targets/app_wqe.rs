//! Work requests as a hostile application could leave them in its SQ and RQ rings: any
//! SendWqe or RecvWqe, converted as iwarpd converts them (`iwarpd::host::convert`) and posted
//! to an engine QP in RTS whose peer answers over a byte pipe, until both sides are quiet.
//!
//! STags and addresses are drawn mostly near the regions that exist (both ends' regions,
//! a read-only one on each, a window, a fast-register STag), so bounds, access rights and
//! protection domains are what is tested, not only unknown STags. Whatever comes: no panic,
//! and no octet outside the registered regions changes (guard zones around every region), nor
//! any octet of a region registered with no write access.
#![no_main]
use iwarp_abi::wqe::{RecvWqe, SendWqe, Sge as WqeSge, MAX_INLINE, MAX_SGE};
use iwarp_engine::{Access, ConnParams, QpCaps, QpState, Rnic, WorkCompletion};
use iwarpd::host::convert;
use libfuzzer_sys::fuzz_target;
use std::ptr::NonNull;

const REGION: usize = 4096;
const GUARD: usize = 256;
const GUARD_OCTET: u8 = 0xa5;
const READ_ONLY_OCTET: u8 = 0x3c;

/// An arena holding a region between two guard zones.
struct Arena {
    words: Box<[u64]>,
}

impl Arena {
    fn new() -> Arena {
        let mut a = Arena {
            words: vec![0u64; (GUARD * 2 + REGION) / 8].into_boxed_slice(),
        };
        a.octets_mut().fill(GUARD_OCTET);
        a
    }
    fn octets_mut(&mut self) -> &mut [u8] {
        // SAFETY: the words' own memory, viewed as octets.
        unsafe {
            std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.words.len() * 8)
        }
    }
    fn octets(&self) -> &[u8] {
        // SAFETY: as above, read-only.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 8) }
    }
    fn region(&mut self) -> NonNull<u8> {
        NonNull::new(self.octets_mut()[GUARD..].as_mut_ptr()).unwrap()
    }
}

/// One end: an RNIC with a QP, a region with every right, a read-only region, a window and
/// a fast-register STag. The RNIC is dropped before the memory it was given (field order).
struct End {
    rnic: Rnic,
    qp: u32,
    cq: u32,
    arenas: Vec<Arena>,
    stags: Vec<(u32, u64)>,
}

fn end(v2: bool) -> End {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(1024);
    let caps = QpCaps {
        sq_depth: 64,
        rq_depth: 64,
        srq: None,
    };
    let qp = rnic.create_qp(pd, cq, cq, caps).unwrap();
    let mut params = ConnParams::new(true, 4, 4, 1460);
    if v2 {
        params.rdmap_version = 2;
    }
    rnic.connect(qp, params).unwrap();
    let mut arenas = vec![Arena::new(), Arena::new()];
    arenas[0].octets_mut()[GUARD..GUARD + REGION].fill(0);
    arenas[1].octets_mut()[GUARD..GUARD + REGION].fill(READ_ONLY_OCTET);
    let mut stags = Vec::new();
    for (arena, access) in arenas.iter_mut().zip([Access::ALL, Access::REMOTE_READ]) {
        let base = arena.region();
        // SAFETY: the arena lives as long as the RNIC (both in `End`, the RNIC dropped first).
        let stag = unsafe { rnic.register_mr(pd, base, REGION, access, base.as_ptr() as u64) };
        stags.push((stag, base.as_ptr() as u64));
    }
    let base = stags[0].1;
    stags.push((rnic.alloc_mw(pd), base));
    stags.push((rnic.alloc_fastreg_stag(pd), base));
    End {
        rnic,
        qp,
        cq,
        arenas,
        stags,
    }
}

/// Reads fields out of the input, zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
    /// An STag and tagged offset: mostly one of `stags` (either end's), in its region or just
    /// outside, at times anything.
    fn place(&mut self, stags: &[(u32, u64)]) -> (u32, u64) {
        let pick = usize::from(self.u8());
        // Mostly within the region, at times just outside it.
        let off = i64::from(self.u16()) % (REGION as i64 + 2 * 64) - 64;
        match stags.get(pick % (stags.len() + 1)) {
            Some(&(stag, base)) => (stag, base.wrapping_add_signed(off)),
            None => (self.u32(), self.u64()),
        }
    }
    fn sge(&mut self, stags: &[(u32, u64)]) -> WqeSge {
        let (stag, to) = self.place(stags);
        let len = match self.u8() % 4 {
            0 => u32::from(self.u8()),
            1 => u32::from(self.u16()),
            2 => REGION as u32,
            _ => self.u32(),
        };
        WqeSge { stag, to, len }
    }
}

/// Moves `from`'s FPDUs to `to`; whether there were any.
fn pipe(from: &mut End, to: &mut End, buf: &mut [u8]) -> bool {
    let mut moved = false;
    while let Some(n) = from.rnic.poll_transmit(from.qp, buf) {
        to.rnic.handle_stream(to.qp, &buf[..n]);
        moved = true;
    }
    moved
}

/// Moves each end's FPDUs to the other until neither has any.
fn drive(a: &mut End, b: &mut End) {
    let mut buf = vec![0u8; 1460];
    for _ in 0..10_000 {
        let moved = pipe(a, b, &mut buf) | pipe(b, a, &mut buf);
        if !moved {
            return;
        }
    }
}

fn reap(e: &mut End) {
    let mut wcs = [WorkCompletion::default(); 64];
    while e.rnic.poll_cq(e.cq, &mut wcs).unwrap_or(0) > 0 {}
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let v2 = input.u8() & 1 == 1;
    let mut a = end(v2);
    let mut b = end(v2);
    let mut stags: Vec<(u32, u64)> = a.stags.iter().chain(&b.stags).copied().collect();
    while !input.0.is_empty() {
        let kind = input.u8();
        if kind % 4 == 0 {
            // A receive on either end.
            let mut w = RecvWqe {
                wr_id: input.u64(),
                num_sge: input.u8() % (MAX_SGE as u8 + 2),
                ..RecvWqe::default()
            };
            for g in w.sgl.iter_mut() {
                *g = input.sge(&stags);
            }
            let e = if kind & 0x10 == 0 { &mut b } else { &mut a };
            if let Ok(wr) = convert::recv_wr(&w) {
                let _ = e.rnic.post_recv(e.qp, wr);
            }
        } else {
            let mut w = SendWqe {
                wr_id: input.u64(),
                opcode: input.u8() % 24,
                flags: input.u8() & 0x1f,
                num_sge: input.u8() % (MAX_SGE as u8 + 2),
                inline_len: input.u8() % (MAX_INLINE as u8 + 8),
                access: u32::from(input.u8() & 0x3f),
                ..SendWqe::default()
            };
            (w.remote_stag, w.remote_to) = input.place(&stags);
            w.invalidate_stag = input.place(&stags).0;
            w.local_stag = input.place(&stags).0;
            (w.mr_stag, w.mr_to) = input.place(&stags);
            w.mr_offset = u64::from(input.u16());
            w.mr_len = u64::from(input.u16());
            w.imm = input.u64();
            w.compare_add = input.u64();
            w.compare_add_mask = input.u64();
            w.swap = input.u64();
            w.swap_mask = input.u64();
            for g in w.sgl.iter_mut() {
                *g = input.sge(&stags);
            }
            let n = usize::from(input.u8()) % (MAX_INLINE + 1);
            for i in 0..n {
                w.inline_data[i] = input.u8();
            }
            let e = if kind & 0x10 == 0 { &mut a } else { &mut b };
            if let Ok(wr) = convert::send_wr(&w) {
                let _ = e.rnic.post_send(e.qp, wr);
            }
        }
        drive(&mut a, &mut b);
        reap(&mut a);
        reap(&mut b);
        // A failed request ends the connection (its QP in Error, the rest flushed): go on
        // with a new pair, so that one input tries many requests on a live connection.
        let live = |e: &End| e.rnic.qp_state(e.qp) == Some(QpState::Rts);
        if !(live(&a) && live(&b)) {
            check(&a);
            check(&b);
            a = end(v2);
            b = end(v2);
            stags = a.stags.iter().chain(&b.stags).copied().collect();
        }
    }
    check(&a);
    check(&b);
});

/// Nothing outside a region changed, nor anything in the read-only one.
fn check(e: &End) {
    for (i, arena) in e.arenas.iter().enumerate() {
        let o = arena.octets();
        assert!(
            o[..GUARD].iter().all(|&x| x == GUARD_OCTET),
            "before region {i}"
        );
        assert!(
            o[GUARD + REGION..].iter().all(|&x| x == GUARD_OCTET),
            "after region {i}"
        );
    }
    let ro = &e.arenas[1].octets()[GUARD..GUARD + REGION];
    assert!(
        ro.iter().all(|&x| x == READ_ONLY_OCTET),
        "the read-only region changed"
    );
}
