//! A bin: a thread heap's list of free objects of one size class, in front
//! of its slabs (as tcmalloc's per-thread free lists and jemalloc's tcache
//! bins, but over slabs the heap owns).
//!
//! Allocation pops the bin; the owner's free pushes on it. An empty bin is
//! refilled with every free object of a slab at once (a splice, O(1)); a
//! free that finds the bin full (`limit` objects) puts the object straight
//! back on its slab's own list. So alloc and free in a steady working set
//! touch only the bin, and a slab is touched once per refill — not once
//! per object, and not each time the current slab runs dry. Objects freed
//! by other threads go back to their slab's remote list instead: reusing
//! them here would hand this thread memory next to the owner's live
//! objects (false sharing).
//!
//! Objects on a bin are linked through word 0 and carry the process's free
//! key in word 1 (so a second free is recognised); allocation clears it.
//! A bin holds only objects of its heap's own slabs; a slab counts an
//! object on a bin as in use: only its own list and remote list are the
//! slab's.
//!
//! `count` is atomic only so a stats snapshot on another thread may read
//! it (the bytes on bins are not allocated): the owner writes it with a
//! plain load and store, which compile as a non-atomic `sub`/`add` would.
//!
//! Invariant: `count` is the length of the list. It may exceed `limit`
//! after a refill; frees push only while it is below. The empty heap's
//! bins have `limit == 0`, so its frees never write to it.

use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::classes::{CAPACITY, CLASS_SIZE, NR_CLASSES};
use super::object::FreeObject;

/// A bin. See the module docs.
#[repr(C)]
#[derive(Debug)]
pub struct Bin {
    /// The first free object, or null.
    pub head: *mut u8,
    /// Objects on the list (written by the owner only).
    count: AtomicU32,
    /// Most objects the bin holds before a free flushes half of them.
    pub limit: u32,
}

/// Bytes a bin may hold (its `limit` is this over the object size, within
/// [`BIN_MIN`, `BIN_MAX`] objects).
pub const BIN_BYTES: usize = 64 << 10;
/// Fewest objects a bin may hold.
pub const BIN_MIN: u32 = 16;
/// Most objects a bin may hold.
pub const BIN_MAX: u32 = 256;

const fn build_limits() -> [u32; NR_CLASSES] {
    let mut l = [0u32; NR_CLASSES];
    let mut c = 0;
    while c < NR_CLASSES {
        let by_bytes = (BIN_BYTES / CLASS_SIZE[c] as usize) as u32;
        let by_slab = 2 * CAPACITY[c] as u32;
        let mut n = if by_bytes < by_slab {
            by_bytes
        } else {
            by_slab
        };
        if n < BIN_MIN {
            n = BIN_MIN;
        }
        if n > BIN_MAX {
            n = BIN_MAX;
        }
        l[c] = n;
        c += 1;
    }
    l
}

/// The limit of each class's bin.
pub static BIN_LIMIT: [u32; NR_CLASSES] = build_limits();

impl Bin {
    /// An empty bin that holds up to `limit` objects.
    pub const fn new(limit: u32) -> Bin {
        Bin {
            head: core::ptr::null_mut(),
            count: AtomicU32::new(0),
            limit,
        }
    }

    /// Objects on the list.
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.count.load(Relaxed)
    }

    /// Sets the count (the owner, after replacing the list).
    #[inline(always)]
    pub fn set_count(&self, n: u32) {
        self.count.store(n, Relaxed);
    }

    /// The count of bin `b`, read from any thread (a stats snapshot).
    ///
    /// # Safety
    /// `b` points at a live bin. Only its atomic `count` is read, so the
    /// owner may be using the bin meanwhile.
    pub unsafe fn count_of(b: *const Bin) -> u32 {
        // SAFETY: a shared reference to the atomic field alone (contract).
        unsafe { (*core::ptr::addr_of!((*b).count)).load(Relaxed) }
    }

    /// Whether a free may push (below `limit`).
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.count() < self.limit
    }

    /// Pops an object (its free key cleared), or null.
    ///
    /// # Safety
    /// The list holds free objects owned by the caller's heap.
    #[inline(always)]
    pub unsafe fn pop(&mut self) -> *mut u8 {
        let p = self.head;
        if !p.is_null() {
            // SAFETY: p is a free object of the list (contract).
            unsafe {
                let obj = FreeObject::at(p);
                self.head = obj.next();
                obj.unmark();
            }
            self.set_count(self.count() - 1);
        }
        p
    }

    /// Pushes free object `p`, marking it with `key`.
    ///
    /// # Safety
    /// `p` is an object being freed, of a class at least this bin's, and
    /// nobody else uses it.
    #[inline(always)]
    pub unsafe fn push(&mut self, p: *mut u8, key: usize) {
        // SAFETY: p is ours to relink (contract).
        unsafe {
            let obj = FreeObject::at(p);
            obj.set_next(self.head);
            obj.mark(key);
        }
        self.head = p;
        self.set_count(self.count() + 1);
    }

    /// Keeps the first `keep` objects and returns the rest of the list
    /// (null if there is none), which the caller now owns.
    ///
    /// # Safety
    /// The list is well formed.
    pub unsafe fn split_after(&mut self, keep: u32) -> *mut u8 {
        if keep == 0 {
            self.set_count(0);
            return core::mem::replace(&mut self.head, core::ptr::null_mut());
        }
        if keep >= self.count() {
            return core::ptr::null_mut();
        }
        let mut last = self.head;
        // SAFETY: the first `keep` links exist (keep < count).
        unsafe {
            for _ in 1..keep {
                last = FreeObject::at(last).next();
            }
            let rest = FreeObject::at(last).next();
            FreeObject::at(last).set_next(core::ptr::null_mut());
            self.set_count(keep);
            rest
        }
    }

    /// Whether `p` is on the list (double-free checks).
    ///
    /// # Safety
    /// The list is well formed.
    pub unsafe fn contains(&self, p: *mut u8) -> bool {
        let mut q = self.head;
        let mut steps = 0;
        while !q.is_null() && steps <= self.count() {
            if q == p {
                return true;
            }
            // SAFETY: q is an object of the list.
            q = unsafe { FreeObject::at(q).next() };
            steps += 1;
        }
        false
    }
}
