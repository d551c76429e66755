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
//! The bins of a heap are an array of (head, state word) pairs at the
//! start of the heap, then the limits (`Bins`): the fast paths compute a
//! class's pair's address once and reach both fields from it (see [`Bin`]
//! on why not through an index).
//!
//! Each bin's `state` word packs two counts, so that a free's push moves
//! both with one add: the low 16 bits hold the room left (`limit -
//! length`, biased by [`ROOM_BIAS`] so a negative room needs no sign),
//! the bits above count the pushes since the last refill. An empty bin's
//! refill takes that count as objects the heap used again
//! (`Lifetimes::objects_reused`): an object that cycles through the bin
//! never reaches its slab's lists, where reuse is otherwise seen.
//!
//! `state` is atomic only so a stats snapshot on another thread may read
//! it (the bytes on bins are not allocated): the owner writes it with a
//! plain load and store, which compile as a non-atomic `add` would.
//!
//! Invariant: `limit - room` is the length of the list, with `room` in
//! `-ROOM_BIAS ..= limit` (so the biased field neither borrows from nor
//! carries into the push count). `room` may be negative after a refill (a
//! slab's worth can exceed the limit); frees push only while it is
//! positive. The empty heap's bins have `limit == 0` and `room == 0`, so
//! its frees never write to them.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::classes::{BIN_SHIFT, CAPACITY, CLASS_SIZE, MAX_CAPACITY, NR_CLASSES};
use super::object::FreeObject;
use crate::sync::bump;
use crate::util::addressed_by_register;

/// A heap's bins, a list of free objects per class. See the module docs.
#[repr(C)]
#[derive(Debug)]
pub struct Bins {
    /// Each class's list and state word. Hot: at offset 0 of the heap.
    bins: [Bin; NR_CLASSES],
    /// Most objects each bin holds.
    limit: [u32; NR_CLASSES],
}

/// One class's bin, its head and state word side by side. The fast paths
/// reach it through `Bins::bin_at`, whose address they compute before they
/// load or store ([`addressed_by_register`]), so a malloc's pop and the
/// next call's load of the same head or word are forwarded with no delay
/// (arrays per field indexed by class were not: a pair of malloc and free
/// of 16 B in a loop took 5.5 ns, now 4.2; mimalloc 2.0.9's 3.4, whose
/// page pointer gives it the same addressing).
#[repr(C)]
#[derive(Debug)]
struct Bin {
    /// The first free object, or null.
    head: *mut u8,
    /// The room (`limit - length`, plus [`ROOM_BIAS`]) in the low 16 bits
    /// and the pushes since the last refill above (written by the owner
    /// only).
    state: AtomicU64,
}

// The bins' stride is the one the size table's offsets assume.
const _: () = assert!(core::mem::size_of::<Bin>() == 1 << BIN_SHIFT);

/// Added to a bin's room in its `state` word: the field's top bit is then
/// set exactly when the room is positive, which the free path tests with
/// one instruction.
const ROOM_BIAS: u64 = (1 << 15) - 1;
/// The room field of a `state` word.
const ROOM_MASK: u64 = 0xffff;
/// The room field's top bit: the bin has room.
const HAS_ROOM: u16 = 1 << 15;
/// Where the room field sits in a `state` word, in 16-bit units.
const ROOM_FIELD_OFFSET: usize = if cfg!(target_endian = "little") { 0 } else { 3 };
/// A push: one unit of room less and one push more, in one add of
/// 2^16 - 1 (the room is positive, so its field carries the one).
const PUSH_DELTA: u64 = (1 << 16) - 1;
// A full bin's room and a refill's overshoot below zero fit the field
// without reaching its ends (no carry out of a pop, no borrow).
const _: () = assert!((BIN_MAX as u64) < ROOM_BIAS && (MAX_CAPACITY as u64) < ROOM_BIAS);

/// Bytes a bin may hold (its `limit` is this over the object size, within
/// [`BIN_MIN`, `BIN_MAX`] objects).
pub const BIN_BYTES: usize = 64 << 10;
/// Fewest objects a bin may hold.
pub const BIN_MIN: u32 = 16;
/// Most objects a bin may hold.
pub const BIN_MAX: u32 = 1024;

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

/// Whether `offset` is a class's bin offset.
fn is_bin_offset(offset: usize) -> bool {
    offset < NR_CLASSES << BIN_SHIFT && offset.is_multiple_of(1 << BIN_SHIFT)
}

/// The room in `state` word `s`.
#[inline(always)]
fn room_of(s: u64) -> i32 {
    (s & ROOM_MASK) as i32 - ROOM_BIAS as i32
}

/// The limit of each class's bin.
pub static BIN_LIMIT: [u32; NR_CLASSES] = build_limits();

impl Bins {
    /// Empty bins that hold up to `limits` objects.
    pub const fn new(limits: [u32; NR_CLASSES]) -> Bins {
        let mut bins = [const {
            Bin {
                head: core::ptr::null_mut(),
                state: AtomicU64::new(0),
            }
        }; NR_CLASSES];
        let mut c = 0;
        while c < NR_CLASSES {
            bins[c].state = AtomicU64::new(limits[c] as u64 + ROOM_BIAS);
            c += 1;
        }
        Bins {
            bins,
            limit: limits,
        }
    }

    /// The bin `offset` bytes in, its address computed in a register the
    /// compiler cannot fold back into an indexed operand (see [`Bin`]).
    ///
    /// # Safety
    /// `offset` is a class's bin offset (`class << BIN_SHIFT`, unchecked:
    /// the fast paths').
    #[inline(always)]
    unsafe fn bin_at(&self, offset: usize) -> *const Bin {
        debug_assert!(is_bin_offset(offset));
        // SAFETY: the offset is a bin's (contract).
        addressed_by_register(unsafe { self.bins.as_ptr().byte_add(offset) } as *mut Bin)
    }

    /// [`bin_at`](Self::bin_at) for writing the bin (its head is no
    /// atomic: the pointer comes from the exclusive borrow).
    ///
    /// # Safety
    /// As `bin_at`.
    #[inline(always)]
    unsafe fn bin_at_mut(&mut self, offset: usize) -> *mut Bin {
        debug_assert!(is_bin_offset(offset));
        // SAFETY: the offset is a bin's (contract).
        addressed_by_register(unsafe { self.bins.as_mut_ptr().byte_add(offset) })
    }

    /// The first object of the bin of `class` (null: empty).
    #[inline(always)]
    pub fn head(&self, class: usize) -> *mut u8 {
        self.bins[class].head
    }

    /// Objects on the bin of `class`.
    #[inline(always)]
    pub fn count(&self, class: usize) -> u32 {
        (self.limit[class] as i32 - room_of(self.bins[class].state.load(Relaxed))) as u32
    }

    /// The count of bin `class` of `b`, read from any thread (a stats
    /// snapshot).
    ///
    /// # Safety
    /// `b` points at live bins. Only the atomic `state` and the fixed
    /// `limit` are read, so the owner may be using the bins meanwhile.
    pub unsafe fn count_of(b: *const Bins, class: usize) -> u32 {
        // SAFETY: a shared reference to the atomic alone, and a read of a
        // field that never changes (contract).
        unsafe {
            let bin = core::ptr::addr_of!((*b).bins[class]);
            let state = (*core::ptr::addr_of!((*bin).state)).load(Relaxed);
            let limit = (*core::ptr::addr_of!((*b).limit))[class];
            (limit as i32 - room_of(state)) as u32
        }
    }

    /// Whether a free may push on the bin `offset` bytes in (a slab's
    /// `bin_offset`): the room field's top bit, read as 16 bits so the
    /// test is one instruction on memory.
    ///
    /// # Safety
    /// `offset` is a class's bin offset (unchecked: the fast path's).
    #[inline(always)]
    pub unsafe fn has_room_at(&self, offset: usize) -> bool {
        // SAFETY: the offset is a bin's (contract); the owner alone writes
        // the word, so its plain read of the room field races with no
        // write (a stats reader only loads the word atomically).
        let field = unsafe {
            (*self.bin_at(offset))
                .state
                .as_ptr()
                .cast::<u16>()
                .add(ROOM_FIELD_OFFSET)
                .read()
        };
        field & HAS_ROOM != 0
    }

    /// Adds `by` to the room of `class` (the pushes unchanged: the room
    /// stays within its field, see the module's invariant).
    #[inline(always)]
    fn add_room(&self, class: usize, by: i32) {
        let r = &self.bins[class].state;
        bump(r, by as i64 as u64);
        debug_assert!(room_of(r.load(Relaxed)) <= self.limit[class] as i32);
    }

    /// The pushes on the bin of `class` since the last call, which resets
    /// them: taken when the bin has run dry, every one of them is an
    /// object the heap used again.
    pub fn take_pushes(&mut self, class: usize) -> u32 {
        let r = &self.bins[class].state;
        let s = r.load(Relaxed);
        r.store(s & ROOM_MASK, Relaxed);
        (s >> 16).min(u64::from(u32::MAX)) as u32
    }

    /// Forgets up to `n` pushes on the bin of `class` (objects that left
    /// the bin for their slab were not used again).
    fn forget_pushes(&mut self, class: usize, n: u32) {
        let r = &self.bins[class].state;
        let s = r.load(Relaxed);
        let pushes = (s >> 16).saturating_sub(u64::from(n));
        r.store((pushes << 16) | (s & ROOM_MASK), Relaxed);
    }

    /// Pops an object of `class` (its free key cleared), or null.
    ///
    /// # Safety
    /// `class < NR_CLASSES` (unchecked: the fast path's index); the list
    /// holds free objects owned by the caller's heap.
    #[inline(always)]
    pub unsafe fn pop(&mut self, class: usize) -> *mut u8 {
        debug_assert!(class < NR_CLASSES);
        // SAFETY: forwarded contract.
        unsafe { self.pop_at(class << BIN_SHIFT) }
    }

    /// [`pop`](Self::pop) from the bin `offset` bytes in
    /// (`classes::bin_offset_of`).
    ///
    /// # Safety
    /// `offset` is a class's bin offset; as `pop`.
    #[inline(always)]
    pub unsafe fn pop_at(&mut self, offset: usize) -> *mut u8 {
        // SAFETY: the offset is a bin's (contract); p is a free object of
        // its list.
        unsafe {
            let b = self.bin_at_mut(offset);
            let p = (*b).head;
            if !p.is_null() {
                let obj = FreeObject::at(p);
                (*b).head = obj.next();
                obj.unmark();
                bump(&(*b).state, 1);
            }
            p
        }
    }

    /// Pushes free object `p` on the bin `offset` bytes in, marking it
    /// with `key`.
    ///
    /// # Safety
    /// `offset` is a class's bin offset (unchecked) and
    /// [`has_room_at`](Self::has_room_at) it; `p` is an object being
    /// freed, of that class or larger, and nobody else uses it.
    #[inline(always)]
    pub unsafe fn push_at(&mut self, offset: usize, p: *mut u8, key: usize) {
        // SAFETY: the offset is a bin's; p is ours to relink (contract).
        unsafe {
            let b = self.bin_at_mut(offset);
            let obj = FreeObject::at(p);
            obj.set_next((*b).head);
            obj.mark(key);
            (*b).head = p;
            bump(&(*b).state, PUSH_DELTA);
        }
    }

    /// Makes `head` (a list of `n` free objects, each with the free key)
    /// the empty bin of `class`.
    pub fn fill(&mut self, class: usize, head: *mut u8, n: u32) {
        debug_assert!(self.bins[class].head.is_null());
        self.bins[class].head = head;
        let r = &self.bins[class].state;
        let room = (self.limit[class] as i32 - n as i32) as i64 as u64;
        r.store(
            (r.load(Relaxed) & !ROOM_MASK) | (room.wrapping_add(ROOM_BIAS) & ROOM_MASK),
            Relaxed,
        );
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
            self.forget_pushes(class, count);
            return core::mem::replace(&mut self.bins[class].head, core::ptr::null_mut());
        }
        if keep >= count {
            return core::ptr::null_mut();
        }
        let mut last = self.bins[class].head;
        // SAFETY: the first `keep` links exist (keep < count).
        unsafe {
            for _ in 1..keep {
                last = FreeObject::at(last).next();
            }
            let rest = FreeObject::at(last).next();
            FreeObject::at(last).set_next(core::ptr::null_mut());
            self.add_room(class, (count - keep) as i32);
            self.forget_pushes(class, count - keep);
            rest
        }
    }

    /// Whether `p` is on the bin of `class` (double-free checks).
    ///
    /// # Safety
    /// The list is well formed.
    pub unsafe fn contains(&self, class: usize, p: *mut u8) -> bool {
        let mut q = self.bins[class].head;
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
