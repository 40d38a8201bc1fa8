//! What the fuzz targets that hand an engine memory share: regions between guard zones, and
//! a reader that turns the input into fields.
#![allow(dead_code)]

use iwarp_engine::{ConnParams, CqId, PdId, QpCaps, QpId, Rnic};
use std::ptr::NonNull;

/// A QP of `pd` in RTS (MPA CRC on, IRD/ORD 4, 1460-octet FPDUs, RDMAP version 2 if `v2`),
/// its SQ and RQ `depth` deep, with a CQ of its own: the QP and the CQ.
pub fn rts_qp(rnic: &mut Rnic, pd: PdId, depth: usize, v2: bool) -> (QpId, CqId) {
    let cq = rnic.create_cq(1024);
    let caps = QpCaps {
        sq_depth: depth,
        rq_depth: depth,
        srq: None,
    };
    let qp = rnic.create_qp(pd, cq, cq, caps).unwrap();
    let mut params = ConnParams::new(true, 4, 4, 1460);
    if v2 {
        params.rdmap_version = 2;
    }
    rnic.connect(qp, params).unwrap();
    (qp, cq)
}

/// Octets of a region.
pub const REGION: usize = 4096;
/// Octets of each guard zone around it.
pub const GUARD: usize = 256;
/// What a guard zone holds, always.
pub const GUARD_OCTET: u8 = 0xa5;

/// A region between two guard zones, 8-aligned (atomics need it).
pub struct Arena {
    words: Box<[u64]>,
}

impl Arena {
    /// A region filled with `fill`.
    pub fn new(fill: u8) -> Arena {
        let mut a = Arena {
            words: vec![0u64; (GUARD * 2 + REGION) / 8].into_boxed_slice(),
        };
        let o = a.octets_mut();
        o.fill(GUARD_OCTET);
        o[GUARD..GUARD + REGION].fill(fill);
        a
    }

    fn octets_mut(&mut self) -> &mut [u8] {
        let len = self.words.len() * 8;
        // SAFETY: the words' own memory, viewed as octets.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), len) }
    }

    fn octets(&self) -> &[u8] {
        // SAFETY: as above, read-only.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 8) }
    }

    /// The region's first octet, to register.
    pub fn region(&mut self) -> NonNull<u8> {
        NonNull::new(self.octets_mut()[GUARD..].as_mut_ptr()).unwrap()
    }

    /// The region's octets.
    pub fn contents(&self) -> &[u8] {
        &self.octets()[GUARD..GUARD + REGION]
    }

    /// Panics, naming the arena, if an octet of either guard zone changed.
    pub fn check_guards(&self, name: &str) {
        let o = self.octets();
        assert!(
            o[..GUARD].iter().all(|&x| x == GUARD_OCTET),
            "before {name}"
        );
        assert!(
            o[GUARD + REGION..].iter().all(|&x| x == GUARD_OCTET),
            "after {name}"
        );
    }

    /// Panics, naming the arena, if an octet of the region is not `fill`.
    pub fn check_unchanged(&self, fill: u8, name: &str) {
        assert!(
            self.contents().iter().all(|&x| x == fill),
            "{name} was written"
        );
    }
}

/// Reads fields out of the input, zeros once it runs out.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    pub fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
    /// An STag and tagged offset: mostly one of `stags` (STag, base), in its region or just
    /// outside it; at times anything.
    pub fn place(&mut self, stags: &[(u32, u64)]) -> (u32, u64) {
        let pick = usize::from(self.u8());
        let off = i64::from(self.u16()) % (REGION as i64 + 2 * 64) - 64;
        match stags.get(pick % (stags.len() + 1)) {
            Some(&(stag, base)) => (stag, base.wrapping_add_signed(off)),
            None => (self.u32(), self.u64()),
        }
    }
    /// A length: small, medium or anything.
    pub fn len(&mut self) -> u32 {
        match self.u8() % 4 {
            0 => u32::from(self.u8()),
            1 => u32::from(self.u16()),
            2 => REGION as u32,
            _ => self.u32(),
        }
    }
}
