//! Transparent huge pages for huge blocks, under `PCPALLOC_THP=dense`:
//! only where the block is used densely.
//!
//! A fresh block is not advised: advice makes every first touch fault in
//! a whole 2 MiB, so a big array or table touched sparsely — a 4 GiB array
//! written once per 64 KiB, a hash table calloc'd big and filled thinly —
//! would hold 2 MiB for each touch (4 GiB resident where glibc's mapping
//! holds 256 MiB). Instead a block of [`WATCH_MIN_BYTES`] or more is
//! *watched*: a little after it is mapped and then less and less often
//! (50 ms, doubling to 2 s), a sample of its 2 MiB ranges is looked at
//! (mincore, up to [`SAMPLE_RANGES`] ranges): when the ranges it touched
//! are nearly all resident — a block being filled, or filled — it is
//! advised MADV_HUGEPAGE, so the rest of it faults in huge pages, and the
//! ranges it touched before are marked to be collapsed (MADV_COLLAPSE, as
//! khugepaged would), a few each tick. A block that shows sparse use stays
//! in 4 KiB pages for as long as it shows it.
//!
//! The looks are taken from allocation slow paths (at most one every
//! `CLOCK_EVERY` of them reads the clock, `runtime/tick.rs`) and from the
//! tick; collapses only from the tick, one 2 MiB range per tick run inline
//! on a program's thread (a collapse copies 2 MiB: about 1 ms, up to 7 when
//! the kernel must compact memory for the huge page), more on the
//! background thread. Both hold the watch list's lock, so a block is not
//! unmapped, resized or moved under them (those take it too, briefly).
//!
//! What the watch keeps on a block lives in the block's header page
//! (`section::huge_notes`), which moves with it; the list holds only the
//! blocks.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::geometry::PAGE_SIZE;
use crate::page::{LargeBlock, PageKind};
use crate::section::{self, HUGE_NOTES_BYTES};
use crate::sync::Locked;
use crate::sys;

/// Blocks from this size on are watched (the zone's own threshold for
/// huge pages under `dense`): a buffer of a few MiB is often written once
/// and streamed, and faulting it 2 MiB at a time made malloc-large 1.15x
/// slower.
pub const WATCH_MIN_BYTES: usize = 64 << 20;
/// A huge page: the unit of the looks and of a collapse.
const RANGE: usize = 2 << 20;
/// Pages of a range.
const RANGE_PAGES: usize = RANGE / PAGE_SIZE;
/// Ranges one look examines at most, evenly spread over the block.
pub const SAMPLE_RANGES: usize = 64;
/// A range counts as densely used when at least this many of its 512
/// pages are resident (khugepaged collapses from 1; we are stricter, so a
/// sparse range is not filled with zeros).
const DENSE_PAGES: usize = 448;
/// The first look, this long after the block is mapped.
const FIRST_LOOK_NS: u64 = 50_000_000;
/// The longest wait between two looks.
const LAST_LOOK_NS: u64 = 2_000_000_000;
/// Blocks watched at once; more are left to the system, as glibc's are.
const WATCH_SLOTS: usize = 32;
/// Ranges one collapse pass looks at, at most, for one it can collapse.
const EXAMINE_PER_PASS: usize = 256;

/// The notes' states.
const NOT_WATCHED: u8 = 0;
/// Watched: not advised, looked at from time to time.
const WATCHED: u8 = 1;
/// Found dense and advised for huge pages; `pending` marks the ranges
/// faulted in before, to collapse.
const ADVISED: u8 = 2;

/// Words of the bitmap of ranges to collapse that fit the notes.
const PENDING_WORDS: usize = (HUGE_NOTES_BYTES - 32) / 8;

/// What the watch keeps on one block, in its header page.
#[repr(C)]
struct Notes {
    state: u8,
    /// When to look next (coarse clock, ns).
    next_ns: u64,
    /// The wait before the look after that.
    interval_ns: u64,
    /// The first word of `pending` that may have a bit set.
    pending_from: usize,
    /// A bit per 2 MiB range (the first `PENDING_WORDS * 64`): faulted in
    /// before the block was advised, to collapse.
    pending: [u64; PENDING_WORDS],
}

const _: () = assert!(core::mem::size_of::<Notes>() <= HUGE_NOTES_BYTES);

/// The notes of huge block `b`.
///
/// # Safety
/// `b` is a live huge block of ours (live or cached); the caller holds the
/// watch lock or owns the block.
unsafe fn notes(b: *mut LargeBlock) -> *mut Notes {
    // SAFETY: forwarded contract.
    unsafe { section::huge_notes(b.cast()).cast::<Notes>() }
}

/// The address and usable length of huge block `b`.
///
/// # Safety
/// As [`notes`].
unsafe fn span(b: *mut LargeBlock) -> (usize, usize) {
    // SAFETY: forwarded contract.
    let pages = unsafe { (*b).pages } as usize;
    (section::huge_block_addr(b.cast()), pages * PAGE_SIZE)
}

/// The watched blocks.
struct List {
    blocks: [*mut LargeBlock; WATCH_SLOTS],
    n: usize,
}

// SAFETY: the blocks are huge blocks of ours, reached under the lock.
unsafe impl Send for List {}

impl List {
    fn position(&self, b: *mut LargeBlock) -> Option<usize> {
        self.blocks[..self.n].iter().position(|&x| x == b)
    }

    fn remove_at(&mut self, i: usize) {
        self.n -= 1;
        self.blocks[i] = self.blocks[self.n];
    }
}

/// The huge blocks watched for dense use (see the module docs).
pub struct Watch {
    list: Locked<List>,
    /// When the next look is due (coarse clock, ns); `u64::MAX` while no
    /// block waits for one. Read without the lock by [`Watch::look_if_due`].
    due_ns: AtomicU64,
    /// Some listed block was advised and has ranges to collapse. Read
    /// without the lock by [`Watch::has_pending`].
    pending: AtomicBool,
}

impl Watch {
    /// Nothing watched.
    pub const fn new() -> Watch {
        Watch {
            list: Locked::new(List {
                blocks: [core::ptr::null_mut(); WATCH_SLOTS],
                n: 0,
            }),
            due_ns: AtomicU64::new(u64::MAX),
            pending: AtomicBool::new(false),
        }
    }

    /// Whether some advised block has ranges waiting to be collapsed.
    #[inline]
    pub fn has_pending(&self) -> bool {
        self.pending.load(Relaxed)
    }

    /// Sets [`pending`](Self::pending) from the list.
    ///
    /// # Safety
    /// `l` is the list, locked.
    unsafe fn refresh_pending(&self, l: &List) {
        let any = l.blocks[..l.n].iter().any(|&b| {
            // SAFETY: listed blocks are mapped; the lock is held.
            unsafe { (*notes(b)).state == ADVISED }
        });
        self.pending.store(any, Relaxed);
    }

    /// Starts watching block `b`, just mapped or taken out of the cache
    /// for a request that leaves huge pages to the system (`dense`), if
    /// it is big enough. A block that was advised when it was last used
    /// is advised back (MADV_NOHUGEPAGE: the new use has shown nothing
    /// yet). A block too small, or with no room left in the list, stays
    /// as it is.
    ///
    /// # Safety
    /// `b` is a live huge block the caller owns.
    pub unsafe fn watch(&self, b: *mut LargeBlock) {
        // SAFETY: forwarded contract.
        let (addr, len) = unsafe { span(b) };
        let mut l = self.list.lock();
        // SAFETY: as above; the lock is held.
        let n = unsafe { &mut *notes(b) };
        if n.state == ADVISED {
            sys::advise_huge(addr as *mut u8, len, false);
            n.pending_from = PENDING_WORDS;
        }
        n.state = NOT_WATCHED;
        if len < WATCH_MIN_BYTES {
            if let Some(i) = l.position(b) {
                l.remove_at(i);
            }
            return;
        }
        if l.position(b).is_none() {
            if l.n == WATCH_SLOTS {
                return;
            }
            let i = l.n;
            l.blocks[i] = b;
            l.n += 1;
        }
        let now = sys::coarse_now_ns();
        n.state = WATCHED;
        n.interval_ns = FIRST_LOOK_NS;
        n.next_ns = now + FIRST_LOOK_NS;
        self.due_ns.fetch_min(n.next_ns, Relaxed);
    }

    /// Stops watching block `b` (about to be unmapped, resized or moved:
    /// the caller holds no other lock of the huge blocks). Its notes stay.
    ///
    /// # Safety
    /// `b` is a huge block of ours.
    pub unsafe fn forget(&self, b: *mut LargeBlock) {
        let mut l = self.list.lock();
        if let Some(i) = l.position(b) {
            l.remove_at(i);
            // SAFETY: the list, locked.
            unsafe { self.refresh_pending(&l) };
        }
    }

    /// Watches block `b` again after [`forget`](Self::forget) (its notes
    /// say whether it was watched): after a resize in place, or as its
    /// new descriptor after a move. Timers and pending collapses are kept.
    ///
    /// # Safety
    /// `b` is a live huge block the caller owns.
    pub unsafe fn resume(&self, b: *mut LargeBlock) {
        let mut l = self.list.lock();
        // SAFETY: forwarded contract.
        let n = unsafe { &mut *notes(b) };
        let keep = match n.state {
            WATCHED => true,
            ADVISED => n.pending_from < PENDING_WORDS,
            _ => false,
        };
        if keep && l.position(b).is_none() && l.n < WATCH_SLOTS {
            let i = l.n;
            l.blocks[i] = b;
            l.n += 1;
            if n.state == WATCHED {
                self.due_ns.fetch_min(n.next_ns, Relaxed);
            } else {
                self.pending.store(true, Relaxed);
            }
        }
    }

    /// Whether a look is due (one load and the coarse clock).
    #[inline]
    pub fn due(&self) -> bool {
        let due = self.due_ns.load(Relaxed);
        due != u64::MAX && sys::coarse_now_ns() >= due
    }

    /// Looks at the watched blocks whose look is due, if any is (see the
    /// module docs); a block found dense is advised for huge pages. Returns
    /// how many were.
    pub fn look_if_due(&self) -> usize {
        if !self.due() {
            return 0;
        }
        let now = sys::coarse_now_ns();
        let mut l = self.list.lock();
        let mut advised = 0;
        let mut due = u64::MAX;
        let mut i = 0;
        while i < l.n {
            let b = l.blocks[i];
            // SAFETY: listed blocks are ours and mapped while listed (they
            // leave the list before they are unmapped, resized or moved);
            // the lock is held.
            let (n, cached) = unsafe { (&mut *notes(b), (*b).kind() != PageKind::Huge) };
            if n.state == WATCHED && !cached && now >= n.next_ns {
                // SAFETY: as above.
                if unsafe { look(b, n) } {
                    advised += 1;
                } else {
                    n.interval_ns = (n.interval_ns * 2).min(LAST_LOOK_NS);
                    n.next_ns = now + n.interval_ns;
                }
            }
            let keep = match n.state {
                WATCHED => {
                    due = due.min(n.next_ns);
                    true
                }
                ADVISED => n.pending_from < PENDING_WORDS,
                _ => false,
            };
            if keep {
                i += 1;
            } else {
                l.remove_at(i);
            }
        }
        self.due_ns.store(due, Relaxed);
        // SAFETY: the list, locked.
        unsafe { self.refresh_pending(&l) };
        advised
    }

    /// Collapses at most `max` of the ranges marked when blocks were
    /// advised (the tick's share, as khugepaged's): those still densely
    /// resident. Returns how many were tried.
    pub fn collapse_some(&self, max: usize) -> usize {
        if !self.has_pending() {
            return 0;
        }
        let mut l = self.list.lock();
        let (mut tried, mut examined) = (0, 0);
        let mut i = 0;
        while i < l.n && tried < max && examined < EXAMINE_PER_PASS {
            let b = l.blocks[i];
            // SAFETY: as in look_if_due.
            let (n, cached) = unsafe { (&mut *notes(b), (*b).kind() != PageKind::Huge) };
            if n.state != ADVISED || cached {
                i += 1;
                continue;
            }
            // SAFETY: as above.
            let (addr, len) = unsafe { span(b) };
            while tried < max && examined < EXAMINE_PER_PASS {
                let Some(r) = take_pending(n) else {
                    break;
                };
                examined += 1;
                let start = addr + r * RANGE;
                if start + RANGE > addr + len {
                    continue; // a partial last range: no huge page there
                }
                if resident(start, RANGE_PAGES) >= DENSE_PAGES {
                    tried += 1;
                    sys::collapse(start as *mut u8, RANGE);
                }
            }
            if n.pending_from >= PENDING_WORDS {
                l.remove_at(i);
            } else {
                i += 1;
            }
        }
        // SAFETY: the list, locked.
        unsafe { self.refresh_pending(&l) };
        tried
    }

    /// Takes the watch lock (before fork).
    pub fn lock_for_fork(&self) {
        core::mem::forget(self.list.lock());
    }

    /// Releases (parent) or resets (child) the lock
    /// [`lock_for_fork`](Self::lock_for_fork) took.
    ///
    /// # Safety
    /// Only right after fork, having called `lock_for_fork` in this thread.
    pub unsafe fn unlock_after_fork(&self, child: bool) {
        // SAFETY: forwarded contract.
        unsafe {
            if child {
                self.list.lock.force_unlock();
            } else {
                self.list.lock.unlock();
            }
        }
    }
}

impl Default for Watch {
    fn default() -> Self {
        Self::new()
    }
}

/// Pages resident in the `pages` pages from `addr` (0 if the kernel
/// cannot tell).
fn resident(addr: usize, pages: usize) -> usize {
    let mut v = [0u8; RANGE_PAGES];
    sys::resident_map(addr as *const u8, &mut v[..pages]).unwrap_or(0)
}

/// Looks at watched block `b` (notes `n`): a sample of its ranges, and
/// whether the ones it touched are nearly all resident — at least one
/// dense range and hardly any touched but sparse (one is a block's fill
/// front; a sparse block has many). If so, advises it for huge pages and
/// marks every range it touched, to collapse. Returns whether it did.
///
/// # Safety
/// `b` is a live huge block of ours, listed; the watch lock is held.
unsafe fn look(b: *mut LargeBlock, n: &mut Notes) -> bool {
    // SAFETY: forwarded contract.
    let (addr, len) = unsafe { span(b) };
    let ranges = len.div_ceil(RANGE);
    let step = ranges.div_ceil(SAMPLE_RANGES).max(1);
    let (mut dense, mut sparse) = (0usize, 0usize);
    for r in (0..ranges).step_by(step) {
        let start = addr + r * RANGE;
        let pages = (RANGE.min(addr + len - start)) / PAGE_SIZE;
        let res = resident(start, pages);
        if res * RANGE_PAGES >= DENSE_PAGES * pages {
            dense += 1;
        } else if res > 0 {
            sparse += 1;
        }
    }
    if dense == 0 || sparse > 1 + dense / 8 {
        return false;
    }
    sys::advise_huge(addr as *mut u8, len, true);
    n.state = ADVISED;
    n.pending.fill(0);
    n.pending_from = PENDING_WORDS;
    for r in 0..ranges.min(PENDING_WORDS * 64) {
        let start = addr + r * RANGE;
        let pages = (RANGE.min(addr + len - start)) / PAGE_SIZE;
        if pages == RANGE_PAGES && resident(start, pages) > 0 {
            n.pending[r / 64] |= 1 << (r % 64);
            n.pending_from = n.pending_from.min(r / 64);
        }
    }
    true
}

/// Takes the first range marked to collapse off the notes.
fn take_pending(n: &mut Notes) -> Option<usize> {
    while n.pending_from < PENDING_WORDS {
        let w = n.pending[n.pending_from];
        if w != 0 {
            let bit = w.trailing_zeros() as usize;
            n.pending[n.pending_from] &= !(1 << bit);
            return Some(n.pending_from * 64 + bit);
        }
        n.pending_from += 1;
    }
    None
}
