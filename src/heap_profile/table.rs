//! The profile's memory: every distinct call stack sampled, with what its
//! samples stand for (allocated in all, and live now), and one record per
//! live sampled block — all in the allocator's metadata arena, never the
//! program's heap, behind one lock (samples are rare: one per `mean`
//! bytes).
//!
//! Stacks are found by the hash of their frames in an open-addressed
//! table of [`SLOTS`] slots; past [`MAX_STACKS`] distinct stacks, new ones
//! are counted under one stack with no frames (the dump names it). A
//! record is what a live sampled block must give back when it is freed:
//! its stack and the exact weight its sample added. Freed records are
//! kept on a free list for the next samples.
//!
//! A sampled block's free takes no lock: its record goes on a stack of
//! freed records ([`FREED`], one compare-and-swap), which whoever takes
//! the lock next — a sample, a dump, a summary — empties first, taking
//! each record's weight out of the live counts. So the lock is taken once
//! a sample, not twice, and never by a free: with more threads than CPUs,
//! a free that found it held by a preempted sampler slept until that
//! thread ran again (a producer and its consumer on two CPUs passing
//! blocks of 8–32 KiB: 180 such waits a second).
//!
//! Invariants: each stack's `live_*` counters are the sums of its live
//! records'; the table's totals are the sums over its stacks; `count`
//! stacks are linked from `first` and sit in the slots (the overflow stack
//! on the list only).

use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering::*};

use crate::meta;
use crate::sync::Locked;

use super::unwind::STACK_WORDS;

/// Slots of the stack table (a power of two).
pub(crate) const SLOTS: usize = 1 << 16;
/// Most distinct stacks kept apart (half the slots: probes stay short).
pub(crate) const MAX_STACKS: usize = SLOTS / 2;
/// Records made at once when the free list is empty.
const RECORDS_PER_CHUNK: usize = 128;

/// One distinct call stack and what its samples stand for.
pub(crate) struct Stack {
    hash: u64,
    /// The next stack on the table's list.
    next: *mut Stack,
    frames: *const usize,
    nframes: usize,
    /// Samples ever taken here.
    pub samples: u64,
    /// Bytes and objects (× `sampler::OBJECT_SCALE`) the samples stand
    /// for, ever allocated.
    pub alloc_bytes: u64,
    /// See `alloc_bytes`.
    pub alloc_objects: u64,
    /// Samples here still live.
    pub live_samples: u64,
    /// Bytes and objects (scaled) the live samples stand for.
    pub live_bytes: u64,
    /// See `live_bytes`.
    pub live_objects: u64,
}

impl Stack {
    /// The frames, innermost first (none for the overflow stack).
    pub(crate) fn frames(&self) -> &[usize] {
        if self.nframes == 0 {
            return &[];
        }
        // SAFETY: frames points at nframes words the table wrote and
        // never changes.
        unsafe { core::slice::from_raw_parts(self.frames, self.nframes) }
    }
}

/// A live sampled block: what its free takes back.
pub struct Record {
    stack: *mut Stack,
    bytes: u64,
    objects: u64,
    /// The next free record (while free).
    next_free: *mut Record,
}

/// The stacks and records. Reached through [`TABLE`]'s lock.
pub(crate) struct Table {
    slots: *mut *mut Stack,
    first: *mut Stack,
    count: usize,
    overflow: *mut Stack,
    free: *mut Record,
    /// Samples ever taken.
    pub samples: u64,
    /// Bytes all samples stand for.
    pub alloc_bytes: u64,
    /// Live samples.
    pub live_samples: u64,
    /// Bytes the live samples stand for.
    pub live_bytes: u64,
    /// The most `live_bytes` ever was.
    pub peak_bytes: u64,
    /// `live_bytes` at the last dump at a peak.
    pub peak_dumped: u64,
    /// Stacks counted under the overflow stack, the table being full.
    pub overflowed: u64,
}

// SAFETY: the table's pointers reach metadata only it uses, under its lock.
unsafe impl Send for Table {}

/// The process's profile.
pub static TABLE: Locked<Table> = Locked::new(Table {
    slots: ptr::null_mut(),
    first: ptr::null_mut(),
    count: 0,
    overflow: ptr::null_mut(),
    free: ptr::null_mut(),
    samples: 0,
    alloc_bytes: 0,
    live_samples: 0,
    live_bytes: 0,
    peak_bytes: 0,
    peak_dumped: 0,
    overflowed: 0,
});

/// Records of sampled blocks freed since the lock was last taken, linked
/// through `next_free`; pushed without the lock ([`defer_remove`]), taken
/// all at once under it ([`Table::settle`]).
static FREED: AtomicPtr<Record> = AtomicPtr::new(ptr::null_mut());

/// The block of live record `r` was freed: its weight leaves the live
/// counts the next time the table's lock is taken.
///
/// # Safety
/// `r` is a live record [`Table::add`] returned, not removed since.
pub(crate) unsafe fn defer_remove(r: *mut Record) {
    let mut head = FREED.load(Relaxed);
    loop {
        // SAFETY: the record is ours until the push below publishes it
        // (contract).
        unsafe { (*r).next_free = head };
        match FREED.compare_exchange_weak(head, r, Release, Relaxed) {
            Ok(_) => return,
            Err(h) => head = h,
        }
    }
}

/// FNV-1a over the frames' bytes, folded per word.
fn hash(frames: &[usize]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &f in frames {
        h ^= f as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h
}

impl Table {
    /// Counts a sample of `frames` standing for `bytes` bytes and
    /// `objects` scaled objects, live from now on; returns its record, or
    /// null if metadata memory ran out (nothing is counted then).
    pub(crate) fn add(&mut self, frames: &[usize], bytes: u64, objects: u64) -> *mut Record {
        debug_assert!(frames.len() <= STACK_WORDS);
        let r = self.take_record();
        if r.is_null() {
            return r;
        }
        let s = self.find_or_insert(frames);
        if s.is_null() {
            // SAFETY: r came off the free list and is ours.
            unsafe { self.put_record(r) };
            return ptr::null_mut();
        }
        // SAFETY: s and r are the table's, under its lock (we hold &mut).
        unsafe {
            (*s).samples += 1;
            (*s).alloc_bytes += bytes;
            (*s).alloc_objects += objects;
            (*s).live_samples += 1;
            (*s).live_bytes += bytes;
            (*s).live_objects += objects;
            *r = Record {
                stack: s,
                bytes,
                objects,
                next_free: ptr::null_mut(),
            };
        }
        self.samples += 1;
        self.alloc_bytes += bytes;
        self.live_samples += 1;
        self.live_bytes += bytes;
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        r
    }

    /// Takes the weight of every record freed since the lock was last
    /// taken ([`defer_remove`]) out of the live counts. Every holder of
    /// the lock calls it first, so the counts it reads or changes are
    /// those of now.
    pub(crate) fn settle(&mut self) {
        if FREED.load(Relaxed).is_null() {
            return;
        }
        let mut r = FREED.swap(ptr::null_mut(), Acquire);
        while !r.is_null() {
            // SAFETY: records on FREED are live records whose blocks were
            // freed, each pushed once; the swap made them ours.
            unsafe {
                let next = (*r).next_free;
                self.remove(r);
                r = next;
            }
        }
    }

    /// The sampled block of record `r` was freed: its weight leaves the
    /// live counts, and the record is free again.
    ///
    /// # Safety
    /// `r` is a live record [`add`](Self::add) returned, not removed since.
    pub(crate) unsafe fn remove(&mut self, r: *mut Record) {
        // SAFETY: a live record names its stack (contract).
        unsafe {
            let s = (*r).stack;
            (*s).live_samples -= 1;
            (*s).live_bytes -= (*r).bytes;
            (*s).live_objects -= (*r).objects;
            self.live_samples -= 1;
            self.live_bytes -= (*r).bytes;
            self.put_record(r);
        }
    }

    /// Calls `f` on every stack, newest first.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Stack)) {
        let mut s = self.first;
        while !s.is_null() {
            // SAFETY: stacks on the list live forever.
            unsafe {
                f(&*s);
                s = (*s).next;
            }
        }
    }

    /// Distinct stacks (the overflow stack included, once used).
    pub(crate) fn stacks(&self) -> usize {
        self.count + usize::from(!self.overflow.is_null())
    }

    fn find_or_insert(&mut self, frames: &[usize]) -> *mut Stack {
        if self.slots.is_null() {
            let slots = meta::alloc(SLOTS * core::mem::size_of::<*mut Stack>(), 4096);
            if slots.is_null() {
                return ptr::null_mut();
            }
            self.slots = slots.cast();
        }
        let h = hash(frames);
        let mut i = h as usize & (SLOTS - 1);
        // SAFETY: slots holds SLOTS pointers (zeroed by the arena), each
        // null or a stack of the table.
        unsafe {
            loop {
                let s = *self.slots.add(i);
                if s.is_null() {
                    break;
                }
                if (*s).hash == h && (*s).frames() == frames {
                    return s;
                }
                i = (i + 1) & (SLOTS - 1);
            }
            if self.count >= MAX_STACKS {
                self.overflowed += 1;
                return self.overflow_stack();
            }
            let s = self.new_stack(h, frames);
            if !s.is_null() {
                *self.slots.add(i) = s;
                self.count += 1;
            }
            s
        }
    }

    fn overflow_stack(&mut self) -> *mut Stack {
        if self.overflow.is_null() {
            self.overflow = self.new_stack(0, &[]);
        }
        self.overflow
    }

    /// A new stack of `frames`, linked first; null if memory ran out.
    fn new_stack(&mut self, h: u64, frames: &[usize]) -> *mut Stack {
        let bytes = core::mem::size_of::<Stack>() + core::mem::size_of_val(frames);
        let s = meta::alloc(bytes, core::mem::align_of::<Stack>()).cast::<Stack>();
        if s.is_null() {
            return s;
        }
        // SAFETY: the arena gave `bytes` bytes: the stack, then its frames.
        unsafe {
            let f = s.add(1).cast::<usize>();
            ptr::copy_nonoverlapping(frames.as_ptr(), f, frames.len());
            s.write(Stack {
                hash: h,
                next: self.first,
                frames: f,
                nframes: frames.len(),
                samples: 0,
                alloc_bytes: 0,
                alloc_objects: 0,
                live_samples: 0,
                live_bytes: 0,
                live_objects: 0,
            });
        }
        self.first = s;
        s
    }

    fn take_record(&mut self) -> *mut Record {
        if self.free.is_null() {
            let size = core::mem::size_of::<Record>();
            let chunk = meta::alloc(size * RECORDS_PER_CHUNK, core::mem::align_of::<Record>());
            if chunk.is_null() {
                return ptr::null_mut();
            }
            for i in 0..RECORDS_PER_CHUNK {
                // SAFETY: the chunk holds RECORDS_PER_CHUNK records.
                unsafe { self.put_record(chunk.cast::<Record>().add(i)) };
            }
        }
        let r = self.free;
        // SAFETY: a record on the free list is the table's.
        self.free = unsafe { (*r).next_free };
        r
    }

    /// # Safety
    /// `r` is a record of the table that nothing uses.
    unsafe fn put_record(&mut self, r: *mut Record) {
        // SAFETY: forwarded contract.
        unsafe { (*r).next_free = self.free };
        self.free = r;
    }
}

/// Takes the table's lock before fork.
pub(crate) fn lock_for_fork() {
    TABLE.lock.lock();
}

/// Releases (parent) or resets (child) the lock [`lock_for_fork`] took.
///
/// # Safety
/// Only right after fork, having called `lock_for_fork` in this thread.
pub(crate) unsafe fn unlock_after_fork(child: bool) {
    // SAFETY: held since lock_for_fork in this thread.
    unsafe {
        if child {
            TABLE.lock.force_unlock();
        } else {
            TABLE.lock.unlock();
        }
    }
}
