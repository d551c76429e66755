//! Grouping small objects by lifetime: which migratetype a heap's new slab
//! of a class is taken as.
//!
//! The kernel keeps pages of different mobility in different pageblocks
//! (unmovable, reclaimable, movable: `migratetype`) so that pageblocks
//! empty whole and huge pages stay whole; its slab caches say which they
//! are (`SLAB_RECLAIM_ACCOUNT` for the caches whose objects come and go:
//! dentries, inodes). A malloc caller says nothing, so a heap learns it per
//! size class from its own slabs: a class whose slabs keep coming back
//! empty holds objects that die young, and its new slabs go to
//! *reclaimable* pageblocks; a class whose slabs stay in use holds
//! long-lived objects (a tree, an index, an interpreter's heap), and its
//! slabs go to *unmovable* ones — the default, as the kernel's slabs.
//!
//! Short-lived objects then share pageblocks that empty whole and go back
//! (or are reused) as whole pageblocks, and long-lived ones fill theirs
//! densely: under THP `dense` only those are huge pages (`zone/thp.rs`), so
//! a program that churns fresh memory does not fault it in 2 MiB at a
//! time, while one that builds a large structure gets it in huge pages.
//!
//! A slab's worth of objects taken again after they were freed counts as
//! one more emptied slab ([`Lifetimes::objects_reused`]): a large slab of
//! tiny objects that a few live ones keep from emptying still churns its
//! others through.
//!
//! Per class, `made` counts the slabs the heap started using for the class
//! (new, or parked: a long-lived class takes no parked slab of a
//! reclaimable or movable pageblock, which would then hold its objects
//! among churned ones; the slab goes back to the page allocator instead,
//! see `refill.rs`), `emptied` those that came back empty (a trim or a reclaim
//! that collects empty slabs counts too; a heap adopted by a new thread
//! starts from nothing). Both are halved each tick the heap
//! sees, so the signal follows the program's phases over a few seconds
//! (not over a count of slabs: a phase that builds a large temporary
//! structure would otherwise forget, half-way through, that the class's
//! slabs always came back). A class is short-lived once at least
//! [`MIN_MADE`] slabs were made and at least half as many came back empty
//! — with `L` slabs' worth of its objects living on and `C` churned
//! through, when `C >= L`.
//!
//! Invariant: `made[c] < SATURATE` and `emptied[c] < SATURATE` (both are
//! halved together before either gets there).

use crate::page::MigrateType;

use crate::slab::classes::{CAPACITY, NR_CLASSES};

/// Slabs a class must have made before its lifetime is judged.
pub(crate) const MIN_MADE: u32 = 4;
/// The counts are halved together before either reaches this.
const SATURATE: u32 = 1 << 30;

/// A heap's per-class lifetime counts. Owner only.
#[derive(Clone, Copy)]
pub(crate) struct Lifetimes {
    made: [u32; NR_CLASSES],
    emptied: [u32; NR_CLASSES],
    /// Objects the heap took again after they were freed, short of a
    /// slab's worth (see [`objects_reused`](Self::objects_reused)).
    reused: [u32; NR_CLASSES],
}

impl Lifetimes {
    /// No history: every class long-lived.
    pub(crate) const fn new() -> Lifetimes {
        Lifetimes {
            made: [0; NR_CLASSES],
            emptied: [0; NR_CLASSES],
            reused: [0; NR_CLASSES],
        }
    }

    /// The heap started using a slab for `class`.
    #[inline]
    pub(crate) fn slab_made(&mut self, class: usize) {
        self.made[class] += 1;
        if self.made[class] == SATURATE - 1 {
            self.halve(class);
        }
    }

    /// A slab of `class` came back empty.
    #[inline]
    pub(crate) fn slab_emptied(&mut self, class: usize) {
        self.emptied[class] += 1;
        if self.emptied[class] == SATURATE - 1 {
            self.halve(class);
        }
    }

    /// The heap took `n` objects of `class` again that had been freed
    /// (a refill from a slab's own or remote list, not from its untouched
    /// tail). Each slab's worth of them counts as a slab that came back
    /// empty: objects that die young are churned through whether or not
    /// their slab ever empties — a 32 KiB slab of 16-byte objects that a
    /// few live ones keep from emptying recycles its others by the
    /// thousand (sh6bench), and counting emptied slabs alone took such a
    /// class as long-lived.
    #[inline]
    pub(crate) fn objects_reused(&mut self, class: usize, n: u32) {
        // O(1) whatever `n`: a bin that never ran dry may bring billions
        // of pushes to one refill.
        let cap = u64::from(CAPACITY[class]);
        let r = u64::from(self.reused[class]) + u64::from(n);
        self.reused[class] = (r % cap) as u32;
        let emptied = u64::from(self.emptied[class]) + r / cap;
        self.emptied[class] = emptied.min(u64::from(SATURATE - 1)) as u32;
        while self.emptied[class] >= SATURATE - 1 {
            self.halve(class);
        }
    }

    fn halve(&mut self, class: usize) {
        self.made[class] /= 2;
        self.emptied[class] /= 2;
    }

    /// A tick: the history counts half.
    pub(crate) fn decay(&mut self) {
        for c in 0..NR_CLASSES {
            self.halve(c);
        }
    }

    /// Whether `class`'s objects die young.
    #[inline]
    pub(crate) fn short_lived(&self, class: usize) -> bool {
        let made = self.made[class];
        made >= MIN_MADE && 2 * u64::from(self.emptied[class]) >= u64::from(made)
    }

    /// The migratetype a new slab of `class` is taken as.
    #[inline]
    pub(crate) fn migratetype(&self, class: usize, grouping: bool) -> MigrateType {
        if grouping && self.short_lived(class) {
            MigrateType::Reclaimable
        } else {
            MigrateType::Unmovable
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_whose_slabs_come_back_is_short_lived() {
        let mut l = Lifetimes::new();
        for i in 1..=MIN_MADE {
            l.slab_made(3);
            // Not judged on fewer than MIN_MADE slabs.
            assert_eq!(l.short_lived(3), i == MIN_MADE);
            l.slab_emptied(3);
        }
        assert!(l.short_lived(3));
        assert_eq!(l.migratetype(3, true), MigrateType::Reclaimable);
        assert_eq!(l.migratetype(3, false), MigrateType::Unmovable);
        // Another class is not affected.
        assert!(!l.short_lived(4));
    }

    #[test]
    fn a_slabs_worth_of_reused_objects_counts_as_an_emptied_slab() {
        let mut l = Lifetimes::new();
        let cap = u32::from(CAPACITY[2]);
        for _ in 0..MIN_MADE {
            l.slab_made(2);
        }
        assert!(!l.short_lived(2));
        // A refill's worth of pushes far past the counts' range: the
        // history halves together, in constant time.
        let mut big = Lifetimes::new();
        for _ in 0..MIN_MADE {
            big.slab_made(2);
        }
        big.objects_reused(2, u32::MAX);
        assert!(big.emptied[2] < SATURATE && big.short_lived(2));
        // One object short of two slabs' worth: one emptied slab.
        l.objects_reused(2, cap - 1);
        l.objects_reused(2, cap);
        assert!(!l.short_lived(2), "1 emptied of {MIN_MADE} made");
        // The last object completes the second: half the slabs made.
        l.objects_reused(2, 1);
        assert!(l.short_lived(2));
    }

    #[test]
    fn a_class_is_short_lived_while_churn_outweighs_what_lives_on() {
        let mut l = Lifetimes::new();
        // 100 slabs churned through: short-lived.
        for _ in 0..100 {
            l.slab_made(1);
            l.slab_emptied(1);
        }
        assert!(l.short_lived(1));
        // A phase building 100 slabs of objects that stay: still (C = L).
        for _ in 0..100 {
            l.slab_made(1);
        }
        assert!(l.short_lived(1));
        // One more and what lives outweighs what came back.
        l.slab_made(1);
        assert!(!l.short_lived(1));
        // Ticks halve the history, not the ratio.
        l.decay();
        assert_eq!((l.made[1], l.emptied[1]), (100, 50));
        assert!(l.short_lived(1));
        l.decay();
        l.decay();
        l.decay();
        l.decay();
        // Too little history left to judge: long-lived, the default.
        assert_eq!(l.made[1], 6);
        l.decay();
        assert!(!l.short_lived(1));
    }
}
