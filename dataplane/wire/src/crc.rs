//! CRC32c (Castagnoli) as MPA uses it (RFC 5044 section 4.3, the iSCSI CRC of RFC 3720).
//!
//! Whole buffers go through the `crc-fast` crate (carry-less multiply folding with SIMD, which
//! on the FPDU sizes we use is several times faster than the `crc32` instruction alone);
//! incremental updates (the deframer's slow path, across TCP segment splits) through the
//! `crc32c` crate (SSE4.2 `crc32` instruction). Both compute the same CRC-32C (iSCSI).
//! On the wire the 32-bit value travels least significant octet first, exactly as iSCSI sends
//! it (RFC 3720 appendix B.4 lists 32 zero octets as `aa 36 91 8a`); the siw captures in
//! `testdata/captures` confirm this byte order for MPA.

/// CRC32c of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// Continues a CRC32c over more data: `append(crc32c(a), b) == crc32c(a ++ b)`.
pub fn append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The four CRC octets as MPA puts them on the wire.
pub fn to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The CRC value of the four octets received on the wire.
pub fn from_wire(b: [u8; 4]) -> u32 {
    u32::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 3720 appendix B.4, each as the octets sent on the wire.
    #[test]
    fn rfc3720_zeros() {
        assert_eq!(to_wire(crc32c(&[0u8; 32])), [0xaa, 0x36, 0x91, 0x8a]);
    }

    #[test]
    fn rfc3720_ones() {
        assert_eq!(to_wire(crc32c(&[0xffu8; 32])), [0x43, 0xab, 0xa8, 0x62]);
    }

    #[test]
    fn rfc3720_incrementing() {
        let data: Vec<u8> = (0u8..32).collect();
        assert_eq!(to_wire(crc32c(&data)), [0x4e, 0x79, 0xdd, 0x46]);
    }

    #[test]
    fn rfc3720_decrementing() {
        let data: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(to_wire(crc32c(&data)), [0x5c, 0xdb, 0x3f, 0x11]);
    }

    #[test]
    fn rfc3720_iscsi_read_command() {
        let pdu: [u8; 48] = [
            0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14,
            0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(to_wire(crc32c(&pdu)), [0x56, 0x3a, 0x96, 0xd9]);
    }

    #[test]
    fn both_implementations_agree() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
        for len in [0, 1, 7, 8, 63, 64, 100, 1442, 1460, 4999] {
            assert_eq!(crc32c(&data[..len]), crc32c::crc32c(&data[..len]), "{len}");
        }
    }

    #[test]
    fn append_is_concatenation() {
        let a = b"MPA ID Req Frame";
        let b = b" and more";
        let mut all = a.to_vec();
        all.extend_from_slice(b);
        assert_eq!(append(crc32c(a), b), crc32c(&all));
    }
}
