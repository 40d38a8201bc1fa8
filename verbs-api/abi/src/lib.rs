//! The shared-memory contract of the stack.
//!
//! - [`segment`]: named shared-memory segments backed by hugepages (a hugetlbfs mount) when
//!   free ones exist, else ordinary shared memory (`/dev/shm`) with one clear warning;
//!   created by one process, mapped by others by path.
//! - [`ring`]: a single-producer single-consumer ring of fixed-size `#[repr(C)]` slots laid
//!   out in such a segment, with back-pressure (a full ring refuses, never overwrites).
//! - [`sync`]: the one place atomics come from, switched to `loom` under `cfg(loom)` so the
//!   ring's protocol is model-checked.

pub mod ring;
pub mod segment;
pub mod sync;
