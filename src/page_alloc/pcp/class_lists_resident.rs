//! What a pageset's large lists (`class_lists.rs`) hold resident, and how it
//! goes back to the OS.
//!
//! A large block is handed out whole and may be written in part — a
//! thread's 1 MiB buffer written in its first 16 KiB and its last byte —
//! so what the lists hold resident can be a tenth of their pages. A freed
//! block counts for all its pages until it is *measured* (mincore, one
//! call a block): then for its resident pages, of which its *head* is the
//! run at its start. The head is what the block's next user writes again
//! whatever it asks for (every use of a block starts at its first byte);
//! the rest — the last page a user of another size wrote, say — is
//! written again only by a request of the same size.
//!
//! A burst of frees that free_high would drain makes the lists measure
//! the blocks freed since they last looked (under the pageset lock), and
//! drain only if they still hold too much; once a tick's measurements
//! found the blocks mostly resident, free_high measures no more until the
//! next tick — a program that writes its blocks whole pays one look a
//! tick. The give-back at a thread's exit measures the blocks off the
//! lists, without the lock (`pageset_class_lists.rs`).
//!
//! The runtime's give-back (`runtime/give_back.rs`) counts what the lists
//! hold resident with the zone's free memory, and past its `keep` takes
//! it back here ([`Residency::take_for_release`]): first whole blocks,
//! coldest first, while even their heads alone would be too much, then
//! the rest of the coldest blocks, whose heads stay. So between two waves
//! of a thread pool the lists keep, resident, the pages the next wave
//! writes again — where the zone's free lists would merge the blocks and
//! hand the next requests other pages to fault in — and little else.
//!
//! Invariants (checked by `LargeLists::check`): `unmeasured` = Σ pages of
//! the blocks not measured, `unmeasured_blocks[c]` how many of them list
//! `c` holds; `resident` = Σ resident pages of the others, and `rest` = Σ
//! of those past their heads.

use crate::geometry::{MAX_ORDER_PAGES, PAGE_SIZE};
use crate::page::{LargeBlock, Page, PageKind, PageList, NOT_MEASURED};
use crate::page_alloc::block_classes::{class_of, class_pages, NR_LARGE_CLASSES};
use crate::page_alloc::zone::Zone;
use crate::section::page_addr;
use crate::sys;

/// Blocks measured with at least 1/this of their pages resident are
/// dense: measuring them again soon would find the same.
const DENSE_RATIO: usize = 2;
/// ... judged once a tick's measurements looked at this many pages (4 MiB).
const DENSE_MIN_PAGES: usize = MAX_ORDER_PAGES;

/// A pageset's large lists, one per class.
pub type Lists = [PageList; NR_LARGE_CLASSES];

/// What a pageset's large lists hold resident (see the module docs).
/// Guarded by the pageset lock, as the lists it counts.
pub struct Residency {
    /// Pages of the blocks not measured since they were freed.
    pub unmeasured: usize,
    /// Resident pages of the measured blocks, as measured.
    pub resident: usize,
    /// Of those, the pages past each block's head.
    pub rest: usize,
    /// Blocks not measured, per class.
    pub unmeasured_blocks: [u32; NR_LARGE_CLASSES],
    /// Blocks measured (mincore), a counter.
    pub measured: u64,
    /// The zone epoch of the measurements counted below.
    epoch: u32,
    /// Pages measured in that epoch, and of those, resident.
    epoch_pages: usize,
    epoch_resident: usize,
    /// The class [`take_for_release`](Self::take_for_release) looks at
    /// next.
    cursor: usize,
}

impl Default for Residency {
    fn default() -> Self {
        Self::new()
    }
}

/// Which blocks [`Residency::take_round`] takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Blocks with something resident, to go back whole.
    Whole,
    /// Measured blocks with resident pages past their heads, to give
    /// those back.
    Rest,
}

impl Residency {
    /// Nothing on the lists.
    pub const fn new() -> Residency {
        Residency {
            unmeasured: 0,
            resident: 0,
            rest: 0,
            unmeasured_blocks: [0; NR_LARGE_CLASSES],
            measured: 0,
            epoch: 0,
            epoch_pages: 0,
            epoch_resident: 0,
            cursor: 0,
        }
    }

    /// What the lists may hold resident, in pages: the measured blocks'
    /// resident pages and the others' every page.
    #[inline]
    pub fn waiting(&self) -> usize {
        self.unmeasured + self.resident
    }

    /// What block `p` of `pages` pages counts for in
    /// [`waiting`](Self::waiting).
    ///
    /// # Safety
    /// `p` is a block on the lists.
    #[inline]
    pub unsafe fn weight(p: *mut Page, pages: usize) -> usize {
        // SAFETY: a PcpLarge head (contract).
        let r = unsafe { (*p.cast::<LargeBlock>()).resident };
        if r == NOT_MEASURED {
            pages
        } else {
            usize::from(r)
        }
    }

    /// Counts block `p` of class `class`, just put on its list, as its
    /// `resident` and `head` say.
    ///
    /// # Safety
    /// `p` is a PcpLarge block on list `class` with `resident` set.
    #[inline]
    pub unsafe fn count_in(&mut self, p: *mut Page, class: usize) {
        // SAFETY: forwarded contract.
        let (r, h) = unsafe {
            let b = p.cast::<LargeBlock>();
            ((*b).resident, (*b).head)
        };
        if r == NOT_MEASURED {
            self.unmeasured += class_pages(class);
            self.unmeasured_blocks[class] += 1;
        } else {
            self.resident += usize::from(r);
            self.rest += usize::from(r - h);
        }
    }

    /// Takes block `p` of `pages` pages, just unlinked, out of the counts.
    /// Returns what it counted for in [`waiting`](Self::waiting).
    ///
    /// # Safety
    /// `p` was on the lists.
    #[inline]
    pub unsafe fn uncount(&mut self, p: *mut Page, pages: usize) -> usize {
        // SAFETY: a PcpLarge head (contract).
        let (r, h) = unsafe {
            let b = p.cast::<LargeBlock>();
            ((*b).resident, (*b).head)
        };
        if r == NOT_MEASURED {
            self.unmeasured -= pages;
            self.unmeasured_blocks[class_of(pages)] -= 1;
            pages
        } else {
            self.resident -= usize::from(r);
            self.rest -= usize::from(r - h);
            usize::from(r)
        }
    }

    /// Counts a measurement of a block of `pages` pages, `resident` of
    /// them resident, in the tick's.
    pub fn note_measured(&mut self, zone: &Zone, pages: usize, resident: usize) {
        let epoch = zone.epoch();
        if epoch != self.epoch {
            self.epoch = epoch;
            self.epoch_pages = 0;
            self.epoch_resident = 0;
        }
        self.epoch_pages += pages;
        self.epoch_resident += resident;
        self.measured += 1;
    }

    /// Whether a tick's measurements found the blocks mostly resident.
    fn dense_now(&self, zone: &Zone) -> bool {
        self.epoch == zone.epoch()
            && self.epoch_pages >= DENSE_MIN_PAGES
            && self.epoch_resident * DENSE_RATIO >= self.epoch_pages
    }

    /// Measures the blocks of `lists` freed since they were last measured
    /// (see the module docs), under the pageset lock; unless `always`, not
    /// in a tick whose measurements found the blocks mostly resident.
    /// Returns the pages measured and how many of them were resident.
    pub fn measure(&mut self, lists: &Lists, zone: &Zone, always: bool) -> (usize, usize) {
        let mut total = (0, 0);
        if self.unmeasured == 0 || (!always && self.dense_now(zone)) {
            return total;
        }
        let mut heads = [core::ptr::null_mut::<Page>(); sys::MEASURE_BATCH_MAX];
        let mut n = 0;
        for (c, list) in lists.iter().enumerate() {
            let mut left = self.unmeasured_blocks[c];
            let mut p = list.first();
            // SAFETY: the lists hold our PcpLarge blocks (pageset lock held
            // by the caller); a block's memory is ours to ask about.
            unsafe {
                while left > 0 && !p.is_null() {
                    if (*p.cast::<LargeBlock>()).resident == NOT_MEASURED {
                        heads[n] = p;
                        n += 1;
                        left -= 1;
                        if n == heads.len() {
                            self.measure_batch(&heads[..n], zone, &mut total);
                            n = 0;
                        }
                    }
                    p = (*p).next;
                }
            }
        }
        // SAFETY: as above.
        unsafe { self.measure_batch(&heads[..n], zone, &mut total) };
        total
    }

    /// Measures the blocks `heads` of the lists, not measured yet, and
    /// counts them so; adds their pages and resident pages to `total`.
    ///
    /// # Safety
    /// Each is a PcpLarge block on the lists, pageset lock held.
    unsafe fn measure_batch(
        &mut self,
        heads: &[*mut Page],
        zone: &Zone,
        total: &mut (usize, usize),
    ) {
        let mut ranges = [(0usize, 0usize); sys::MEASURE_BATCH_MAX];
        for (r, &p) in ranges.iter_mut().zip(heads) {
            // SAFETY: a PcpLarge head (contract).
            *r = (page_addr(p), unsafe { (*p.cast::<LargeBlock>()).pages }
                as usize);
        }
        let ranges = &ranges[..heads.len()];
        sys::measure_grouped(ranges, |group| {
            for m in group {
                let n = ranges[m.index].1;
                let (r, h) = match m.map {
                    Some(map) => residency_of(map),
                    // Not answered: count it as written whole.
                    None => (n as u16, n as u16),
                };
                // SAFETY: as above.
                unsafe {
                    let b = heads[m.index].cast::<LargeBlock>();
                    (*b).resident = r;
                    (*b).head = h;
                }
                self.unmeasured -= n;
                self.unmeasured_blocks[class_of(n)] -= 1;
                self.resident += usize::from(r);
                self.rest += usize::from(r - h);
                self.note_measured(zone, n, usize::from(r));
                total.0 += n;
                total.1 += usize::from(r);
            }
        });
    }

    /// Takes blocks off `lists` until they hold at most `keep` of
    /// [`waiting`](Self::waiting), everything measured first (see the
    /// module docs): onto `whole` the coldest blocks with anything
    /// resident while their heads alone are more than `keep`, then onto
    /// `rest` the coldest blocks with resident pages past their heads,
    /// for the caller to give those back and put the blocks back with
    /// [`put_back_head`](Self::put_back_head). Each comes off with kind
    /// `None`, its `pages`, and its `resident` and `head` as measured.
    /// Returns what they counted for and their pages.
    pub fn take_for_release(
        &mut self,
        lists: &mut Lists,
        zone: &Zone,
        keep: usize,
        whole: &mut PageList,
        rest: &mut PageList,
    ) -> (usize, usize) {
        self.measure(lists, zone, true);
        let (w1, p1) = self.take_round(lists, Take::Whole, keep, whole);
        let (w2, p2) = self.take_round(lists, Take::Rest, keep, rest);
        (w1 + w2, p1 + p2)
    }

    /// Takes the coldest block of each class in turn (from where the last
    /// round stopped) that `what` asks for onto `out`, while the lists
    /// hold more than `keep` — counting, for [`Take::Whole`], only the
    /// blocks' heads, and for [`Take::Rest`] the heads of the blocks taken
    /// too, which come back. Returns what the blocks counted for and
    /// their pages.
    fn take_round(
        &mut self,
        lists: &mut Lists,
        what: Take,
        keep: usize,
        out: &mut PageList,
    ) -> (usize, usize) {
        let mut back = 0;
        let over = |r: &Residency, back: usize| match what {
            Take::Whole => r.waiting() - r.rest > keep,
            Take::Rest => r.waiting() + back > keep,
        };
        let (mut taken, mut pages) = (0, 0);
        let mut idle = 0;
        while over(self, back) && idle < NR_LARGE_CLASSES {
            let c = self.cursor;
            self.cursor = (c + 1) % NR_LARGE_CLASSES;
            let n = class_pages(c);
            let mut p = lists[c].last();
            // SAFETY: the lists hold our blocks (pageset lock held by the
            // caller); one taken off is ours.
            unsafe {
                while !p.is_null() {
                    let b = p.cast::<LargeBlock>();
                    let fits = match what {
                        Take::Whole => Self::weight(p, n) > 0,
                        Take::Rest => (*b).resident != NOT_MEASURED && (*b).resident > (*b).head,
                    };
                    if fits {
                        break;
                    }
                    p = (*p).prev;
                }
                if p.is_null() {
                    idle += 1;
                    continue;
                }
                lists[c].remove(p);
                taken += self.uncount(p, n);
                pages += n;
                if what == Take::Rest {
                    back += usize::from((*p.cast::<LargeBlock>()).head);
                }
                (*p).set_kind(PageKind::None);
                out.push_back(p);
            }
            idle = 0;
        }
        (taken, pages)
    }

    /// Puts back block `p` of class `class`, taken for its rest (see
    /// [`take_for_release`](Self::take_for_release)), at the cold end of
    /// its list in `lists`: holding its head alone if `released`, else as
    /// it was.
    ///
    /// # Safety
    /// `p` came off `lists` through `take_for_release`, measured, and the
    /// caller hands it back.
    pub unsafe fn put_back_head(
        &mut self,
        lists: &mut Lists,
        p: *mut Page,
        class: usize,
        released: bool,
    ) {
        // SAFETY: forwarded contract.
        unsafe {
            let b = p.cast::<LargeBlock>();
            if released {
                (*b).resident = (*b).head;
            }
            (*p).set_kind(PageKind::PcpLarge);
            lists[class].push_back(p);
            self.count_in(p, class);
        }
    }

    /// The range of block `p`'s pages past its head, to give back.
    /// (Resident pages there may be none but the last.)
    ///
    /// # Safety
    /// `p` is a measured block taken by `take_for_release`.
    pub unsafe fn rest_range(p: *mut Page) -> (usize, usize) {
        // SAFETY: forwarded contract.
        let (pages, head) = unsafe {
            let b = p.cast::<LargeBlock>();
            ((*b).pages as usize, usize::from((*b).head))
        };
        (page_addr(p) + head * PAGE_SIZE, (pages - head) * PAGE_SIZE)
    }
}

/// Measures every block of `blocks` — sets its `resident` pages and its
/// `head`, how many of those are its first pages — with one mincore call for each group of
/// blocks close together (`sys::measure_grouped`): a thread's blocks,
/// carved one after another, are often neighbours. Takes no lock.
///
/// # Safety
/// `blocks` holds blocks of the zone that the caller owns, each with its
/// `pages` set.
pub unsafe fn measure_list(blocks: &PageList) {
    let mut p = blocks.first();
    while !p.is_null() {
        let mut heads = [core::ptr::null_mut::<Page>(); sys::MEASURE_BATCH_MAX];
        let mut ranges = [(0usize, 0usize); sys::MEASURE_BATCH_MAX];
        let mut n = 0;
        while !p.is_null() && n < sys::MEASURE_BATCH_MAX {
            // SAFETY: a block on the caller's list (contract).
            let pages = unsafe { (*p.cast::<LargeBlock>()).pages } as usize;
            heads[n] = p;
            ranges[n] = (page_addr(p), pages);
            n += 1;
            // SAFETY: as above.
            p = unsafe { (*p).next };
        }
        sys::measure_grouped(&ranges[..n], |group| {
            for m in group {
                let b = heads[m.index].cast::<LargeBlock>();
                let (r, h) = match m.map {
                    Some(map) => residency_of(map),
                    // Not answered: count it as written whole.
                    None => (ranges[m.index].1 as u16, ranges[m.index].1 as u16),
                };
                // SAFETY: the caller's block (contract).
                unsafe {
                    (*b).resident = r;
                    (*b).head = h;
                }
            }
        });
    }
}

/// A block's resident pages and the run of them at its start, from its
/// mincore map.
fn residency_of(map: &[u8]) -> (u16, u16) {
    let r = map.iter().filter(|&&v| v & 1 != 0).count();
    let h = map.iter().take_while(|&&v| v & 1 != 0).count();
    (r as u16, h as u16)
}
