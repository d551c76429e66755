//! The large bins' owner-side state at work (`State`): the knobs it
//! reads on its slow paths, `high`'s growth on misses, and the spills to
//! the pageset that make room, follow `high` and drain on free_high (see
//! the parent module's docs for the rules).

use core::ptr;

use super::{BinCounters, State, BINS_PARAMS, BIN_CLASSES, BIN_SLOTS};
use crate::page::LargeBlock;
use crate::page_alloc::block_classes::class_pages;
use crate::page_alloc::knobs::{heuristic, FreeCountMode, Knobs};
use crate::page_alloc::Pages;
use crate::sync::bump;

impl State {
    /// The owner's slow path: reads the knobs in force, for it and the
    /// fast paths after it; `high` is kept within its bounds (at
    /// BINS_HIGH_MIN with AUTO_TUNE off).
    #[inline]
    pub(super) fn refresh(&mut self, pages: &Pages<'_>) -> Knobs {
        let bits = pages.allocator().knob_bits();
        if bits != self.knob_bits {
            self.new_knobs(bits);
        }
        self.k
    }

    /// The knobs changed (or this is the first slow path since).
    #[cold]
    #[inline(never)]
    pub(super) fn new_knobs(&mut self, bits: u32) {
        let k = Knobs::from_bits(bits);
        self.knob_bits = bits;
        self.k = k;
        self.halve =
            k.heuristics.has(heuristic::FREE_COUNT) && k.free_count_mode == FreeCountMode::Halve;
        self.t.clamp_high(&BINS_PARAMS, &k);
    }

    /// Sets the fast free path's bound on free_count: the free_high
    /// threshold, at most the cap (`i32::MAX`: FREE_COUNT off, no count).
    #[inline]
    pub(super) fn set_free_high_at(&mut self, k: &Knobs) {
        self.free_high_at = if k.heuristics.has(heuristic::FREE_COUNT) {
            self.t
                .free_high_threshold(&BINS_PARAMS, k)
                .min(BINS_PARAMS.free_count_cap)
        } else {
            i32::MAX
        };
    }

    /// A miss after blocks were spilled for lack of room: make room for
    /// one more of `class` (the refill half of the auto-tuning).
    #[cold]
    #[inline(never)]
    pub(super) fn grow_on_miss(
        &mut self,
        class: usize,
        c: &BinCounters,
        pages: &Pages<'_>,
        k: &Knobs,
    ) {
        bump(&c.misses, 1);
        if self.t.missed > 0 {
            let below = k.heuristics.has(heuristic::BELOW_HIGH) && pages.below_high();
            self.t
                .grow_after_give_back(class_pages(class) as i32, &BINS_PARAMS, below, k);
        }
    }

    /// Before a block of `class` (`np` pages) goes in: a thread that only
    /// frees spills down to FREE_HIGH_KEEP (free_high) and shrinks `high`;
    /// else a full bin spills its colder half, and the bins spill until
    /// the block fits under `high`.
    #[cold]
    #[inline(never)]
    pub(super) fn make_room(
        &mut self,
        class: usize,
        np: usize,
        pages: &Pages<'_>,
        c: &BinCounters,
        k: &Knobs,
    ) {
        if self.t.wants_free_high(self.count as i32, &BINS_PARAMS, k) {
            bump(&c.free_high, 1);
            let keep = self.t.free_high(&BINS_PARAMS, k).max(0) as usize;
            self.spill(self.count - keep, pages, c);
        }
        let mut spilled = 0;
        if self.len[class] as usize == BIN_SLOTS {
            spilled += self.spill_class(class, BIN_SLOTS / 2, pages, c);
        }
        let high = self.t.high as usize;
        let mut k = BIN_CLASSES;
        while self.count + np > high && k > 0 {
            k -= 1;
            let n = self.len[k] as usize;
            if n > 0 {
                let want = (self.count + np - high).div_ceil(class_pages(k)).min(n);
                spilled += self.spill_class(k, want, pages, c);
            }
        }
        self.t.note_given_back(spilled as i32);
    }

    /// Spills at least `want` pages (or everything), largest classes
    /// first. Returns the pages spilled.
    pub(super) fn spill(&mut self, want: usize, pages: &Pages<'_>, c: &BinCounters) -> usize {
        let mut spilled = 0;
        let mut class = BIN_CLASSES;
        while spilled < want && class > 0 {
            class -= 1;
            let n = self.len[class] as usize;
            if n > 0 {
                let k = (want - spilled).div_ceil(class_pages(class)).min(n);
                spilled += self.spill_class(class, k, pages, c);
            }
        }
        spilled
    }

    /// Spills the `k` coldest (bottom) blocks of bin `class` to the
    /// pageset's large lists. Returns the pages spilled.
    pub(super) fn spill_class(
        &mut self,
        class: usize,
        k: usize,
        pages: &Pages<'_>,
        c: &BinCounters,
    ) -> usize {
        let n = self.len[class] as usize;
        debug_assert!(k <= n);
        let np = class_pages(class);
        let mut heads = [ptr::null_mut(); BIN_SLOTS];
        for (i, head) in heads[..k].iter_mut().enumerate() {
            // SAFETY: a binned block is ours (lock held); it leaves the bins
            // as a block of kind None, as the pageset wants it.
            unsafe {
                *head = LargeBlock::unmake(self.slots[class][i].cast());
                (**head).order = 0;
            }
        }
        // SAFETY: as above: the blocks are ours, of kind None, of `class`.
        self.reached_zone |= unsafe { pages.free_large_many(&heads[..k], class) };
        self.slots[class].copy_within(k..n, 0);
        self.len[class] = (n - k) as u8;
        self.count -= k * np;
        bump(&c.spilled_pages, (k * np) as u64);
        k * np
    }
}
