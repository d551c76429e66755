//! Slabs whose every object is free, given back without waiting for their
//! owner to refill their class.
//!
//! A slab belongs to one heap for its life, and only its owner used to
//! take its remote list back — when it refilled that class. A slab whose
//! objects were freed half by the owner, half by another thread, in a
//! class the owner never used again, stayed with the owner for good: a
//! program doing that ten times over with 64 MiB of a new class each time
//! grew to 800 MiB with nothing live (glibc stays at 129 MiB), and failed
//! under a 512 MiB limit.
//!
//! **Who notices.** Whoever frees the last live object of a slab: the
//! owner's free that finds its bin full gives the object straight to the
//! slab (`slab::give_back`) and sees `used` come down to the remote list's
//! count, so it takes the slow path ([`Owned::slab_given_back`]); a remote
//! free whose push leaves `used` objects on the remote list sets QUEUED in
//! the same CAS and puts the slab on its owner's *emptied* stack
//! (`remote_list::push_remote`, `Heap::notify_emptied`) — mimalloc's
//! delayed free for full pages, done also for emptied ones. The remote
//! freer reads `used` before its CAS (after it, the slab could be given
//! back under it) and the owner reads the remote list before it stores
//! `used`, so the two sides can both miss when the owner's last own free
//! and another thread's last push cross: the sweep below finds those.
//!
//! **Who gives it back.** The owner takes the emptied stack on its next
//! slow path, of any class ([`Owned::take_emptied`]): each slab whose every
//! object is still free leaves its list for `park_or_retire`. An owner
//! that takes no slow path — blocked for good, or busy in its fast paths —
//! is not waited for: the tick (for a heap whose owner took no allocation
//! slow path in the last tick, and has something on its stacks), a trim
//! and a reclaim (every heap) take the heap's lists from the other side of
//! its `slow` lock ([`Heap::collect_emptied`]) and give such slabs back
//! themselves. While they hold the lists the owner is out of its slow
//! paths, and its fast paths cannot reach a slab whose every object is
//! free: none is live or on a bin (a bin's objects count in `used`), so
//! no free can name it and no allocation can pop one of its objects. The
//! collector touches nothing else of the owner's: not its bins, its chains
//! or its tuning (so it retires rather than parks, and counts no lifetime);
//! full slabs waiting on the delayed stack it moves to the partial list
//! (a full slab's flag is an atomic the owner's free reads), collecting
//! their remote lists only when every object is free.
//!
//! **The sweep.** Every [`SWEEP_TICKS`] ticks the owner's first slow path
//! walks its current and partial slabs for ones whose every object is
//! free (the crossed frees above); the tick does the same for idle heaps
//! that hold slabs, and a trim or a reclaim for every heap.
//!
//! The others: mimalloc 2 has the owner alone collect its pages
//! (`mi_heap_collect` runs on the owning thread; pages of a live idle
//! thread stay); mimalloc 3 lets the freeing thread claim an *abandoned*
//! page by a bit of its thread-free word and free it once all free (our
//! QUEUED is the same claim, for a live owner's slab); snmalloc sends
//! remote frees as messages its owner processes on its own slow paths;
//! jemalloc has no owner for a slab — the bin's lock lets any thread's
//! flush give an emptied slab back, at a lock per batch.

use core::ptr;
use core::sync::atomic::Ordering::*;

use crate::page_alloc::Pages;

use super::block_bins::FORK_GATE;
use super::heap::{empty_slab, Heap, ListsGuard, Owned};
use crate::slab::classes::NR_CLASSES;
use crate::slab::remote_list;
use crate::slab::slab::{self, Slab};

/// Ticks between sweeps of a heap's lists for slabs whose every object is
/// free (see the module docs).
pub const SWEEP_TICKS: u32 = 8;

impl Owned<'_> {
    /// Takes the emptied stack: each slab on it whose every object is
    /// still free (it may have been refilled from since it was pushed)
    /// leaves its list for `park_or_retire`.
    pub(super) fn take_emptied(&mut self, g: &mut ListsGuard<'_>, pages: &Pages<'_>) {
        if self.heap.emptied.load(Relaxed).is_null() {
            return;
        }
        let mut s = self.heap.emptied.swap(ptr::null_mut(), Acquire);
        // SAFETY: the stack holds QUEUED slabs of this heap, which nobody
        // gave back (see `remote_list.rs`); taken off it, they are ours to look at
        // under the lists.
        unsafe {
            while !s.is_null() {
                let next = *remote_list::emptied_link(s);
                remote_list::clear_queued(s);
                // A full slab comes back through the delayed stack.
                if !slab::in_full(s) && remote_list::all_free(s) {
                    self.release_all_free(g, s, pages);
                }
                s = next;
            }
        }
    }

    /// Walks the current and partial slabs for ones whose every object is
    /// free and not queued (found on no stack: see the module docs), and
    /// gives them to `park_or_retire`.
    pub(super) fn sweep(&mut self, g: &mut ListsGuard<'_>, pages: &Pages<'_>) {
        // SAFETY: every slab reached is this heap's, under its lists.
        unsafe {
            for class in 0..NR_CLASSES {
                let cur = g.lists().current[class];
                if cur != empty_slab() && !remote_list::is_queued(cur) && remote_list::all_free(cur)
                {
                    self.release_all_free(g, cur, pages);
                }
                let mut s = g.lists().partial[class].first();
                while !s.is_null() {
                    let next = (*s).next;
                    if !remote_list::is_queued(s) && remote_list::all_free(s) {
                        self.release_all_free(g, s, pages);
                    }
                    s = next;
                }
            }
        }
    }

    /// Slab `s`, current or partial, has every object free: its remote
    /// list joins its own, and it leaves its place for `park_or_retire`.
    ///
    /// # Safety
    /// `s` is a slab of this heap, current or on its partial list, not
    /// QUEUED, with every object free.
    unsafe fn release_all_free(&mut self, g: &mut ListsGuard<'_>, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: forwarded contract.
        unsafe {
            self.note_collected(s, remote_list::collect_thread_free(s));
            debug_assert_eq!(slab::used(s), 0);
            unlink(g, s);
            self.park_or_retire(s, pages);
        }
    }
}

/// Takes slab `s` off its place in the lists: current, or partial.
///
/// # Safety
/// `s` is current or partial in the lists `g` holds.
unsafe fn unlink(g: &mut ListsGuard<'_>, s: *mut Slab) {
    // SAFETY: forwarded contract.
    unsafe {
        let class = usize::from((*s).class);
        let l = g.lists();
        if l.current[class] == s {
            l.current[class] = empty_slab();
        } else {
            l.partial[class].remove(s);
        }
    }
}

impl Heap {
    /// Another thread (the tick, a trim, a reclaim) gives back this heap's
    /// slabs whose every object is free, without its owner: those on the
    /// emptied stack, those among the full ones on the delayed stack (the
    /// others go to the partial list), and with `sweep` every current or
    /// partial one. Waits for the owner to leave its slow path if it is in
    /// one; skipped while a fork is under way, or when the owner cannot be
    /// kept out. Returns how many slabs went back (straight to the zone).
    pub fn collect_emptied(&self, sweep: bool, pages: &Pages<'_>) -> usize {
        if self.emptied.load(Relaxed).is_null() && self.delayed.load(Relaxed).is_null() && !sweep {
            return 0;
        }
        let Some(_inside) = FORK_GATE.enter() else {
            return 0;
        };
        let Some(mut g) = self.try_lock_lists_remote() else {
            return 0;
        };
        let mut n = 0;
        // SAFETY: we hold the lists, so the owner is out of its slow paths
        // and its fast paths do not reach a slab whose every object is
        // free (see the module docs); the stacks hold this heap's slabs.
        unsafe {
            let mut s = self.emptied.swap(ptr::null_mut(), Acquire);
            while !s.is_null() {
                let next = *remote_list::emptied_link(s);
                remote_list::clear_queued(s);
                if !slab::in_full(s) && remote_list::all_free(s) {
                    unlink(&mut g, s);
                    n += self.retire_remote(s, pages);
                }
                s = next;
            }
            let mut s = self.delayed.swap(ptr::null_mut(), Acquire);
            while !s.is_null() {
                let next = (*s).next;
                (*s).next = ptr::null_mut();
                slab::set_in_full(s, false);
                if remote_list::all_free(s) && !remote_list::is_queued(s) {
                    n += self.retire_remote(s, pages);
                } else {
                    g.lists().partial[usize::from((*s).class)].push_front(s);
                }
                s = next;
            }
            if sweep {
                for class in 0..NR_CLASSES {
                    let cur = g.lists().current[class];
                    if cur != empty_slab()
                        && !remote_list::is_queued(cur)
                        && remote_list::all_free(cur)
                    {
                        unlink(&mut g, cur);
                        n += self.retire_remote(cur, pages);
                    }
                    let mut s = g.lists().partial[class].first();
                    while !s.is_null() {
                        let next = (*s).next;
                        if !remote_list::is_queued(s) && remote_list::all_free(s) {
                            unlink(&mut g, s);
                            n += self.retire_remote(s, pages);
                        }
                        s = next;
                    }
                }
            }
        }
        n
    }

    /// Gives slab `s`, taken off every list, back to the zone from a
    /// thread that is not its owner. Returns 1 (one slab).
    ///
    /// # Safety
    /// The caller holds this heap's lists from the remote side; `s` is
    /// one of its slabs with every object free, on no list, not current,
    /// not QUEUED.
    unsafe fn retire_remote(&self, s: *mut Slab, pages: &Pages<'_>) -> usize {
        // SAFETY: forwarded contract: nobody else reaches `s` now; the
        // block goes back whole.
        unsafe {
            let order = u32::from((*s).order);
            pages.free_to_zone(slab::fini(s), order);
        }
        self.slabs_retired.fetch_add(1, Relaxed);
        1
    }

    /// Whether this heap may hold slabs in use (a racy hint: slabs made
    /// and not given back, beyond the parked ones).
    pub fn holds_slabs(&self) -> bool {
        let made = self.slabs_created.load(Relaxed);
        let gone = self.slabs_retired.load(Relaxed);
        let parked = (self.parked.bytes()
            / (crate::geometry::PAGE_SIZE << crate::slab::classes::SLAB_ORDER))
            as u64;
        made > gone.saturating_add(parked)
    }
}
