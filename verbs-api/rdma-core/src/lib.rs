//! A drop-in `libibverbs.so.1` and `librdmacm.so.1` with rdma-core 44's ABI, over
//! `iwarp-verbs`: unmodified RDMA programs (perftest, rping, ibv_devinfo) select it with
//! `LD_LIBRARY_PATH=target/<profile>/rdma-core`.
//!
//! The struct layouts come from the installed rdma-core headers ([`abi`]); the exported
//! symbols, each with its rdma-core version, from `symbols.txt` (see `build.rs`). Design and
//! limits: `docs/dropin.md`.

pub mod abi;
mod channel;
mod cm;
mod device;
mod events;
mod ex;
mod stub;
mod verbs;

include!(concat!(env!("OUT_DIR"), "/exports.rs"));
