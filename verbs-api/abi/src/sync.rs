//! Every atomic the rings use comes from here, so `RUSTFLAGS="--cfg loom"` model-checks
//! the same code that runs in production.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU64, Ordering};

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicU64, Ordering};
