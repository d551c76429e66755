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
//! The bins of a heap are laid out as arrays per field (`Bins`): the list
//! heads first, then the room left in each, then the limits — so the fast
//! paths reach a class's head and room with one scaled index each, at the
//! start of the heap.
//!
//! `room` is atomic only so a stats snapshot on another thread may read it
//! (the bytes on bins are not allocated): the owner writes it with a plain
//! load and store, which compile as a non-atomic `sub`/`add` would.
//!
//! Invariant: `limit - room` is the length of the list. `room` may be
//! negative after a refill (a slab's worth can exceed the limit); frees
//! push only while it is positive. The empty heap's bins have `limit == 0`
//! and `room == 0`, so its frees never write to them.

use core::sync::atomic::{AtomicI32, Ordering::Relaxed};

use super::classes::{CAPACITY, CLASS_SIZE, NR_CLASSES};
use super::object::FreeObject;

/// A heap's bins, a list of free objects per class. See the module docs.
#[repr(C)]
#[derive(Debug)]
pub struct Bins {
    /// The first free object of each class, or null. Hot: at offset 0 of
    /// the heap.
    heads: [*mut u8; NR_CLASSES],
    /// How many more objects each bin takes before a free goes to the slab
    /// (`limit - length`; written by the owner only).
    room: [AtomicI32; NR_CLASSES],
    /// Most objects each bin holds.
    limit: [u32; NR_CLASSES],
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

impl Bins {
    /// Empty bins that hold up to `limits` objects.
    pub const fn new(limits: [u32; NR_CLASSES]) -> Bins {
        let mut room = [const { AtomicI32::new(0) }; NR_CLASSES];
        let mut c = 0;
        while c < NR_CLASSES {
            room[c] = AtomicI32::new(limits[c] as i32);
            c += 1;
        }
        Bins {
            heads: [core::ptr::null_mut(); NR_CLASSES],
            room,
            limit: limits,
        }
    }

    /// The first object of the bin of `class` (null: empty).
    #[inline(always)]
    pub fn head(&self, class: usize) -> *mut u8 {
        self.heads[class]
    }

    /// Objects on the bin of `class`.
    #[inline(always)]
    pub fn count(&self, class: usize) -> u32 {
        (self.limit[class] as i32 - self.room[class].load(Relaxed)) as u32
    }

    /// The count of bin `class` of `b`, read from any thread (a stats
    /// snapshot).
    ///
    /// # Safety
    /// `b` points at live bins. Only the atomic `room` and the fixed
    /// `limit` are read, so the owner may be using the bins meanwhile.
    pub unsafe fn count_of(b: *const Bins, class: usize) -> u32 {
        // SAFETY: a shared reference to the atomic alone, and a read of a
        // field that never changes (contract).
        unsafe {
            let room = (*core::ptr::addr_of!((*b).room))[class].load(Relaxed);
            let limit = (*core::ptr::addr_of!((*b).limit))[class];
            (limit as i32 - room) as u32
        }
    }

    /// Whether a free may push on the bin of `class`.
    ///
    /// # Safety
    /// `class < NR_CLASSES` (unchecked: the fast path's index).
    #[inline(always)]
    pub unsafe fn has_room(&self, class: usize) -> bool {
        debug_assert!(class < NR_CLASSES);
        // SAFETY: class is in range (contract).
        unsafe { self.room.get_unchecked(class) }.load(Relaxed) > 0
    }

    /// # Safety
    /// `class < NR_CLASSES`.
    #[inline(always)]
    unsafe fn add_room_unchecked(&self, class: usize, by: i32) {
        debug_assert!(class < NR_CLASSES);
        // SAFETY: class is in range (contract).
        let r = unsafe { self.room.get_unchecked(class) };
        r.store(r.load(Relaxed) + by, Relaxed);
    }

    #[inline(always)]
    fn add_room(&self, class: usize, by: i32) {
        let r = &self.room[class];
        r.store(r.load(Relaxed) + by, Relaxed);
    }

    /// Pops an object of `class` (its free key cleared), or null.
    ///
    /// # Safety
    /// `class < NR_CLASSES` (unchecked: the fast path's index); the list
    /// holds free objects owned by the caller's heap.
    #[inline(always)]
    pub unsafe fn pop(&mut self, class: usize) -> *mut u8 {
        debug_assert!(class < NR_CLASSES);
        // SAFETY: class is in range; p is a free object of the list
        // (contract).
        unsafe {
            let head = self.heads.get_unchecked_mut(class);
            let p = *head;
            if !p.is_null() {
                let obj = FreeObject::at(p);
                *head = obj.next();
                obj.unmark();
                self.add_room_unchecked(class, 1);
            }
            p
        }
    }

    /// Pushes free object `p` on the bin of `class`, marking it with `key`.
    ///
    /// # Safety
    /// `class < NR_CLASSES` (unchecked); `p` is an object being freed, of
    /// `class` or larger, and nobody else uses it.
    #[inline(always)]
    pub unsafe fn push(&mut self, class: usize, p: *mut u8, key: usize) {
        debug_assert!(class < NR_CLASSES);
        // SAFETY: class is in range; p is ours to relink (contract).
        unsafe {
            let head = self.heads.get_unchecked_mut(class);
            let obj = FreeObject::at(p);
            obj.set_next(*head);
            obj.mark(key);
            *head = p;
            self.add_room_unchecked(class, -1);
        }
    }

    /// Makes `head` (a list of `n` free objects, each with the free key)
    /// the empty bin of `class`.
    pub fn fill(&mut self, class: usize, head: *mut u8, n: u32) {
        debug_assert!(self.heads[class].is_null());
        self.heads[class] = head;
        self.room[class].store(self.limit[class] as i32 - n as i32, Relaxed);
    }

    /// Keeps the first `keep` objects of the bin of `class` and returns
    /// the rest of the list (null if there is none), which the caller now
    /// owns.
    ///
    /// # Safety
    /// The list is well formed.
    pub unsafe fn split_after(&mut self, class: usize, keep: u32) -> *mut u8 {
        let count = self.count(class);
        if keep == 0 {
            self.add_room(class, count as i32);
            return core::mem::replace(&mut self.heads[class], core::ptr::null_mut());
        }
        if keep >= count {
            return core::ptr::null_mut();
        }
        let mut last = self.heads[class];
        // SAFETY: the first `keep` links exist (keep < count).
        unsafe {
            for _ in 1..keep {
                last = FreeObject::at(last).next();
            }
            let rest = FreeObject::at(last).next();
            FreeObject::at(last).set_next(core::ptr::null_mut());
            self.add_room(class, (count - keep) as i32);
            rest
        }
    }

    /// Whether `p` is on the bin of `class` (double-free checks).
    ///
    /// # Safety
    /// The list is well formed.
    pub unsafe fn contains(&self, class: usize, p: *mut u8) -> bool {
        let mut q = self.heads[class];
        let mut steps = 0;
        while !q.is_null() && steps <= self.count(class) {
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
