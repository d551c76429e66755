//! Memory for the allocator's own metadata (pagesets, thread heaps, the
//! huge-block table): a bump arena over mmap'd chunks. Metadata is never
//! freed — pagesets and heaps are pooled and reused — so the arena needs no
//! free path. It does not count against the memory limit.

use crate::sync::Locked;
use crate::sys;

const CHUNK: usize = 256 << 10;

struct Arena {
    cur: usize,
    end: usize,
}

static ARENA: Locked<Arena> = Locked::new(Arena { cur: 0, end: 0 });

/// Returns `size` zeroed bytes aligned to `align` (a power of two ≤ 4096),
/// or null if the OS refuses memory.
pub(crate) fn alloc(size: usize, align: usize) -> *mut u8 {
    debug_assert!(align.is_power_of_two() && align <= 4096);
    let mut a = ARENA.lock();
    let mut start = (a.cur + align - 1) & !(align - 1);
    if a.cur == 0 || start + size > a.end {
        let len = size.max(CHUNK).next_multiple_of(4096);
        let Some(p) = sys::map(len) else {
            return core::ptr::null_mut();
        };
        a.cur = p as usize;
        a.end = p as usize + len;
        start = a.cur;
    }
    a.cur = start + size;
    start as *mut u8
}

/// Takes the arena lock before fork.
pub(crate) fn lock_for_fork() {
    ARENA.lock.lock();
}

/// Releases (parent) or resets (child) the lock [`lock_for_fork`] took.
///
/// # Safety
/// Only right after fork, having called `lock_for_fork` in this thread.
pub(crate) unsafe fn unlock_after_fork(child: bool) {
    // SAFETY: held since lock_for_fork in this thread.
    unsafe {
        if child {
            ARENA.lock.force_unlock();
        } else {
            ARENA.lock.unlock();
        }
    }
}
