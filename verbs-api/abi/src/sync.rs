#![allow(clippy::disallowed_types)] // the one module allowed to name std/loom atomics
//! Every atomic the rings and the daemon segment use comes from here, so
//! `RUSTFLAGS="--cfg loom"` model-checks the same code that runs in production.
//!
//! [`AtomicU64`] is a `#[repr(transparent)]` newtype over std's (or loom's) atomic so that
//! clippy's `disallowed-types` (clippy.toml) can forbid std's shared-memory atomics in every
//! other module without also forbidding this facade.

#[cfg(loom)]
use loom::sync::atomic::AtomicU64 as Inner;

#[cfg(not(loom))]
use core::sync::atomic::AtomicU64 as Inner;

#[cfg(loom)]
pub use loom::sync::atomic::{fence, Ordering};

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, Ordering};

/// A 64-bit atomic with the layout of `u64` (so it can live in shared memory).
#[repr(transparent)]
#[derive(Debug)]
pub struct AtomicU64(Inner);

impl AtomicU64 {
    #[cfg(not(loom))]
    pub const fn new(v: u64) -> AtomicU64 {
        AtomicU64(Inner::new(v))
    }
    #[cfg(loom)]
    pub fn new(v: u64) -> AtomicU64 {
        AtomicU64(Inner::new(v))
    }
    #[inline]
    pub fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    #[inline]
    pub fn store(&self, v: u64, order: Ordering) {
        self.0.store(v, order)
    }
    #[inline]
    pub fn fetch_add(&self, v: u64, order: Ordering) -> u64 {
        self.0.fetch_add(v, order)
    }
    #[inline]
    pub fn fetch_or(&self, v: u64, order: Ordering) -> u64 {
        self.0.fetch_or(v, order)
    }
    #[inline]
    pub fn fetch_and(&self, v: u64, order: Ordering) -> u64 {
        self.0.fetch_and(v, order)
    }
    #[inline]
    pub fn swap(&self, v: u64, order: Ordering) -> u64 {
        self.0.swap(v, order)
    }
}

#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<AtomicU64>() == 8);
