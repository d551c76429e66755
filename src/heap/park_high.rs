//! How many emptied slabs a heap keeps parked: `park_high`, auto-tuned
//! by the pagesets' [`Tuner`] ([`Owned`]'s parking half; the parked lists
//! are `parked.rs`, the heap `heap.rs`).
//!
//! Emptied slabs are parked (`parked.rs`) rather than sent
//! straight back: a class that shrinks and grows again — a loop allocating
//! and freeing a few thousand objects — would otherwise pay a round trip
//! through the pageset per slab (and, when a burst of slab frees trips
//! free_high, through the zone lock). Any class can take a parked slab
//! (every slab has the same order). How much is parked is tuned the way a
//! pageset's `high` is, in bytes, under the same knobs ([`PARK_PARAMS`]):
//! `park_high` starts at PARK_HIGH_MIN; each slab given back for lack of
//! room is remembered, and each new slab the heap then has to ask for
//! grows `park_high` by its size, up to what was given back (the refill
//! half), to PARK_HIGH_MAX at most and not while the zone is below its
//! high watermark; it decays by 1/8 a tick. free_count counts the bytes of
//! slabs emptied without a slab taken in between: with a free_high
//! threshold of `batch` or `5batch` (a slab, or five) a heap that only
//! empties slabs keeps one parked and gives the rest back, cutting
//! `park_high`; the default threshold leaves parked slabs without
//! free_high, as before the tuner was shared. With the heuristics off
//! (`base`) `park_high` stays at PARK_HIGH_MIN. The tick takes parked
//! slabs back from every heap, so an idle thread does not keep them; the
//! owner gives back what is left when it sees the tick on its slow path.

use core::ptr;

use crate::geometry::PAGE_SIZE;
use crate::page_alloc::knobs::{heuristic, Knobs};
use crate::page_alloc::pcp::tuner::{OwnFreeHigh, Tuner, TunerParams};
use crate::page_alloc::Pages;
use crate::sync::bump;

use super::emptied::SWEEP_TICKS;
use super::heap::{Heap, ListsGuard, Local, Owned, PARK_HIGH_MAX, PARK_HIGH_MIN};
use super::lifetime::Lifetimes;
use crate::slab::classes::SLAB_ORDER;
use crate::slab::slab::{self, Slab};

/// Bytes of one slab: the parked slabs' batch, and what a free_high drain
/// keeps parked.
const SLAB_BYTES: usize = PAGE_SIZE << SLAB_ORDER;

/// The parked slabs' bounds and units (bytes) for the tuner.
pub const PARK_PARAMS: TunerParams = TunerParams {
    batch: SLAB_BYTES as i32,
    high_min: PARK_HIGH_MIN as i32,
    high_max: PARK_HIGH_MAX as i32,
    keep: SLAB_BYTES as i32,
    free_count_cap: 1 << 30,
    own_free_high: OwnFreeHigh::Never,
};

impl Local {
    /// Bytes of empty slabs the heap may keep parked now.
    pub fn park_high(&self) -> usize {
        self.park.high as usize
    }

    /// Bytes of slabs given back since the last tick for lack of parking
    /// room, not yet made room for.
    pub fn park_missed(&self) -> usize {
        self.park.missed as usize
    }
}

impl Owned<'_> {
    /// Parks an empty slab, or gives it back if the heap already keeps
    /// `park_high` bytes of them; a heap that only empties slabs
    /// (free_high) gives back all but one.
    ///
    /// # Safety
    /// `s` is a slab of this heap with no live object, on no list and not
    /// current.
    pub(super) unsafe fn park_or_retire(&mut self, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: forwarded contract.
        unsafe {
            self.local.lifetimes.slab_emptied((*s).class as usize);
            let k = pages.allocator().knobs();
            let bytes = (PAGE_SIZE << (*s).order) as i32;
            self.local.park.on_free(bytes, &PARK_PARAMS, &k);
            if !self.heap.parked.park(s, self.local.park_high()) {
                self.local.park.note_given_back(bytes);
                self.retire(s, pages);
            }
            let parked = self.heap.parked.bytes() as i32;
            if self.local.park.wants_free_high(parked, &PARK_PARAMS, &k) {
                self.park_free_high(pages, &k);
            }
        }
    }

    /// free_high of the parked slabs: all but the kept one go back, and
    /// `park_high` is cut.
    #[cold]
    #[inline(never)]
    fn park_free_high(&mut self, pages: &Pages<'_>, k: &Knobs) {
        let keep = self.local.park.free_high(&PARK_PARAMS, k).max(0) as usize;
        while self.heap.parked.bytes() > keep {
            let s = self.heap.parked.take();
            if s.is_null() {
                break;
            }
            // SAFETY: a parked slab: empty, of this heap, off every list.
            unsafe { self.retire(s, pages) };
        }
    }

    /// A parked slab for a class that needs one, or null; taking it is an
    /// allocation for the tuner (free_count).
    pub(super) fn take_parked(&mut self, pages: &Pages<'_>) -> *mut Slab {
        let s = self.heap.parked.take();
        if !s.is_null() {
            let k = pages.allocator().knobs();
            self.local.park.on_alloc(SLAB_BYTES as i32, &k);
        }
        s
    }

    /// Gives an empty slab back to the page allocator.
    ///
    /// # Safety
    /// `s` is a slab of this heap with no live object, on no list and not
    /// current.
    pub(super) unsafe fn retire(&mut self, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: forwarded contract; the block goes back whole.
        unsafe {
            let order = u32::from((*s).order);
            pages.free(slab::fini(s), order);
        }
        bump(&self.heap.slabs_retired, 1);
    }

    /// A new slab of `bytes` is needed: if slabs were given back for lack
    /// of parking room since the last tick, make room for this one more
    /// (the refill half of the `high` auto-tuning, applied to parked
    /// slabs).
    pub(super) fn grow_park_high(&mut self, bytes: usize, pages: &Pages<'_>) {
        let k = pages.allocator().knobs();
        let t = &mut self.local.park;
        t.clamp_high(&PARK_PARAMS, &k);
        t.on_alloc(bytes as i32, &k);
        if t.missed > 0 {
            let below = k.heuristics.has(heuristic::BELOW_HIGH) && pages.below_high();
            t.grow_after_give_back(bytes as i32, &PARK_PARAMS, below, &k);
        }
    }

    /// What the heap does once per tick (`epoch`), when its owner next
    /// takes the slow path: the bins and the parked slabs go back, slabs
    /// that got remote frees while full come back from the delayed stack,
    /// every [`SWEEP_TICKS`] ticks the lists are swept for slabs whose
    /// every object is free (`emptied.rs`), and `park_high` loses 1/8,
    /// down to PARK_HIGH_MIN.
    pub(super) fn on_tick(&mut self, g: &mut ListsGuard<'_>, epoch: u32, pages: &Pages<'_>) {
        self.flush_bins_in(g, pages);
        self.process_delayed(g, pages);
        if epoch.wrapping_sub(self.local.swept_at) >= SWEEP_TICKS {
            self.local.swept_at = epoch;
            self.sweep(g, pages);
        }
        self.release_parked_owned(pages);
        let l = &mut *self.local;
        l.park.decay(&PARK_PARAMS, &pages.allocator().knobs());
        l.lifetimes.decay();
    }

    /// Gives back parked slabs until at most `limit` bytes stay parked
    /// (all of them with 0, as [`release_parked_owned`](Self::release_parked_owned)).
    pub(super) fn release_parked_down_to(&mut self, limit: usize, pages: &Pages<'_>) {
        if limit == 0 {
            return self.release_parked_owned(pages);
        }
        while self.heap.parked.bytes() > limit {
            let s = self.heap.parked.take();
            if s.is_null() {
                break;
            }
            // SAFETY: a parked slab: empty, of this heap, off every list.
            unsafe { self.retire(s, pages) };
        }
    }

    /// Parks the empty slab `s` if at most `limit` bytes are then parked,
    /// else gives it back (`limit` 0: always back).
    ///
    /// # Safety
    /// As [`retire`](Self::retire).
    pub(super) unsafe fn park_within_or_retire(
        &mut self,
        s: *mut Slab,
        limit: usize,
        pages: &Pages<'_>,
    ) {
        // SAFETY: forwarded contract (an empty slab of this heap, on no
        // list and not current).
        unsafe {
            if limit == 0 || !self.heap.parked.park(s, limit) {
                self.retire(s, pages);
            }
        }
    }

    /// Gives every parked slab back, waiting for the parking lock.
    pub(super) fn release_parked_owned(&mut self, pages: &Pages<'_>) {
        let mut s = self.heap.parked.take_all(true);
        while !s.is_null() {
            // SAFETY: take_all handed us empty slabs of this heap, off every
            // list.
            unsafe {
                let next = (*s).next;
                (*s).next = ptr::null_mut();
                self.retire(s, pages);
                s = next;
            }
        }
    }

    /// Forgets tuning state before the heap goes to another thread: the
    /// thread that adopts it starts its own.
    pub fn reset_tuning(&mut self) {
        self.local.park = Tuner::new(PARK_HIGH_MIN as i32);
        self.local.lifetimes = Lifetimes::new();
        // SAFETY: this handle is the heap's owner.
        unsafe { self.heap.block_bins.reset_tuning() };
    }
}

impl Heap {
    /// Gives back the parked slabs if the parking lock is free right now
    /// (anyone may: the tick, an allocation at the memory limit) straight
    /// to the zone. Returns how many slabs went back.
    pub fn release_parked(&self, pages: &Pages<'_>) -> usize {
        let mut s = self.parked.take_all(false);
        let mut n = 0;
        while !s.is_null() {
            // SAFETY: take_all handed us empty slabs of this heap, off
            // every list; each goes back whole.
            unsafe {
                let next = (*s).next;
                (*s).next = ptr::null_mut();
                let order = u32::from((*s).order);
                pages.free_to_zone(slab::fini(s), order);
                s = next;
            }
            bump(&self.slabs_retired, 1);
            n += 1;
        }
        n
    }
}
