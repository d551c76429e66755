//! Fault injection for tests: make the next mapping calls fail as if the
//! OS were out of memory.

use core::sync::atomic::{AtomicIsize, Ordering::Relaxed};

/// Test hook: while positive, this many upcoming mmap-family calls fail as
/// if the OS were out of memory (each failure decrements it). Negative or
/// zero: no injection. Used by the fault-injection tests.
pub static FAIL_MAPS: AtomicIsize = AtomicIsize::new(0);

/// Makes the next `n` mapping calls (reserve, commit, map, remap) fail.
#[cfg(feature = "internals")]
pub fn inject_map_failures(n: isize) {
    FAIL_MAPS.store(n, Relaxed);
}

/// Consumes one injected failure, if any are pending.
#[inline]
pub(super) fn injected_failure() -> bool {
    if FAIL_MAPS.load(Relaxed) <= 0 {
        return false;
    }
    FAIL_MAPS.fetch_sub(1, Relaxed) > 0
}
