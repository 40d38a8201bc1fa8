//! iwarp-abi
