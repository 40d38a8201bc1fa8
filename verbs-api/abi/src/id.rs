//! The identifiers of RNIC resources, one newtype per id space. iwarp-control allocates them
//! and every other process uses them unchanged: the application in its requests, the daemon
//! in its commands and as the engine's own keys, and the CQE's `qp_num` (libibverbs'
//! `ibv_wc.qp_num`) is a [`QpId`]. An STag is the one id that also travels on the wire
//! (RFC 5040 section 2.1: index in the upper 24 bits, key in the low 8).

use core::fmt;
use serde::{Deserialize, Serialize};

macro_rules! id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize,
            Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($what, " {}"), self.0)
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }

        impl From<u32> for $name {
            fn from(v: u32) -> $name {
                $name(v)
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }
    };
}

id!(
    /// A queue pair: its QP number.
    QpId,
    "QP"
);
id!(
    /// A completion queue.
    CqId,
    "CQ"
);
id!(
    /// A protection domain.
    PdId,
    "PD"
);
id!(
    /// A shared receive queue.
    SrqId,
    "S-RQ"
);
id!(
    /// A steering tag: a memory region, a memory window or a fast-register STag (one space,
    /// as the wire has one).
    Stag,
    "STag"
);

impl Stag {
    /// The STag of `index` and consumer `key` (RFC 5040 section 2.1).
    pub const fn new(index: u32, key: u8) -> Stag {
        Stag((index << 8) | key as u32)
    }
    /// The STag Index, the upper 24 bits.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }
    /// The STag Key, the low 8 bits, chosen by the consumer.
    pub const fn key(self) -> u8 {
        self.0 as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_their_number_in_the_codec() {
        let bytes = crate::codec::encode_append(&(QpId(7), Stag::new(3, 9)), Vec::new());
        assert_eq!(
            bytes,
            crate::codec::encode_append(&(7u32, 0x309u32), Vec::new())
        );
        assert_eq!(QpId(7).to_string(), "QP 7");
        assert_eq!(format!("{:#010x}", Stag(0x1234)), "0x00001234");
    }

    /// RFC 5040 section 2.1: STag index and key.
    #[test]
    fn stag_is_index_and_key() {
        let s = Stag::new(0x12345, 0xab);
        assert_eq!((s.index(), s.key(), s.0), (0x12345, 0xab, 0x12345ab));
    }
}
