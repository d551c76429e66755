//! How many emptied slabs a heap keeps parked: `park_high`, auto-tuned
//! ([`Owned`]'s parking half; the parked lists are `parked.rs`, the heap
//! `heap.rs`).
//!
//! Emptied slabs are parked (`parked.rs`) rather than sent
//! straight back: a class that shrinks and grows again — a loop allocating
//! and freeing a few thousand objects — would otherwise pay a round trip
//! through the pageset per slab (and, when a burst of slab frees trips
//! free_high, through the zone lock). Any class can take a parked slab
//! (every slab has the same order). How much is parked is tuned the way a pageset's
//! `high` is: `park_high` starts at PARK_HIGH_MIN; each slab given back for
//! lack of room is remembered, and each new slab the heap then has to ask
//! for grows `park_high` by its size, up to what was given back (the refill
//! half), to PARK_HIGH_MAX at most and not while the zone is below its high
//! watermark; it decays by 1/8 a tick. The tick takes parked slabs back
//! from every heap, so an idle thread does not keep them; the owner gives
//! back what is left when it sees the tick on its slow path.

use core::ptr;

use crate::geometry::PAGE_SIZE;
use crate::page_alloc::Pages;
use crate::sync::bump;

use super::emptied::SWEEP_TICKS;
use super::heap::{Heap, ListsGuard, Owned, PARK_HIGH_MAX, PARK_HIGH_MIN};
use super::lifetime::Lifetimes;
use crate::slab::slab::{self, Slab};

impl Owned<'_> {
    /// Parks an empty slab, or gives it back if the heap already keeps
    /// `park_high` bytes of them.
    ///
    /// # Safety
    /// `s` is a slab of this heap with no live object, on no list and not
    /// current.
    pub(super) unsafe fn park_or_retire(&mut self, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: forwarded contract.
        unsafe {
            self.local.lifetimes.slab_emptied((*s).class as usize);
            if !self.heap.parked.park(s, self.local.park_high) {
                self.local.park_missed += PAGE_SIZE << (*s).order;
                self.retire(s, pages);
            }
        }
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
        let l = &mut *self.local;
        if l.park_missed > 0 && !pages.below_high() {
            let grow = bytes.min(l.park_missed);
            l.park_missed -= grow;
            l.park_high = (l.park_high + grow).min(PARK_HIGH_MAX);
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
        l.park_high = (l.park_high - l.park_high / 8).max(PARK_HIGH_MIN);
        l.park_missed = 0;
        l.lifetimes.decay();
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
        self.local.park_high = PARK_HIGH_MIN;
        self.local.park_missed = 0;
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
