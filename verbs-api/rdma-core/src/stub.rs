//! Entry points with nothing behind them yet, and the private provider interface
//! (`IBVERBS_PRIVATE_34`) that libmlx5 and libefa import when perftest loads them. No provider
//! ever registers with this library (`verbs_register_driver_34` does nothing), so none of the
//! private calls is reached; they answer "not supported" the way each family reports errors.
#![cfg_attr(test, allow(dead_code))]

use core::ffi::{c_int, c_void};

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// For calls that return an errno value (most `ibv_*` returning `int`).
pub(crate) extern "C" fn eopnotsupp() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// For calls that return -1 and set errno (`rdma_*`, `ibv_get_cq_event`).
pub(crate) extern "C" fn minus_one() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// For calls that return a pointer, NULL on failure.
pub(crate) extern "C" fn null() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

/// For calls that return nothing (`verbs_register_driver_34`: no provider is ever used).
pub(crate) extern "C" fn nothing() {}

/// For `int` calls whose 0 means "nothing": `ibv_query_qp_data_in_order` (no in-order
/// guarantee is claimed).
pub(crate) extern "C" fn nothing_int() -> c_int {
    0
}
