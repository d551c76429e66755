//! Page-granular allocations: *large* blocks (8 KiB < size ≤ 4 MiB) come
//! from the page allocator as MOVABLE blocks — through the pagesets for
//! orders ≤ 3, from the zone above — and *huge* blocks (> 4 MiB) get their
//! own mmap, unmapped on free and resized with mremap.
//!
//! A large block of order > 3 whose request leaves a sizeable tail gives the
//! tail pages back to the buddy lists straight away (the kernel's
//! `alloc_pages_exact`): a 2.1 MiB request holds 2.1 MiB, not 4. Such a
//! block is marked TRIMMED and remembers its page count; it is freed as the
//! aligned power-of-two pieces that make up its range.
//!
//! Huge blocks are not in any section, so they are found through a small
//! hash table keyed by address (under its own lock, a leaf in the lock
//! order). A pointer that is neither in a section nor in the table is not
//! ours.

use core::sync::atomic::Ordering::{Acquire, Relaxed};
use core::sync::atomic::{AtomicU64, AtomicU8};

use crate::config::{LARGE_MAX, MAX_PAGE_ORDER, PAGE_ALLOC_COSTLY_ORDER, PAGE_SHIFT, PAGE_SIZE};
use crate::page::{flags, MigrateType, Page, PageKind};
use crate::pages;
use crate::pcp::Pageset;
use crate::report;
use crate::section::{desc_of, page_addr};
use crate::state::ZONE;
use crate::sync::Locked;
use crate::sys;
use crate::util::order_for_pages;

/// Trim the tail of a large block when at least this many pages are unused.
const TRIM_MIN_PAGES: usize = 16;

/// Allocates a large block for `size` bytes aligned to `align` (power of
/// two, at most 4 MiB). Null when out of memory.
pub fn alloc_large(size: usize, align: usize, zero: bool, pcp: *mut Pageset) -> *mut u8 {
    debug_assert!(size <= LARGE_MAX && align <= LARGE_MAX);
    let npages = size.div_ceil(PAGE_SIZE).max(1);
    let align_order = if align > PAGE_SIZE {
        align.trailing_zeros() - PAGE_SHIFT
    } else {
        0
    };
    let order = order_for_pages(npages).max(align_order);
    if order > MAX_PAGE_ORDER {
        return core::ptr::null_mut();
    }
    let head = pages::alloc_pages(order, MigrateType::Movable, pcp);
    if head.is_null() {
        return core::ptr::null_mut();
    }
    let addr = page_addr(head);
    // SAFETY: the block is ours; its tail descriptors are None.
    unsafe {
        let clean = (*head).flags & flags::CLEAN != 0;
        let total = 1usize << order;
        let mut fl = 0;
        let mut in_use = total;
        if order > PAGE_ALLOC_COSTLY_ORDER && total - npages >= TRIM_MIN_PAGES {
            free_range(addr + npages * PAGE_SIZE, total - npages);
            fl |= flags::TRIMMED;
            in_use = npages;
        }
        (*head).order = order as u8;
        (*head).flags = fl;
        (*head).aux = in_use as u32;
        (*head)
            .kind
            .store(PageKind::Large as u8, core::sync::atomic::Ordering::Release);
        if zero && !clean {
            core::ptr::write_bytes(addr as *mut u8, 0, size);
        }
    }
    addr as *mut u8
}

/// Frees the pages `[addr, addr + pages)` to the zone as the largest
/// aligned power-of-two pieces, under one zone-lock hold.
///
/// # Safety
/// The range is owned by the caller, inside one MAX_ORDER block of the
/// allocator's zone, and its descriptors are all `None`.
unsafe fn free_range(addr: usize, pages: usize) {
    let end = addr + pages * PAGE_SIZE;
    let mut a = addr;
    let mut z = ZONE.lock();
    while a < end {
        let mut order = ((a >> PAGE_SHIFT).trailing_zeros()).min(MAX_PAGE_ORDER);
        while a + (PAGE_SIZE << order) > end {
            order -= 1;
        }
        let d = desc_of(a);
        // SAFETY: the piece is ours (contract); it becomes a free block.
        unsafe {
            (*d).flags = 0;
            (*d).order = order as u8;
            z.free_one_page(d, order);
        }
        a += PAGE_SIZE << order;
    }
}

/// Pages a large block spans (its usable size is this × 4 KiB).
///
/// # Safety
/// `d` is the head descriptor of a live large block.
#[inline]
pub unsafe fn large_pages(d: *const Page) -> usize {
    // SAFETY: forwarded contract.
    unsafe { (*d).aux as usize }
}

/// Checks that `p` is a live large block whose head descriptor is `d`, for
/// the function named in `what`; aborts with a report otherwise.
///
/// # Safety
/// `d` is the descriptor of `p`'s page, `p` is in one of our sections.
pub unsafe fn check_large(p: *mut u8, d: *mut Page, what: &'static str) {
    // SAFETY: descriptors of our sections are always readable.
    let kind = unsafe { (*d).kind() };
    if kind != PageKind::Large {
        report_bad(p, kind, what);
    }
    if p as usize != page_addr(d) {
        report::fatal(what_invalid(what), p);
    }
}

#[cold]
fn report_bad(p: *mut u8, kind: PageKind, what: &'static str) -> ! {
    let msg = match (kind, what) {
        (PageKind::Buddy | PageKind::Pcp | PageKind::Isolated | PageKind::Cached, "realloc") => {
            "realloc(): pointer already freed"
        }
        (PageKind::Buddy | PageKind::Pcp | PageKind::Isolated | PageKind::Cached, _) => {
            "free(): double free detected"
        }
        _ => what_invalid(what),
    };
    report::fatal(msg, p)
}

fn what_invalid(what: &str) -> &'static str {
    match what {
        "realloc" => "realloc(): invalid pointer",
        "malloc_usable_size" => "malloc_usable_size(): invalid pointer",
        _ => "free(): invalid pointer",
    }
}

/// Frees large block `p` with head descriptor `d`; reports and aborts if it
/// is not a live large block (double free, interior or foreign pointer).
///
/// # Safety
/// `d` = `desc_of(p)` and `p` lies in one of our sections.
pub unsafe fn free_large(p: *mut u8, d: *mut Page, pcp: *mut Pageset) {
    // A plain check, not a CAS: two threads freeing the same block at the
    // same instant is a race in the program that no malloc catches; a
    // double free in sequence is caught here.
    // SAFETY: descriptors of our sections are always readable.
    let k = unsafe { (*d).kind.load(Acquire) };
    if k != PageKind::Large as u8 {
        report_bad(p, kind_of(k), "free");
    }
    // SAFETY: as above; the block is the caller's to free.
    unsafe { (*d).kind.store(PageKind::None as u8, Relaxed) };
    if p as usize != page_addr(d) {
        // SAFETY: put the kind back so the heap stays consistent.
        unsafe { (*d).kind.store(PageKind::Large as u8, Relaxed) };
        report::fatal("free(): invalid pointer (inside a block)", p);
    }
    // SAFETY: we won the claim: the block is ours to free.
    unsafe {
        let order = u32::from((*d).order);
        if (*d).flags & flags::TRIMMED != 0 {
            let n = (*d).aux as usize;
            (*d).aux = 0;
            free_range(p as usize, n);
        } else {
            (*d).flags = 0;
            (*d).aux = 0;
            pages::free_pages(d, order, pcp);
        }
    }
}

fn kind_of(k: u8) -> PageKind {
    match k {
        1 => PageKind::Buddy,
        2 => PageKind::Pcp,
        3 => PageKind::Isolated,
        7 => PageKind::Cached,
        _ => PageKind::None,
    }
}

// ---- huge blocks ---------------------------------------------------------

/// One huge mapping.
#[derive(Clone, Copy)]
struct Entry {
    addr: usize,
    len: usize,
}

/// Open-addressing table of huge mappings (linear probing, backward-shift
/// deletion), in memory of its own mapping.
struct Registry {
    slots: *mut Entry,
    cap: usize,
    len: usize,
    bytes: usize,
}

// SAFETY: the table is only touched under its lock.
unsafe impl Send for Registry {}

static HUGE: Locked<Registry> = Locked::new(Registry {
    slots: core::ptr::null_mut(),
    cap: 0,
    len: 0,
    bytes: 0,
});
/// Huge mappings made (for stats).
pub static HUGE_ALLOCS: AtomicU64 = AtomicU64::new(0);
static HUGE_READY: AtomicU8 = AtomicU8::new(0);

#[inline]
fn hash(addr: usize, cap: usize) -> usize {
    ((addr >> PAGE_SHIFT).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17) & (cap - 1)
}

impl Registry {
    fn find(&self, addr: usize) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let mut i = hash(addr, self.cap);
        loop {
            // SAFETY: i < cap and slots has cap entries.
            let e = unsafe { *self.slots.add(i) };
            if e.addr == 0 {
                return None;
            }
            if e.addr == addr {
                return Some(i);
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    fn insert(&mut self, e: Entry) -> bool {
        if (self.len + 1) * 2 > self.cap && !self.grow() {
            return false;
        }
        let mut i = hash(e.addr, self.cap);
        // SAFETY: i < cap; the table has a free slot (load ≤ 1/2).
        unsafe {
            while (*self.slots.add(i)).addr != 0 {
                i = (i + 1) & (self.cap - 1);
            }
            self.slots.add(i).write(e);
        }
        self.len += 1;
        self.bytes += e.len;
        true
    }

    fn remove_at(&mut self, mut i: usize) -> Entry {
        let mask = self.cap - 1;
        // SAFETY: i < cap and holds an entry.
        let gone = unsafe { *self.slots.add(i) };
        // Backward-shift deletion keeps probe sequences unbroken.
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            // SAFETY: j < cap.
            let e = unsafe { *self.slots.add(j) };
            if e.addr == 0 {
                break;
            }
            let home = hash(e.addr, self.cap);
            let between = if i <= j {
                home > i && home <= j
            } else {
                home > i || home <= j
            };
            if !between {
                // SAFETY: i, j < cap.
                unsafe { self.slots.add(i).write(e) };
                i = j;
            }
        }
        // SAFETY: i < cap.
        unsafe { self.slots.add(i).write(Entry { addr: 0, len: 0 }) };
        self.len -= 1;
        self.bytes -= gone.len;
        gone
    }

    fn grow(&mut self) -> bool {
        let cap = (self.cap * 2).max(256);
        let Some(mem) = sys::map(cap * core::mem::size_of::<Entry>()) else {
            return false;
        };
        let old = (self.slots, self.cap);
        self.slots = mem.cast();
        self.cap = cap;
        self.len = 0;
        self.bytes = 0;
        for i in 0..old.1 {
            // SAFETY: i < old cap.
            let e = unsafe { *old.0.add(i) };
            if e.addr != 0 {
                self.insert(e);
            }
        }
        if !old.0.is_null() {
            sys::unmap(old.0.cast(), old.1 * core::mem::size_of::<Entry>());
        }
        true
    }
}

/// Maps a huge block of `size` bytes aligned to `align`. Null when the
/// memory limit or the OS says no.
pub fn alloc_huge(size: usize, align: usize) -> *mut u8 {
    let Some(len) = size.checked_next_multiple_of(PAGE_SIZE) else {
        return core::ptr::null_mut();
    };
    let pad = if align > PAGE_SIZE { align } else { 0 };
    let Some(span) = len.checked_add(pad) else {
        return core::ptr::null_mut();
    };
    if !ZONE.budget.try_charge(span) {
        return core::ptr::null_mut();
    }
    let Some(base) = sys::map(span) else {
        ZONE.budget.uncharge(span);
        return core::ptr::null_mut();
    };
    let start = (base as usize).next_multiple_of(align.max(PAGE_SIZE));
    if pad > 0 {
        let head = start - base as usize;
        let tail = span - head - len;
        if head > 0 {
            sys::unmap(base, head);
        }
        if tail > 0 {
            sys::unmap((start + len) as *mut u8, tail);
        }
        ZONE.budget.uncharge(pad);
    }
    let ok = HUGE.lock().insert(Entry { addr: start, len });
    if !ok {
        sys::unmap(start as *mut u8, len);
        ZONE.budget.uncharge(len);
        return core::ptr::null_mut();
    }
    HUGE_READY.store(1, Relaxed);
    HUGE_ALLOCS.fetch_add(1, Relaxed);
    start as *mut u8
}

/// The length of the huge block at `p`, if `p` is one.
pub fn huge_len(p: *mut u8) -> Option<usize> {
    if HUGE_READY.load(Relaxed) == 0 {
        return None;
    }
    let r = HUGE.lock();
    // SAFETY: find returns an index < cap.
    r.find(p as usize).map(|i| unsafe { (*r.slots.add(i)).len })
}

/// Unmaps huge block `p`. Returns false if `p` is not a huge block.
pub fn free_huge(p: *mut u8) -> bool {
    if HUGE_READY.load(Relaxed) == 0 {
        return false;
    }
    let e = {
        let mut r = HUGE.lock();
        match r.find(p as usize) {
            Some(i) => r.remove_at(i),
            None => return false,
        }
    };
    sys::unmap(e.addr as *mut u8, e.len);
    ZONE.budget.uncharge(e.len);
    true
}

/// Resizes huge block `p` to `size` (> LARGE_MAX) bytes with mremap. Null
/// if it cannot (the block is then untouched).
///
/// # Safety
/// `p` is a live huge block.
pub unsafe fn realloc_huge(p: *mut u8, size: usize) -> *mut u8 {
    let Some(new_len) = size.checked_next_multiple_of(PAGE_SIZE) else {
        return core::ptr::null_mut();
    };
    let mut r = HUGE.lock();
    let Some(i) = r.find(p as usize) else {
        return core::ptr::null_mut();
    };
    let e = r.remove_at(i);
    if new_len > e.len && !ZONE.budget.try_charge(new_len - e.len) {
        r.insert(e);
        return core::ptr::null_mut();
    }
    match sys::remap(p, e.len, new_len) {
        Some(q) => {
            if new_len < e.len {
                ZONE.budget.uncharge(e.len - new_len);
            }
            if r.insert(Entry {
                addr: q as usize,
                len: new_len,
            }) {
                q
            } else {
                // Cannot track it: give it back rather than leak it.
                drop(r);
                sys::unmap(q, new_len);
                ZONE.budget.uncharge(new_len);
                core::ptr::null_mut()
            }
        }
        None => {
            if new_len > e.len {
                ZONE.budget.uncharge(new_len - e.len);
            }
            r.insert(e);
            core::ptr::null_mut()
        }
    }
}

/// Huge blocks live now and their bytes.
pub fn huge_usage() -> (usize, usize) {
    let r = HUGE.lock();
    (r.len, r.bytes)
}

/// Takes the registry lock before fork.
pub fn before_fork() {
    core::mem::forget(HUGE.lock());
}

/// Releases (parent, waking waiters) or resets (child) the registry lock
/// after fork.
///
/// # Safety
/// Only right after fork, having called [`before_fork`].
pub unsafe fn after_fork(child: bool) {
    // SAFETY: held since before_fork in this thread.
    unsafe {
        if child {
            HUGE.lock.force_unlock();
        } else {
            HUGE.lock.unlock();
        }
    }
}
