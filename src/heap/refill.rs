//! A heap's slow paths between its bins and its slabs ([`Owned`]'s refill
//! half; the heap itself is in `heap.rs`): refilling an empty bin from the
//! current slab, then a partial one, a parked one or a new one; giving a
//! full bin's objects back to their slabs (`flush`); taking back slabs
//! that got remote frees while full (the delayed stack); and `collect`,
//! which gives every empty slab back. An emptied slab goes to
//! `park_or_retire` (`park_high.rs`); slabs a remote free left with every
//! object free come back through the emptied stack (`emptied.rs`).
//!
//! Each public entry takes the heap's lists ([`Heap::lock_lists`]) for
//! its whole run and hands the guard down; the helpers below take it as a
//! parameter, so none can run without it and none takes it twice.

use core::ptr;
use core::sync::atomic::Ordering::*;

use crate::geometry::PAGE_SIZE;
use crate::page::{MigrateType, PageKind};
use crate::page_alloc::Pages;
use crate::section::{desc_of, pageblock_mt};
use crate::sync::bump;

use super::heap::{empty_slab, Heap, ListsGuard, Owned};
use crate::slab::classes::{CLASS_SIZE, NR_CLASSES, SLAB_ORDER};
use crate::slab::marks;
use crate::slab::object::FreeObject;
use crate::slab::remote_list;
use crate::slab::slab::{self, Slab};

impl Owned<'_> {
    /// Hands the remote frees waiting in batches to their slabs.
    #[inline]
    pub fn flush_remote(&mut self) {
        if !self.local.remote.is_empty() {
            // SAFETY: the batch is ours (owner handle).
            unsafe { self.local.remote.flush(Heap::notify_owner) };
        }
    }

    /// Allocates an object of `class`: the fast path, then the slow path.
    /// Null when out of memory (tests and the replay, which drive heaps as
    /// values).
    pub fn alloc(&mut self, class: usize, pages: &Pages<'_>) -> *mut u8 {
        // SAFETY: the bin is ours and holds free objects.
        let p = unsafe { self.local.bins.pop(class) };
        if p.is_null() {
            self.alloc_slow(class, pages)
        } else {
            p
        }
    }

    /// The allocation slow path: the bin of `class` is empty. Refills it
    /// and pops. Null when out of memory.
    pub fn alloc_slow(&mut self, class: usize, pages: &Pages<'_>) -> *mut u8 {
        // Out of pop credit with objects on the bin still (pushed while
        // the heap profile sampled: see `bin.rs`): they go first.
        if self.local.bins.recredit(class) {
            // SAFETY: the bin holds objects of ours, and credit for them.
            return unsafe { self.local.bins.pop(class) };
        }
        self.flush_remote();
        let heap = self.heap;
        // SAFETY: this handle is the heap's owner, and takes no guard
        // elsewhere.
        let mut g = unsafe { heap.lock_lists() };
        let epoch = pages.zone().epoch();
        if epoch != self.local.epoch_seen {
            self.local.epoch_seen = epoch;
            heap.slow_epoch.store(epoch, Relaxed);
            self.on_tick(&mut g, epoch, pages);
        }
        self.take_emptied(&mut g, pages);
        if !self.refill(&mut g, class, pages) {
            return ptr::null_mut();
        }
        // SAFETY: refill put objects of ours on the bin.
        unsafe { self.local.bins.pop(class) }
    }

    /// Refills the empty bin of `class` with every free object of the
    /// current slab — its own list, else its remote list, else a page of
    /// its untouched tail — moving to a partial slab, a parked one or a new
    /// one as each runs dry. False when out of memory.
    fn refill(&mut self, g: &mut ListsGuard<'_>, class: usize, pages: &Pages<'_>) -> bool {
        // SAFETY: every slab reached is owned by this heap.
        unsafe {
            loop {
                let cur = g.lists().current[class];
                if cur != empty_slab() {
                    // Objects freed before (own or remote list), or fresh
                    // ones from the untouched tail.
                    let mut fresh = false;
                    if (*cur).free.is_null() {
                        let n = remote_list::collect_thread_free(cur);
                        self.note_collected(cur, n);
                        if n == 0 {
                            fresh = match slab::extend(cur, marks::reserved(cur)) {
                                Some(n) => {
                                    marks::set_reserved(cur, n);
                                    true
                                }
                                None => false,
                            };
                            if !fresh {
                                if !remote_list::mark_full(cur) {
                                    continue; // remote frees arrived meanwhile
                                }
                                g.lists().current[class] = empty_slab();
                            }
                        }
                    }
                    if g.lists().current[class] == cur {
                        let (head, n) = slab::take_all(cur, marks::reserved(cur));
                        // The objects taken again: this slab's, unless
                        // fresh, and every one the bin had pushed since
                        // its last refill (it is empty now).
                        let pushed = self.local.bins.take_pushes(class);
                        let reused = if fresh {
                            pushed
                        } else {
                            pushed.saturating_add(n)
                        };
                        self.local.lifetimes.objects_reused(class, reused);
                        bump(
                            &self.heap.small_taken,
                            u64::from(n) * u64::from(CLASS_SIZE[class]),
                        );
                        self.local.bins.fill(class, head, n);
                        return true;
                    }
                }
                self.process_delayed(g, pages);
                let next = g.lists().partial[class].pop_front();
                if !next.is_null() {
                    g.lists().current[class] = next;
                    continue;
                }
                let order = SLAB_ORDER;
                let grouping = pages.zone().group_by_lifetime();
                let mt = self.local.lifetimes.migratetype(class, grouping);
                let parked = self.take_parked(pages);
                if !parked.is_null() {
                    // A long-lived class takes no parked slab of another
                    // pageblock type: its objects would pin a pageblock of
                    // churned ones. The slab goes back instead. (A short-
                    // lived class takes any: its objects leave again.)
                    let pins = grouping
                        && mt == MigrateType::Unmovable
                        && pageblock_mt(Slab::base(parked)) != MigrateType::Unmovable;
                    if !pins {
                        self.local.lifetimes.slab_made(class);
                        if (*parked).class as usize != class {
                            slab::reinit(parked, class);
                        }
                        g.lists().current[class] = parked;
                        continue;
                    }
                    self.retire(parked, pages);
                }
                self.grow_park_high(PAGE_SIZE << order, pages);
                let head = pages.alloc(order, mt);
                if head.is_null() {
                    return false;
                }
                self.local.lifetimes.slab_made(class);
                let s = slab::init(head, class, self.owner_tag());
                bump(&self.heap.slabs_created, 1);
                if mt == MigrateType::Reclaimable {
                    bump(&self.heap.slabs_short_lived, 1);
                }
                g.lists().current[class] = s;
            }
        }
    }

    /// Gives the objects of the bin of `class` past its first `keep` back
    /// to their slabs.
    pub fn flush(&mut self, class: usize, keep: u32, pages: &Pages<'_>) {
        let heap = self.heap;
        // SAFETY: the owner, without a guard yet.
        let mut g = unsafe { heap.lock_lists() };
        self.flush_in(&mut g, class, keep, pages);
    }

    fn flush_in(&mut self, g: &mut ListsGuard<'_>, class: usize, keep: u32, pages: &Pages<'_>) {
        // SAFETY: the bin's list is well formed and ours.
        let (rest, n) = unsafe { self.local.bins.split_after(class, keep) };
        // SAFETY: the objects split off are free objects we now own.
        unsafe { self.give_back_all(g, rest, n, pages) };
    }

    /// Gives every bin back to the slabs.
    pub fn flush_bins(&mut self, pages: &Pages<'_>) {
        let heap = self.heap;
        // SAFETY: the owner, without a guard yet.
        let mut g = unsafe { heap.lock_lists() };
        self.flush_bins_in(&mut g, pages);
    }

    pub(super) fn flush_bins_in(&mut self, g: &mut ListsGuard<'_>, pages: &Pages<'_>) {
        for class in 0..NR_CLASSES {
            if self.local.bins.count(class) > 0 {
                self.flush_in(g, class, 0, pages);
            }
        }
    }

    /// Gives a list of `n` free objects of this heap's slabs (linked
    /// through word 0, carrying the free key) back onto their slabs' own
    /// lists. A list longer than `n` held an object twice (a block freed
    /// twice after its free key was overwritten): reported and aborted,
    /// never walked round and round.
    ///
    /// # Safety
    /// The objects are free objects of this heap's slabs that the caller
    /// owns, each counted as in use by its slab.
    unsafe fn give_back_all(
        &mut self,
        g: &mut ListsGuard<'_>,
        mut p: *mut u8,
        n: u32,
        pages: &Pages<'_>,
    ) {
        // SAFETY: each object is free and ours (contract); its page
        // descriptor names its live slab.
        unsafe {
            for _ in 0..n {
                let next = FreeObject::at(p).next();
                let s = (*desc_of(p as usize)).head.load(Relaxed).cast::<Slab>();
                debug_assert_eq!((*s).owner.load(Relaxed), self.owner_tag());
                bump(&self.heap.returned_objects[usize::from((*s).class)], 1);
                if slab::give_back(s, p) {
                    self.given_back(g, s, pages);
                }
                p = next;
            }
            if !p.is_null() {
                crate::alert::fatal("free(): free list corrupted (a block freed twice?) at", p);
            }
        }
    }

    /// Slab `s` of this heap just got an object back from the free path
    /// (`slab::give_back` said so): every object of it is free, or it was
    /// full. It comes back from full onto the partial list, and a slab
    /// with every object free that is not current is parked or given back.
    ///
    /// The free path runs without the heap's lists, so another thread may
    /// have given `s` back meanwhile (every object free, the owner idle:
    /// `emptied.rs`): a descriptor no longer a slab of this heap's is left
    /// alone. (Not one this heap made again: only its owner makes slabs,
    /// and it came here straight from the free.)
    ///
    /// # Safety
    /// `s` was a slab of this heap when its free-path call returned, and
    /// the caller is the heap's owner.
    pub unsafe fn slab_given_back(&mut self, s: *mut Slab, pages: &Pages<'_>) {
        let heap = self.heap;
        // SAFETY: the owner, without a guard yet; descriptors stay
        // readable, `kind` and `owner` are atomics.
        unsafe {
            let mut g = heap.lock_lists();
            if (*s).kind.load(Acquire) != PageKind::Slab as u8
                || (*s).owner.load(Relaxed) != self.owner_tag()
            {
                return;
            }
            self.given_back(&mut g, s, pages);
        }
    }

    /// [`slab_given_back`](Self::slab_given_back) once `s` is known to be
    /// this heap's.
    ///
    /// # Safety
    /// This heap owns `s`.
    unsafe fn given_back(&mut self, g: &mut ListsGuard<'_>, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: owner-only access to s, under the lists.
        unsafe {
            let class = (*s).class as usize;
            if slab::in_full(s) {
                // Back from full, unless a remote free already queued it on
                // the delayed stack (then it comes back from there).
                if remote_list::unmark_full(s) {
                    if slab::used(s) == 0 && !remote_list::is_queued(s) {
                        self.park_or_retire(s, pages);
                    } else {
                        g.lists().partial[class].push_front(s);
                    }
                }
                return;
            }
            if g.lists().current[class] == s {
                return;
            }
            // Every object free: those on the remote list join the own.
            self.note_collected(s, remote_list::collect_thread_free(s));
            if slab::used(s) == 0 && !remote_list::is_queued(s) {
                g.lists().partial[class].remove(s);
                self.park_or_retire(s, pages);
            }
        }
    }

    /// Moves slabs that got remote frees while full back to the partial
    /// lists (or, every object free, to `park_or_retire`).
    pub(super) fn process_delayed(&mut self, g: &mut ListsGuard<'_>, pages: &Pages<'_>) {
        if self.heap.delayed.load(Relaxed).is_null() {
            return;
        }
        let mut s = self.heap.delayed.swap(ptr::null_mut(), Acquire);
        // SAFETY: the stack was filled by remote freers with full slabs of
        // this heap; once swapped out it is ours.
        unsafe {
            while !s.is_null() {
                let next = (*s).next;
                (*s).next = ptr::null_mut();
                slab::set_in_full(s, false);
                self.note_collected(s, remote_list::collect_thread_free(s));
                if slab::used(s) == 0 && !remote_list::is_queued(s) {
                    self.park_or_retire(s, pages);
                } else {
                    g.lists().partial[(*s).class as usize].push_front(s);
                }
                s = next;
            }
        }
    }

    /// Collects remote frees on every slab and gives every empty slab
    /// back, the current ones included, and spills the large bins (thread
    /// exit, trim, reclaim, the sweep of abandoned heaps). Returns how
    /// many slabs went back. (A slab a remote free queued meanwhile stays,
    /// for the next look at the emptied stack.)
    pub fn collect(&mut self, pages: &Pages<'_>) -> usize {
        self.collect_parking(pages, 0)
    }

    /// [`collect`](Self::collect), but up to `park_limit` bytes of the
    /// empty slabs stay parked (`parked.rs`) for the thread that adopts
    /// this heap: a thread's exit (`runtime/thread.rs` says when).
    pub fn collect_parking(&mut self, pages: &Pages<'_>, park_limit: usize) -> usize {
        self.flush_remote();
        let heap = self.heap;
        // SAFETY: the owner, without a guard yet.
        let mut g = unsafe { heap.lock_lists() };
        let before = heap.slabs_retired.load(Relaxed);
        self.flush_bins_in(&mut g, pages);
        // SAFETY: this handle is the heap's owner.
        unsafe { heap.block_bins.drain(pages) };
        self.take_emptied(&mut g, pages);
        self.process_delayed(&mut g, pages);
        self.release_parked_down_to(park_limit, pages);
        // SAFETY: every slab reached is owned by this heap.
        unsafe {
            for class in 0..NR_CLASSES {
                let cur = g.lists().current[class];
                if cur != empty_slab() {
                    self.note_collected(cur, remote_list::collect_thread_free(cur));
                    if slab::used(cur) == 0 && !remote_list::is_queued(cur) {
                        g.lists().current[class] = empty_slab();
                        self.park_within_or_retire(cur, park_limit, pages);
                    }
                }
                let mut s = g.lists().partial[class].first();
                while !s.is_null() {
                    let next = (*s).next;
                    self.note_collected(s, remote_list::collect_thread_free(s));
                    if slab::used(s) == 0 && !remote_list::is_queued(s) {
                        g.lists().partial[class].remove(s);
                        self.park_within_or_retire(s, park_limit, pages);
                    }
                    s = next;
                }
            }
        }
        (heap.slabs_retired.load(Relaxed) - before) as usize
    }
}
