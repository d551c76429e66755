//! The platform contract: everything pcpalloc asks of the operating system.
//!
//! Every function here is callable from inside `malloc`: none allocates,
//! none takes a lock of ours, none panics. Failures come back as `None` or
//! `false`; the caller decides what a failure means. The Linux backend in
//! [`linux`] is the only file that calls libc for memory and files.
//!
//! Preconditions shared by the memory calls: addresses and lengths are
//! multiples of the page size, and ranges passed back were obtained from
//! [`reserve`] or [`map`] and are not in use by anyone else.

mod linux;

pub use linux::{
    coarse_now_ns, commit, current_cpu, decommit, getenv, llc_slice_bytes, map, map_fixed,
    memory_limit_bytes, now_ns, nr_cpus_online, nr_cpus_possible, page_size, read_file, release,
    remap, reserve, unmap, write_fd, write_stderr, yield_now, FileBuf,
};

use core::sync::atomic::{AtomicIsize, Ordering::Relaxed};

/// Test hook: while positive, this many upcoming mmap-family calls fail as
/// if the OS were out of memory (each failure decrements it). Negative or
/// zero: no injection. Used by the fault-injection tests.
pub static FAIL_MAPS: AtomicIsize = AtomicIsize::new(0);

/// Makes the next `n` mapping calls (reserve, commit, map, remap) fail.
pub fn inject_map_failures(n: isize) {
    FAIL_MAPS.store(n, Relaxed);
}

/// Consumes one injected failure, if any are pending.
#[inline]
fn injected_failure() -> bool {
    if FAIL_MAPS.load(Relaxed) <= 0 {
        return false;
    }
    FAIL_MAPS.fetch_sub(1, Relaxed) > 0
}
