//! What a CPU's class lists give the depot (`pcp/depot.rs`), and when:
//! a batch of a class another CPU's miss found the depot without, a batch
//! of a class the lists hold more of than this CPU's next misses need, and
//! what goes past `high` while the depot has room. The depot's lock is
//! only tried, under the pageset's: busy, the blocks stay (or go to the
//! zone, past `high`).

use crate::page::{LargeBlock, PageKind, NOT_MEASURED};
use crate::page_alloc::block_classes::{class_pages, NR_LARGE_CLASSES};
use crate::page_alloc::knobs::Knobs;
use crate::page_alloc::pcp::depot::{self, Depot, DepotGuard};
use crate::page_alloc::zone::Zone;

use super::{LargeLists, LARGE_REFILL_MAX};

/// A free that leaves more than this many refills' worth of blocks of its
/// class on the list sheds one to the depot.
const SHED_BATCHES: usize = 3;
impl LargeLists {
    /// A free of class `class` with the depot at hand: answers the
    /// depot's requests that are not this CPU's own, and sheds a batch of
    /// `class` past [`SHED_BATCHES`] batches of it ([`share`](Self::share)).
    #[inline]
    pub(super) fn offer(&mut self, depot: &Depot, class: usize, k: &Knobs) {
        let a = self.asked;
        let wanted = depot.wanted() & !(a | (a << 1) | (a << 2));
        let shed = depot::holds(class)
            && self.lists[class].len() > SHED_BATCHES * self.per_batch(class_pages(class));
        if wanted != 0 || shed {
            self.share(depot, wanted, class, k);
        }
    }

    /// Moves up to `n` coldest blocks of class `class` to the depot `d`,
    /// as far as it has room. Returns the blocks moved.
    fn shed(&mut self, d: &mut DepotGuard<'_>, class: usize, n: usize, k: &Knobs) -> usize {
        let pages = class_pages(class);
        for i in 0..n {
            let p = self.lists[class].last();
            if p.is_null() {
                return i;
            }
            // SAFETY: p is the coldest block of a list of ours (the
            // pageset lock is held by the caller).
            let r = unsafe { (*p.cast::<LargeBlock>()).resident };
            let units = if r == NOT_MEASURED {
                pages
            } else {
                usize::from(r)
            };
            if !d.room_for(units, k) {
                return i;
            }
            // SAFETY: as above: unlinked and uncounted, the block is the
            // depot's.
            unsafe {
                self.lists[class].remove(p);
                self.uncount(p, pages);
                (*p).set_kind(PageKind::None);
                d.put(p, class);
            }
        }
        n
    }

    /// A free with the depot at hand (`depot.rs`): puts there a refill's
    /// batch of each class another CPU's miss found it without
    /// ([`Depot::wanted`]) that these lists hold — at most half of each
    /// list, rounded up, as a steal from them took — and, when the list
    /// of the class just freed holds more than [`SHED_BATCHES`] batches,
    /// a batch of its coldest: more than this CPU's next misses of the
    /// class need. Only if the depot's lock is free.
    #[cold]
    #[inline(never)]
    fn share(&mut self, depot: &Depot, wanted: u64, class: usize, k: &Knobs) {
        let Some(mut d) = depot.try_lock() else {
            return;
        };
        let mut w = wanted & ((1u64 << NR_LARGE_CLASSES) - 1);
        while w != 0 {
            let c = w.trailing_zeros() as usize;
            w &= w - 1;
            let len = self.lists[c].len();
            if len == 0 {
                continue;
            }
            let n = self.per_batch(class_pages(c)).min(len.div_ceil(2));
            let moved = self.shed(&mut d, c, n, k);
            d.answered(moved as u64);
            if moved < n {
                return;
            }
        }
        let per_batch = self.per_batch(class_pages(class));
        if depot::holds(class) && self.lists[class].len() > SHED_BATCHES * per_batch {
            self.shed(&mut d, class, per_batch, k);
        }
    }

    /// Notes that a miss of `class` found the depot without a block
    /// (`asked` set), or with one (cleared).
    #[inline]
    pub fn note_depot(&mut self, class: usize, found: bool) {
        if found {
            self.asked &= !(1 << class);
        } else {
            self.asked |= 1 << class;
        }
    }

    /// Blocks of `pages` pages a refill's batch brings.
    #[inline]
    fn per_batch(&self, pages: usize) -> usize {
        (self.p.batch.max(0) as usize / pages).clamp(1, LARGE_REFILL_MAX)
    }

    /// [`drain`](Self::drain) (for less than everything), the blocks
    /// going to `depot` first while it has room and its lock is free
    /// (`depot.rs`), coldest first from class `first`; the rest to the
    /// zone. Returns the pages given back to the zone and what all the
    /// blocks given away held.
    pub(super) fn drain_via(
        &mut self,
        zone: &Zone,
        want: usize,
        first: usize,
        k: &Knobs,
        depot: Option<&Depot>,
    ) -> (usize, usize) {
        let mut held = 0;
        if let Some(mut d) = depot
            .filter(|_| want > 0 && self.count > 0)
            .and_then(Depot::try_lock)
        {
            let mut class = first;
            let mut empty_in_a_row = 0;
            while held < want && self.count > 0 && empty_in_a_row < NR_LARGE_CLASSES {
                let p = self.lists[class].last();
                if p.is_null() || !depot::holds(class) {
                    empty_in_a_row += 1;
                    class = (class + 1) % NR_LARGE_CLASSES;
                    continue;
                }
                empty_in_a_row = 0;
                let n = class_pages(class);
                // SAFETY: p is the coldest block of a list of ours (the
                // pageset lock is held by the caller).
                let r = unsafe { (*p.cast::<LargeBlock>()).resident };
                let units = if r == NOT_MEASURED { n } else { usize::from(r) };
                if !d.room_for(units, k) {
                    break;
                }
                // SAFETY: as above: unlinked and uncounted, the block is
                // the depot's.
                unsafe {
                    self.lists[class].remove(p);
                    held += self.uncount(p, n);
                    (*p).set_kind(PageKind::None);
                    d.put(p, class);
                }
                if self.lists[class].is_empty() {
                    class = (class + 1) % NR_LARGE_CLASSES;
                }
            }
        }
        if held >= want {
            return (0, held);
        }
        let (freed, rest) = self.drain(zone, want - held, first);
        (freed, held + rest)
    }
}
