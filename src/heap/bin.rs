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
//! Each bin's `state` word packs three counts, so that a free's push and a
//! malloc's pop each move them with one add: the low 16 bits hold the
//! room left (`limit - length`, biased by [`ROOM_BIAS`] so a negative room
//! needs no sign), the next 16 the length (biased by [`COUNT_BIAS`]), the
//! bits above count the pushes since the last refill. A push tests the
//! room field's top bit, a pop the length field's: a pop never follows the
//! list further than the pushes and refills put on it, so a block freed
//! twice after the program overwrote its free key (the second free cannot
//! tell) is handed out at most twice — never a loop that hands it out
//! forever — and the next refill finds the list longer than its length
//! and reports it. An empty bin's refill takes the push count as objects
//! the heap used again (`Lifetimes::objects_reused`): an object that
//! cycles through the bin never reaches its slab's lists, where reuse is
//! otherwise seen.
//!
//! `state` is atomic only so a stats snapshot on another thread may read
//! it (the bytes on bins are not allocated): the owner writes it with a
//! plain load and store, which compile as a non-atomic `add` would.
//!
//! The length field is, strictly, the pops the bin allows before the slow
//! path runs: its *credit*. A push adds one to it through the carry out of
//! the room field, which the push's delta asks for — unless the heap
//! profile samples (`crate::heap_profile`): then the delta is read as
//! [`PUSH_KEEPS_CREDIT`] (the same add, of a value in memory instead of an
//! immediate), which moves the room and the push count but not the credit,
//! so a bin hands out exactly the objects its last refill or
//! [`set_credit`](Bins::set_credit) allowed, however many were freed onto
//! it meanwhile, and the slow path sees the allocation a sample falls on.
//! Credit is never more than the objects on the bin, so a bin that holds
//! few would send the allocations to the slow path nearly one by one; the
//! slow path refills such a bin on top of what it holds
//! ([`low`](Bins::low)).
//!
//! Invariant: `limit - room` is the length, and the list holds exactly
//! that many objects, with `room` in `-ROOM_BIAS ..= limit` (so the biased
//! fields neither borrow from nor carry into each other); the credit is at
//! most the length, and equal to it while pushes carry (the heap profile
//! off) once the next refill or [`recredit`](Bins::recredit) ran. `room`
//! may be negative after a refill (a slab's worth can exceed the limit);
//! frees push only while it is positive. The empty heap's bins have
//! `limit == 0`, `room == 0` and length 0, so its frees never write to
//! them and its pops never read them.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

use crate::slab::classes::{BIN_SHIFT, CAPACITY, CLASS_SIZE, MAX_CAPACITY, NR_CLASSES};
use crate::slab::object::FreeObject;
use crate::sync::bump;
use crate::util::addressed_by_register;

/// A heap's bins, a list of free objects per class. See the module docs.
#[repr(C)]
#[derive(Debug)]
pub struct Bins {
    /// Each class's list and state word. Hot: at offset 0 of the heap.
    bins: [Bin; NR_CLASSES],
    /// Each bin's room field when it is empty: its limit (the most objects
    /// it holds) plus [`ROOM_BIAS`], so that a length is one subtraction
    /// from the field (the credit visit's).
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
    /// The room (`limit - length`, plus [`ROOM_BIAS`]) in bits 0..16, the
    /// length (plus [`COUNT_BIAS`]) in bits 16..32 and the pushes since
    /// the last refill above (written by the owner only).
    state: AtomicU64,
}

impl Bin {
    /// The 16-bit field `index` of the `state` word of the bin at `b`.
    ///
    /// # Safety
    /// `b` is a bin of the calling thread's heap (its owner alone writes
    /// the word, so this plain read races with no write; a stats reader
    /// only loads the word atomically).
    #[inline(always)]
    unsafe fn field(b: *const Bin, index: usize) -> u16 {
        // SAFETY: the word is valid (contract); index < 4.
        unsafe { (*b).state.as_ptr().cast::<u16>().add(index).read() }
    }
}

// The bins' stride is the one the size table's offsets assume.
const _: () = assert!(core::mem::size_of::<Bin>() == 1 << BIN_SHIFT);

/// Added to a bin's room in its `state` word: the field's top bit is then
/// set exactly when the room is positive, which the free path tests with
/// one instruction.
const ROOM_BIAS: u64 = (1 << 15) - 1;
/// Added to a bin's length in its `state` word: the field's top bit is
/// then set exactly when the bin holds an object, which malloc's pop
/// tests with one instruction.
const COUNT_BIAS: u64 = (1 << 15) - 1;
/// A 16-bit field of a `state` word.
const FIELD_MASK: u64 = 0xffff;
/// Where the length field starts in a `state` word.
const COUNT_SHIFT: u32 = 16;
/// Where the push count starts in a `state` word.
const PUSHES_SHIFT: u32 = 32;
/// The top bit of a 16-bit field: room left, or an object on the bin.
const FIELD_TOP: u16 = 1 << 15;
/// Where the room field sits in a `state` word, in 16-bit units.
const ROOM_FIELD_OFFSET: usize = if cfg!(target_endian = "little") { 0 } else { 3 };
/// Where the length field sits in a `state` word, in 16-bit units.
const COUNT_FIELD_OFFSET: usize = if cfg!(target_endian = "little") { 1 } else { 2 };
/// A push, in one add: one unit of room less (adding 2^16 - 1 to a
/// positive room field carries a one out of it), which carries into the
/// length field as one object more, and one push more.
pub(crate) const PUSH_CREDITS: u64 = (1 << PUSHES_SHIFT) + FIELD_MASK;
/// A push that gives no credit (the heap profile on): one unit of room
/// less and one push more (subtracting one from a positive room field
/// borrows nothing), the length field as it was.
pub(crate) const PUSH_KEEPS_CREDIT: u64 = (1 << PUSHES_SHIFT) - 1;

/// The delta every push adds to its bin's `state` word:
/// [`PUSH_CREDITS`], or [`PUSH_KEEPS_CREDIT`] while the heap profile
/// samples. Loaded by the free fast path in place of an immediate (the
/// same two instructions: a load and the add); alone on its cache line,
/// which only a change of the setting writes.
static PUSH_DELTA: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(PUSH_CREDITS));

/// Whether pushes give pop credit ([`PUSH_CREDITS`]) or not
/// ([`PUSH_KEEPS_CREDIT`]), for every bin from the next push on. A bin
/// whose credit runs out with objects on it takes the slow path, which
/// gives it credit again ([`Bins::recredit`]), so either switch is safe
/// at any time.
pub(crate) fn set_pushes_credit(on: bool) {
    PUSH_DELTA.store(if on { PUSH_CREDITS } else { PUSH_KEEPS_CREDIT }, Relaxed);
}
/// A pop, in one add: one unit of room more and one object less (the
/// length field is at least one, so it lends nothing from the pushes).
const POP_DELTA: u64 = 1u64.wrapping_sub(1 << COUNT_SHIFT);
// A full bin's room and a refill's overshoot below zero fit the fields
// without reaching their ends (no carry out of a pop, no borrow).
const _: () = assert!((BIN_MAX as u64) < ROOM_BIAS && (MAX_CAPACITY as u64) < ROOM_BIAS);
const _: () = assert!((BIN_MAX as u64) + (MAX_CAPACITY as u64) < COUNT_BIAS);

/// Bytes a bin may hold (its `limit` is this over the object size, within
/// [`BIN_MIN`, `BIN_MAX`] objects).
pub(crate) const BIN_BYTES: usize = 64 << 10;
/// Fewest objects a bin may hold.
pub(crate) const BIN_MIN: u32 = 16;
/// Most objects a bin may hold.
pub(crate) const BIN_MAX: u32 = 1024;

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

/// The credit (pops allowed) in `state` word `s`.
#[inline(always)]
fn credit_in(s: u64) -> u32 {
    ((s >> COUNT_SHIFT) & FIELD_MASK) as u32 - COUNT_BIAS as u32
}

/// The length of a bin whose `state` word is `s` and whose `limit` field
/// is `limit` (its limit plus [`ROOM_BIAS`]).
#[inline(always)]
fn length_in(s: u64, limit: u32) -> u32 {
    limit.wrapping_sub((s & FIELD_MASK) as u32)
}

/// The `state` word of a bin whose `limit` field is `limit` (its limit
/// plus [`ROOM_BIAS`]) holding `n` objects, of which `credit` may be
/// popped, after `pushes` pushes.
#[inline(always)]
fn state_of(limit: u32, n: u32, credit: u32, pushes: u64) -> u64 {
    debug_assert!(credit <= n);
    (pushes << PUSHES_SHIFT)
        | ((u64::from(credit) + COUNT_BIAS) << COUNT_SHIFT)
        | (u64::from(limit.wrapping_sub(n)) & FIELD_MASK)
}

/// Below how many objects a bin whose `limit` field is `limit` (its limit
/// plus [`ROOM_BIAS`]) is refilled on top of what it holds rather than
/// given credit for them, when the heap profile's countdown allows more
/// ([`Bins::low`]): a quarter of its limit.
#[inline(always)]
fn top_up_below(limit: u32) -> u32 {
    ((limit - ROOM_BIAS as u32) / 4).min(TOP_UP_MAX)
}

/// The most objects a bin is topped up on, which [`Bins::put_back`]
/// walks.
const TOP_UP_MAX: u32 = 16;

/// The limit of each class's bin.
pub(crate) static BIN_LIMIT: [u32; NR_CLASSES] = build_limits();

impl Bins {
    /// Empty bins that hold up to `limits` objects.
    pub const fn new(limits: [u32; NR_CLASSES]) -> Bins {
        let mut bins = [const {
            Bin {
                head: core::ptr::null_mut(),
                state: AtomicU64::new(0),
            }
        }; NR_CLASSES];
        let mut limit = limits;
        let mut c = 0;
        while c < NR_CLASSES {
            limit[c] += ROOM_BIAS as u32;
            bins[c].state = AtomicU64::new(limit[c] as u64 | (COUNT_BIAS << COUNT_SHIFT));
            c += 1;
        }
        Bins { bins, limit }
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
        let s = self.bins[class].state.load(Relaxed);
        let n = length_in(s, self.limit[class]);
        debug_assert!(credit_in(s) <= n, "a bin's credit exceeds its length");
        n
    }

    /// The objects of the bin of `class` that may be popped before the
    /// slow path runs (at most [`count`](Self::count)).
    #[inline]
    pub fn credit(&self, class: usize) -> u32 {
        credit_in(self.bins[class].state.load(Relaxed))
    }

    /// Lets `credit` objects of the bin of `class` be popped before the
    /// slow path runs (capped at its length).
    pub fn set_credit(&mut self, class: usize, credit: u32) {
        let r = &self.bins[class].state;
        let s = r.load(Relaxed);
        let limit = self.limit[class];
        let n = length_in(s, limit);
        r.store(
            state_of(limit, n, credit.min(n), s >> PUSHES_SHIFT),
            Relaxed,
        );
    }

    /// Gives the bin of `class`, out of credit, credit for its objects up
    /// to `*allow` (which it takes them from) and pops one; null for an
    /// empty bin, no allowance, or a bin [`low`](Self::low) for it
    /// (nothing changed then).
    ///
    /// # Safety
    /// `class < NR_CLASSES` (unchecked: the slow path's index, a class's).
    #[inline(always)]
    pub unsafe fn recredit_and_pop(&mut self, class: usize, allow: &mut u32) -> *mut u8 {
        debug_assert!(class < NR_CLASSES);
        // SAFETY: class is in range (contract).
        let (b, limit) = unsafe {
            (
                self.bin_at_mut(class << BIN_SHIFT),
                *self.limit.get_unchecked(class),
            )
        };
        // SAFETY: b is this heap's bin of `class`; the owner alone writes
        // its word.
        let s = unsafe { (*b).state.load(Relaxed) };
        let n = length_in(s, limit);
        let g = n.min(*allow);
        if g == 0 || (g < *allow && g < top_up_below(limit)) {
            return core::ptr::null_mut();
        }
        debug_assert_eq!(credit_in(s), 0);
        *allow -= g;
        // SAFETY: the list holds n ≥ g ≥ 1 free objects of ours
        // (invariant): the head is one. The credit goes from 0 to g, and
        // the pop's own change (one object less) is folded in.
        unsafe {
            let p = (*b).head;
            let obj = FreeObject::at(p);
            (*b).head = obj.next();
            obj.unmark();
            (*b).state.store(
                s.wrapping_add(u64::from(g) << COUNT_SHIFT)
                    .wrapping_add(POP_DELTA),
                Relaxed,
            );
            p
        }
    }

    /// Whether the bin of `class`, out of credit, holds too few objects
    /// to give credit for `allow` pops: fewer than `allow` and than a
    /// quarter of its limit. While pushes give no credit, a bin that
    /// holds a few objects — a program that frees one and allocates one
    /// in turn keeps it at one — would otherwise send every allocation or
    /// so to the slow path for credit; the slow path refills such a bin on
    /// top of what it holds instead ([`set_aside`](Self::set_aside), the
    /// refill, [`put_back`](Self::put_back)), after which it gives credit
    /// for that many pops at a time.
    #[inline]
    pub fn low(&self, class: usize, allow: u32) -> bool {
        let n = self.count(class);
        n < allow && n < top_up_below(self.limit[class])
    }

    /// The bin of `class` ran out of credit: if objects are on it still
    /// (pushed while pushes gave no credit), every one of them may be
    /// popped again, and true is returned; false for an empty bin.
    #[inline]
    pub fn recredit(&mut self, class: usize) -> bool {
        let n = self.count(class);
        if n == 0 || self.credit(class) != 0 {
            return false;
        }
        self.set_credit(class, n);
        true
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
            let limit = *core::ptr::addr_of!((*b).limit[class]);
            length_in((*core::ptr::addr_of!((*bin).state)).load(Relaxed), limit)
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
        unsafe { Bin::field(self.bin_at(offset), ROOM_FIELD_OFFSET) & FIELD_TOP != 0 }
    }

    /// Takes `n` objects off the length of `class` (the caller took them
    /// off the list; the pushes unchanged, the credit at most the length
    /// left, the fields within their bounds, see the module's invariant).
    #[inline(always)]
    fn remove(&self, class: usize, n: u32) {
        let r = &self.bins[class].state;
        let s = r.load(Relaxed);
        let limit = self.limit[class];
        let len = length_in(s, limit);
        debug_assert!(n <= len);
        let left = len - n;
        r.store(
            state_of(limit, left, credit_in(s).min(left), s >> PUSHES_SHIFT),
            Relaxed,
        );
    }

    /// The pushes on the bin of `class` since the last call, which resets
    /// them: taken when the bin has run dry, every one of them is an
    /// object the heap used again.
    pub fn take_pushes(&mut self, class: usize) -> u32 {
        let r = &self.bins[class].state;
        let s = r.load(Relaxed);
        r.store(s & ((1 << PUSHES_SHIFT) - 1), Relaxed);
        (s >> PUSHES_SHIFT) as u32
    }

    /// Forgets up to `n` pushes on the bin of `class` (objects that left
    /// the bin for their slab were not used again).
    fn forget_pushes(&mut self, class: usize, n: u32) {
        let r = &self.bins[class].state;
        let s = r.load(Relaxed);
        let pushes = (s >> PUSHES_SHIFT).saturating_sub(u64::from(n));
        r.store(
            (pushes << PUSHES_SHIFT) | (s & ((1 << PUSHES_SHIFT) - 1)),
            Relaxed,
        );
    }

    /// Pops an object of `class` (its free key cleared), or null when the
    /// bin's length is zero.
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
        // SAFETY: the offset is a bin's (contract); a credit of one or
        // more means the head is a free object of the list (the credit is
        // at most the length: invariant).
        unsafe {
            let b = self.bin_at_mut(offset);
            if Bin::field(b, COUNT_FIELD_OFFSET) & FIELD_TOP == 0 {
                return core::ptr::null_mut();
            }
            let p = (*b).head;
            let obj = FreeObject::at(p);
            (*b).head = obj.next();
            obj.unmark();
            bump(&(*b).state, POP_DELTA);
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
            bump(&(*b).state, PUSH_DELTA.load(Relaxed));
        }
    }

    /// Makes `head` (a list of `n` free objects, each with the free key)
    /// the empty bin of `class`. A bin whose length ran out before its
    /// list did held an object twice (a block freed twice after its free
    /// key was overwritten): reported, with the block left on it, and
    /// the program aborted.
    pub fn fill(&mut self, class: usize, head: *mut u8, n: u32) {
        let left = self.bins[class].head;
        if !left.is_null() {
            crate::alert::fatal(
                "malloc(): free list corrupted (a block freed twice?) at",
                left,
            );
        }
        debug_assert_eq!(self.count(class), 0);
        self.bins[class].head = head;
        let r = &self.bins[class].state;
        r.store(
            state_of(self.limit[class], n, n, r.load(Relaxed) >> PUSHES_SHIFT),
            Relaxed,
        );
    }

    /// Takes every object off the bin of `class` and returns the list and
    /// its length, which the caller now owns until it gives them back with
    /// [`put_back`](Self::put_back); the pushes are kept (the objects are
    /// still the heap's, set aside while the empty bin refills).
    pub fn set_aside(&mut self, class: usize) -> (*mut u8, u32) {
        let n = self.count(class);
        self.remove(class, n);
        let all = core::mem::replace(&mut self.bins[class].head, core::ptr::null_mut());
        (all, n)
    }

    /// Puts back on the bin of `class`, in front of what is on it, the
    /// list of `n` objects [`set_aside`](Self::set_aside) took; they come
    /// with no pop credit.
    ///
    /// # Safety
    /// `head` and `n` are what `set_aside` returned for this class, and
    /// the bin has room for `n` more (its length stays within the fields:
    /// `n` and its length now are each at most a refill's worth or
    /// [`BIN_MAX`]).
    pub unsafe fn put_back(&mut self, class: usize, head: *mut u8, n: u32) {
        if n == 0 {
            return;
        }
        let mut last = head;
        // SAFETY: the list holds n ≥ 1 objects (contract).
        unsafe {
            for _ in 1..n {
                last = FreeObject::at(last).next();
            }
            FreeObject::at(last).set_next(self.bins[class].head);
        }
        self.bins[class].head = head;
        let r = &self.bins[class].state;
        let s = r.load(Relaxed);
        let limit = self.limit[class];
        let len = length_in(s, limit) + n;
        r.store(
            state_of(limit, len, credit_in(s), s >> PUSHES_SHIFT),
            Relaxed,
        );
    }

    /// Keeps the first `keep` objects of the bin of `class` and returns
    /// the rest of the list (null if there is none) and its length, which
    /// the caller now owns.
    ///
    /// # Safety
    /// The list is well formed.
    pub unsafe fn split_after(&mut self, class: usize, keep: u32) -> (*mut u8, u32) {
        let count = self.count(class);
        if keep == 0 {
            self.remove(class, count);
            self.forget_pushes(class, count);
            let all = core::mem::replace(&mut self.bins[class].head, core::ptr::null_mut());
            return (all, count);
        }
        if keep >= count {
            return (core::ptr::null_mut(), 0);
        }
        let mut last = self.bins[class].head;
        // SAFETY: the first `keep` links exist (keep < count).
        unsafe {
            for _ in 1..keep {
                last = FreeObject::at(last).next();
            }
            let rest = FreeObject::at(last).next();
            FreeObject::at(last).set_next(core::ptr::null_mut());
            self.remove(class, count - keep);
            self.forget_pushes(class, count - keep);
            (rest, count - keep)
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
