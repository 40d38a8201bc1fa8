//! Raw bindings to the distribution's DPDK 22.11, generated at build time by bindgen (see
//! `build.rs`), plus `iw_*` wrappers for DPDK's inline fast-path functions (`src/shim.c`).
//! The safe port built on them is `iwarpd::port::dpdk` (feature `dpdk`).
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
