//! A slab that holds sampled objects (the heap profile's,
//! `runtime/sampled.rs`): their addresses and records, and the mark that
//! sends every free of the slab's objects to the slow path while it holds
//! one.
//!
//! A sampled small object is served from its bin like any other: handed a
//! block from anywhere else, a producer/consumer pair of threads on two
//! CPUs ran 6–22% slower (xmalloc-test; `docs/heap-profile.md`), far
//! beyond the sample's own work. Its free must then be found without an
//! instruction more on the free fast path. The mark does it with one
//! field: the slab's `reserved` (objects carved) is set to zero, where it
//! is kept apart ([`REAL_OFFSET`]) — the fast path's object check
//! (`index < reserved`) and Rust's sized free (`reserved != 0`) then fail
//! for every object of the slab, and the slow path finds the mark. A
//! slab with no object carved (the only other `reserved` of zero) holds
//! nothing to free.
//!
//! The slab's tail descriptors hold the samples, one each ([`SLOTS`]):
//! the object's address and its record, in words no other view of a
//! slab tail uses (the object check's bytes 56..63 stay zero); the first
//! tail's third word holds the kept count and, above it, which slots are
//! taken ([`HELD_SHIFT`]), so a free reads the slots in use only — one
//! line for a slab with one sample. A free compares its address with
//! them without a lock (a sampled object is published by its slot before
//! the program has it, and its slot is cleared before it is freed, so no
//! other object matches); the rest —
//! filling a slot, emptying one, marking and unmarking, and the owner's
//! carving while marked — happens under [`MARKS`], a leaf lock taken once
//! per sample and once per sampled object's free.
//!
//! Invariants: a slab is marked (`reserved` zero and the kept word
//! non-zero) exactly while one of its slots holds an address, and a
//! slot's bit is set exactly while it holds one; a slot's
//! address is a live object of the slab, handed out; the slots and the
//! kept count are zero in every slab not marked.

use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::page::{Page, TAIL_WORDS_OFFSET};
use crate::sync::Locked;

use super::classes::{self, CLASS_INFO};
use super::slab::Slab;

/// Samples a slab holds at once: one per tail descriptor.
pub(crate) const SLOTS: usize = classes::SLAB_PAGES - 1;
/// A slot's object address: the tail descriptor's first word of three
/// (zeroed by `slab::init`).
const ADDR_OFFSET: usize = TAIL_WORDS_OFFSET;
/// A slot's record: the second.
const RECORD_OFFSET: usize = TAIL_WORDS_OFFSET + 8;
/// The first tail's third: `reserved` while the slab is marked (low 16
/// bits), and a bit for each slot taken above ([`HELD_SHIFT`]); zero
/// while it is not.
const REAL_OFFSET: usize = TAIL_WORDS_OFFSET + 16;
/// Where the bits of the slots taken start in the kept word (slot `i`'s
/// is bit `HELD_SHIFT + i - 1`).
const HELD_SHIFT: u32 = 16;
/// The kept count's bits of the kept word.
const KEPT_MASK: usize = (1 << HELD_SHIFT) - 1;

/// Marking, unmarking, slots filled and emptied, carving while marked.
pub(crate) static MARKS: Locked<()> = Locked::new(());

/// Word `offset` of the `i`-th tail descriptor (1-based) of slab `s`.
///
/// # Safety
/// `s` is a live slab; `1 <= i <= SLOTS`.
unsafe fn tail_word<'a>(s: *const Slab, i: usize, offset: usize) -> &'a AtomicUsize {
    debug_assert!((1..=SLOTS).contains(&i));
    // SAFETY: a slab's descriptors are consecutive in its section's
    // metadata (a slab never crosses a section), mapped for the slab's
    // life; the word is aligned and inside the tail's, and every access to
    // these words is atomic.
    unsafe {
        let t = s.cast::<Page>().add(i).cast_mut();
        debug_assert_eq!(
            t,
            crate::section::desc_of(Slab::base(s) + i * crate::geometry::PAGE_SIZE)
        );
        AtomicUsize::from_ptr(t.cast::<u8>().add(offset).cast::<usize>())
    }
}

/// Whether slab `s` is marked: it holds a sampled object.
///
/// # Safety
/// `s` is a live slab.
#[inline]
pub(crate) unsafe fn is_marked(s: *const Slab) -> bool {
    // SAFETY: forwarded contract.
    unsafe { tail_word(s, 1, REAL_OFFSET).load(Acquire) != 0 }
}

/// The objects carved from slab `s` — its `reserved`, or the count kept
/// while it is marked. The owner's reading, inline on its refill: a
/// `reserved` of zero (a new slab, or a marked one) looks further.
///
/// # Safety
/// `s` is a live slab.
#[inline(always)]
pub(crate) unsafe fn reserved(s: *const Slab) -> u16 {
    // SAFETY: forwarded contract.
    unsafe {
        let r = load_reserved(s, Relaxed);
        if r != 0 {
            return r;
        }
        reserved_kept(s)
    }
}

/// [`reserved`] past a zero: the kept count if the slab is marked.
/// [`unmark`] writes `reserved` before it clears the kept count, so a
/// zero in both is a slab not marked.
///
/// # Safety
/// `s` is a live slab.
#[cold]
#[inline(never)]
unsafe fn reserved_kept(s: *const Slab) -> u16 {
    // SAFETY: forwarded contract.
    unsafe {
        let kept = tail_word(s, 1, REAL_OFFSET).load(Acquire);
        if kept != 0 {
            return (kept & KEPT_MASK) as u16;
        }
        load_reserved(s, Acquire)
    }
}

/// `reserved` of slab `s`, read as the atomic it is once marks race.
///
/// # Safety
/// `s` is a live slab.
#[inline(always)]
unsafe fn load_reserved(s: *const Slab, order: core::sync::atomic::Ordering) -> u16 {
    // SAFETY: the field is an aligned u16 of a live descriptor.
    unsafe {
        core::sync::atomic::AtomicU16::from_ptr(core::ptr::addr_of!((*s).reserved).cast_mut())
            .load(order)
    }
}

/// The owner carved objects of slab `s`, now `n` in all: written where
/// the count lives (kept apart while marked).
///
/// # Safety
/// The calling thread owns slab `s`.
#[inline(always)]
pub(crate) unsafe fn set_reserved(s: *mut Slab, n: u16) {
    // SAFETY: forwarded contract. Only the owner marks, and a marked slab's
    // `reserved` is zero: one that is not zero is not marked.
    unsafe {
        if load_reserved(s, Relaxed) != 0 {
            store_reserved(s, n, Relaxed);
            return;
        }
        set_reserved_kept(s, n);
    }
}

/// [`set_reserved`] for a slab with `reserved` zero: new, or marked —
/// which another thread may unmark meanwhile, hence the lock.
///
/// # Safety
/// As [`set_reserved`].
#[cold]
#[inline(never)]
unsafe fn set_reserved_kept(s: *mut Slab, n: u16) {
    // SAFETY: forwarded contract.
    unsafe {
        if !is_marked(s) {
            store_reserved(s, n, Relaxed);
            return;
        }
        let _g = MARKS.lock();
        if is_marked(s) {
            let w = tail_word(s, 1, REAL_OFFSET);
            w.store((w.load(Relaxed) & !KEPT_MASK) | usize::from(n), Release);
        } else {
            store_reserved(s, n, Release);
        }
    }
}

/// Writes `reserved` of slab `s` as an atomic.
///
/// # Safety
/// `s` is a live slab; the caller holds MARKS or owns it.
#[inline(always)]
unsafe fn store_reserved(s: *mut Slab, n: u16, order: core::sync::atomic::Ordering) {
    // SAFETY: an aligned u16 of a live descriptor.
    unsafe {
        core::sync::atomic::AtomicU16::from_ptr(core::ptr::addr_of_mut!((*s).reserved))
            .store(n, order)
    }
}

/// The index of the object of marked-or-not slab `s` that starts at `p`,
/// if one does and it was carved: [`super::slab::object_at`] with the
/// count kept apart.
///
/// # Safety
/// `s` is a live slab and `p` lies in its pages.
pub(crate) unsafe fn object_at(s: *const Slab, p: *const u8) -> Option<usize> {
    // SAFETY: forwarded contract.
    unsafe {
        let info = CLASS_INFO[usize::from((*s).class)];
        let scaled = (p as usize as u16)
            .wrapping_mul(info.inverse)
            .wrapping_sub((Slab::base(s) as u16).wrapping_mul(info.inverse));
        classes::object_index_scaled(scaled, info.shift, reserved(s))
    }
}

/// [`object_at`] under MARKS, where no slab is marked or unmarked: the
/// last word before a free of `p` is refused. A free that read the
/// slab's count on its way in may have seen it between an unmark and the
/// next mark (both zero in turn), or, on a weakly ordered CPU, the mark's
/// zero before the kept count; here it reads them settled. (A count the
/// owner raised since counts no object the caller can hold from before.)
///
/// # Safety
/// As [`object_at`].
#[cold]
#[inline(never)]
pub(crate) unsafe fn object_at_settled(s: *const Slab, p: *const u8) -> Option<usize> {
    let _g = MARKS.lock();
    // SAFETY: forwarded contract.
    unsafe { object_at(s, p) }
}

/// The owner of slab `s` hands object `p` of it out as a sample: takes a
/// slot for it, marking the slab if it is the first. The slot's index,
/// or None when every slot is taken (the sample is served otherwise).
///
/// # Safety
/// The calling thread owns slab `s`; `p` is an object of it just taken
/// for the program, not yet handed out.
pub(crate) unsafe fn take_slot(s: *mut Slab, p: *mut u8) -> Option<usize> {
    let _g = MARKS.lock();
    // SAFETY: forwarded contract; the slots are changed under MARKS only.
    unsafe {
        let w = tail_word(s, 1, REAL_OFFSET);
        let word = w.load(Relaxed);
        let held = word >> HELD_SHIFT;
        let i = (1..=SLOTS).find(|&i| held & (1 << (i - 1)) == 0)?;
        debug_assert_eq!(tail_word(s, i, ADDR_OFFSET).load(Relaxed), 0);
        tail_word(s, i, RECORD_OFFSET).store(0, Relaxed);
        tail_word(s, i, ADDR_OFFSET).store(p as usize, Release);
        let bit = 1 << (HELD_SHIFT as usize + i - 1);
        if word == 0 {
            let n = (*s).reserved;
            debug_assert!(n != 0, "a slab handing out an object has carved it");
            w.store(usize::from(n) | bit, Release);
            store_reserved(s, 0, Release);
        } else {
            w.store(word | bit, Release);
        }
        Some(i)
    }
}

/// Slot `i` of slab `s` gets its sample's record `r`.
///
/// # Safety
/// The calling thread filled slot `i` of slab `s` ([`take_slot`]) and has
/// not handed its object out yet.
pub(crate) unsafe fn set_record(s: *mut Slab, i: usize, r: usize) {
    // SAFETY: forwarded contract.
    unsafe { tail_word(s, i, RECORD_OFFSET).store(r, Release) };
}

/// Slot `i` of slab `s`'s record (0 until set).
///
/// # Safety
/// As [`set_record`].
pub(crate) unsafe fn record(s: *mut Slab, i: usize) -> usize {
    // SAFETY: forwarded contract.
    unsafe { tail_word(s, i, RECORD_OFFSET).load(Relaxed) }
}

/// The slot of slab `s` that holds object `p`, if any (no lock: see the
/// module docs).
///
/// # Safety
/// `s` is a live slab; `p` is an object of it being freed.
pub(crate) unsafe fn slot_of(s: *const Slab, p: *const u8) -> Option<usize> {
    // SAFETY: forwarded contract.
    unsafe {
        let mut held = tail_word(s, 1, REAL_OFFSET).load(Acquire) >> HELD_SHIFT;
        while held != 0 {
            let i = held.trailing_zeros() as usize + 1;
            if tail_word(s, i, ADDR_OFFSET).load(Acquire) == p as usize {
                return Some(i);
            }
            held &= held - 1;
        }
        None
    }
}

/// Empties slot `i` of slab `s` (holding `p`), unmarking the slab if it
/// was the last; returns the slot's record.
///
/// # Safety
/// `p` is the object of slot `i`, being freed by the caller (or never
/// handed out, by the thread that filled the slot).
pub(crate) unsafe fn release_slot(s: *mut Slab, i: usize, p: *const u8) -> usize {
    let _g = MARKS.lock();
    // SAFETY: forwarded contract; under MARKS.
    unsafe {
        if tail_word(s, i, ADDR_OFFSET).load(Relaxed) != p as usize {
            // Two threads freed the sample at once (a double free, which
            // the key check reports): the first one ended it.
            return 0;
        }
        let r = tail_word(s, i, RECORD_OFFSET).load(Relaxed);
        tail_word(s, i, RECORD_OFFSET).store(0, Relaxed);
        tail_word(s, i, ADDR_OFFSET).store(0, Release);
        let w = tail_word(s, 1, REAL_OFFSET);
        let word = w.load(Relaxed) & !(1 << (HELD_SHIFT as usize + i - 1));
        if word >> HELD_SHIFT == 0 {
            unmark(s, (word & KEPT_MASK) as u16);
        } else {
            w.store(word, Release);
        }
        r
    }
}

/// Gives slab `s` its `reserved` back, `kept`: written before the kept
/// word is cleared (see [`reserved`]).
///
/// # Safety
/// Under MARKS; `s` is a marked slab whose slots are empty.
unsafe fn unmark(s: *mut Slab, kept: u16) {
    // SAFETY: forwarded contract.
    unsafe {
        debug_assert!(kept != 0);
        store_reserved(s, kept, Release);
        tail_word(s, 1, REAL_OFFSET).store(0, Release);
    }
}

/// Checks the module's invariants on live slab `s` (tests).
///
/// # Safety
/// `s` is a live slab no thread changes meanwhile.
pub(crate) unsafe fn check(s: *const Slab) {
    // SAFETY: forwarded contract.
    unsafe {
        let word = tail_word(s, 1, REAL_OFFSET).load(Relaxed);
        let held = word >> HELD_SHIFT;
        assert_eq!(held >> SLOTS, 0, "a slot bit past the slots");
        assert_eq!(
            held != 0,
            word != 0,
            "a slab marked exactly while it holds samples"
        );
        if word != 0 {
            assert_eq!((*s).reserved, 0, "a marked slab's reserved kept apart");
            assert!(word & KEPT_MASK != 0, "a marked slab without its count");
        }
        for i in 1..=SLOTS {
            let a = tail_word(s, i, ADDR_OFFSET).load(Relaxed);
            assert_eq!(
                a != 0,
                held & (1 << (i - 1)) != 0,
                "a slot's bit and its address disagree"
            );
            if a != 0 {
                assert!(
                    object_at(s, a as *const u8).is_some(),
                    "a slot off its slab's objects"
                );
            } else {
                assert_eq!(
                    tail_word(s, i, RECORD_OFFSET).load(Relaxed),
                    0,
                    "a record without its slot"
                );
            }
        }
    }
}
