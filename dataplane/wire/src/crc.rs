//! CRC
