//! Page descriptors: our `struct page`, the typed views laid over it, and
//! the intrusive lists built on them.
//!
//! Every 4 KiB page of a section has a 64-byte descriptor at a fixed place
//! in the section's first MAX_ORDER block (see [`crate::section`]). As in
//! the kernel, only the *head* page of a block (free, cached or allocated)
//! carries state; every other descriptor is `PageKind::None` with all fields
//! zero, except the tail pages of a slab, which point at their head (the
//! free fast path finds the head by masking instead: `slab::free_view`).
//!
//! The first 32 bytes are common to every kind: kind, order, migratetype,
//! flags, a 32-bit word, the list links and `head`. What the word and the
//! last 32 bytes mean depends on the kind, so each user of a descriptor
//! sees it through a view with named fields — as the kernel overlays
//! `struct slab` on `struct page`:
//!
//! | kind                   | view                    | the word         | bytes 32..64 |
//! |------------------------|-------------------------|------------------|--------------|
//! | `Buddy`/`Pcp`/`Isolated` | [`Page`]              | `free_epoch`     | -            |
//! | `Large`/`Cached`/`Huge`/`PcpLarge` | [`LargeBlock`] | `pages`    | `len` (huge), `sample`, `resident` (pcp) |
//! | `Slab`                 | [`crate::slab::Slab`]   | `used`           | slab fields  |
//! | `SlabTail`             | [`Page`] (`head`, `next` on the first) | - | 32..56: a sampled object's slot (`slab/marks.rs`) |
//!
//! Locking: a descriptor belongs to whoever owns its block: the zone lock
//! for `Buddy`/`Isolated`, the pageset lock for `Pcp`, the owning thread
//! heap for `Slab` (except `thread_free`, which remote threads push to
//! atomically), and the caller for `Large` and `Huge`. `kind` and `head`
//! are atomics because the free path reads them before it knows who the
//! owner is.

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering::Relaxed};

use crate::geometry::{NR_PCP_ORDERS, PAGE_DESC_SIZE};

/// What a page descriptor currently describes.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Not the head of anything: a tail page, metadata, or never used.
    None = 0,
    /// Head of a free block in the zone's `free_area`.
    Buddy = 1,
    /// Head of a block cached on a per-CPU pageset list.
    Pcp = 2,
    /// Head of a free block taken off the free lists for a while (being
    /// returned to the OS); not free, not allocated.
    Isolated = 3,
    /// Head of a page-granular allocation handed out by the page layer.
    Large = 4,
    /// Head page of a slab of small objects.
    Slab = 5,
    /// Tail page of a slab; `head` points at the slab's head descriptor.
    SlabTail = 6,
    /// Head of a freed large block kept in a thread heap's large bins
    /// (`heap/block_bins/`); its large-block fields (class tag, pages)
    /// stay as they were.
    Cached = 7,
    /// Head of a huge block: the only block of a huge section (see
    /// `large/huge/`), handed out.
    Huge = 8,
    /// Head of a freed huge block kept for reuse in the huge-block cache.
    HugeCached = 9,
    /// Head of an exact-size large block cached on a pageset's list of its
    /// class (see `page_alloc/pcp/class_lists.rs`); its `pages` say how long.
    PcpLarge = 10,
}

impl PageKind {
    /// The kind stored as `v`.
    #[inline]
    pub fn from_u8(v: u8) -> PageKind {
        match v {
            1 => PageKind::Buddy,
            2 => PageKind::Pcp,
            3 => PageKind::Isolated,
            4 => PageKind::Large,
            5 => PageKind::Slab,
            6 => PageKind::SlabTail,
            7 => PageKind::Cached,
            8 => PageKind::Huge,
            9 => PageKind::HugeCached,
            10 => PageKind::PcpLarge,
            _ => PageKind::None,
        }
    }

    /// Free or cached somewhere in the allocator: freeing such a block
    /// again is a double free.
    pub fn is_freed(self) -> bool {
        matches!(
            self,
            PageKind::Buddy
                | PageKind::Pcp
                | PageKind::Isolated
                | PageKind::Cached
                | PageKind::HugeCached
                | PageKind::PcpLarge
        )
    }
}

/// The mobility class of a block (the kernel's migratetype). Pageblocks
/// carry one; free lists are kept per migratetype.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MigrateType {
    /// Pinned until freed: slabs of small objects.
    Unmovable = 0,
    /// Page-granular user allocations.
    Movable = 1,
    /// Pages the caller marks as droppable (page API only).
    Reclaimable = 2,
}

/// Number of migratetypes.
pub(crate) const MIGRATE_TYPES: usize = 3;

impl MigrateType {
    /// All migratetypes, in index order.
    pub const ALL: [MigrateType; MIGRATE_TYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
    ];

    /// The type stored at `i` (masking out-of-range values to Unmovable).
    #[inline]
    pub fn from_index(i: usize) -> MigrateType {
        match i {
            1 => MigrateType::Movable,
            2 => MigrateType::Reclaimable,
            _ => MigrateType::Unmovable,
        }
    }

    /// The kernel's short name, used in stats.
    pub fn name(self) -> &'static str {
        match self {
            MigrateType::Unmovable => "unmovable",
            MigrateType::Movable => "movable",
            MigrateType::Reclaimable => "reclaimable",
        }
    }
}

/// Descriptor flag bits (`flags`, every view).
pub mod flags {
    /// The block's memory is not resident and reads as zero: fresh from the
    /// OS, or given back with madvise. Cleared as soon as it is handed out
    /// and written (the allocator's caller owns it then).
    pub const CLEAN: u8 = 1 << 0;
    /// Large: an exact block of `pages` pages (not a power-of-two block of
    /// its order), freed as those pages.
    pub const EXACT: u8 = 1 << 2;
    /// Huge: a block aligned to a section or more (256 MiB), never cached
    /// and never resized in place.
    pub const GIANT: u8 = 1 << 3;
    /// Large or huge: a block the heap profile sampled; its `sample` word
    /// holds the sample's record (`crate::heap_profile`).
    pub const SAMPLED: u8 = 1 << 4;
}

/// One page descriptor (the kernel's `struct page`), as the zone and the
/// pagesets see it. See the module docs for the views of other kinds.
#[repr(C, align(64))]
pub struct Page {
    /// A [`PageKind`].
    pub kind: AtomicU8,
    /// Buddy order of the block this page heads.
    pub order: u8,
    /// For Buddy/Pcp/Isolated: the free list (migratetype) it sits on.
    pub migratetype: u8,
    /// `flags` bits.
    pub flags: u8,
    /// Buddy: the maintenance epoch when the block became free. Other
    /// kinds: their view's word.
    pub free_epoch: u32,
    /// Intrusive list links (free_area, pcp list, or a view's lists).
    pub next: *mut Page,
    /// Intrusive list links (see `next`).
    pub prev: *mut Page,
    /// Slab pages: the slab's head descriptor (the head points to itself).
    /// Null for every page that is not part of a live slab.
    pub head: AtomicPtr<Page>,
    /// The kind-specific part (see the views).
    body: [usize; 4],
}

const _: () = assert!(core::mem::size_of::<Page>() == PAGE_DESC_SIZE);

/// Where a slab's descriptors keep `reserved` ([`Page::object_bound`]).
pub(crate) const OBJECT_BOUND_OFFSET: usize = PAGE_DESC_SIZE - 4;

/// Where a slab tail's three words for sampled objects start
/// (`slab/marks.rs`): the body's first three, cleared by
/// [`Page::clear_tail_words`], clear of the object bound.
pub(crate) const TAIL_WORDS_OFFSET: usize = core::mem::offset_of!(Page, body);
const _: () = assert!(TAIL_WORDS_OFFSET + 3 * 8 <= OBJECT_BOUND_OFFSET);

// SAFETY: a Page is only reached through raw pointers whose use follows the
// ownership rules in the module docs; the cross-thread fields are atomics.
unsafe impl Sync for Page {}
// SAFETY: as above; a descriptor carries no thread affinity of its own.
unsafe impl Send for Page {}

impl Page {
    /// A zeroed descriptor (`PageKind::None`), the state of fresh memory.
    pub const fn zeroed() -> Page {
        Page {
            kind: AtomicU8::new(0),
            order: 0,
            migratetype: 0,
            flags: 0,
            free_epoch: 0,
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
            head: AtomicPtr::new(ptr::null_mut()),
            body: [0; 4],
        }
    }

    /// The current kind.
    #[inline]
    pub fn kind(&self) -> PageKind {
        PageKind::from_u8(self.kind.load(Relaxed))
    }

    /// Sets the kind.
    #[inline]
    pub fn set_kind(&self, k: PageKind) {
        self.kind.store(k as u8, Relaxed);
    }

    /// The migratetype field as an enum.
    #[inline]
    pub fn mt(&self) -> MigrateType {
        MigrateType::from_index(self.migratetype as usize)
    }

    /// Bytes [`OBJECT_BOUND_OFFSET`].. of the descriptor: the slab
    /// view's `reserved` (objects carved), which the free fast path's
    /// object check compares with. Zero in every descriptor that is not a
    /// live slab's head (no other view writes these bytes and
    /// `reset` clears them), so on any other page that check fails
    /// without a test of the kind.
    #[inline]
    pub fn object_bound(&self) -> u16 {
        // SAFETY: the two bytes lie inside the descriptor (asserted below)
        // and are plain data in every view.
        unsafe {
            (self as *const Page)
                .cast::<u8>()
                .add(OBJECT_BOUND_OFFSET)
                .cast::<u16>()
                .read()
        }
    }

    /// Zeroes the words a slab tail keeps sampled objects in
    /// ([`TAIL_WORDS_OFFSET`]): a new slab's tails may have been any view.
    #[inline]
    pub fn clear_tail_words(&mut self) {
        self.body[..3].fill(0);
    }

    /// Returns the descriptor to the all-zero `None` state.
    #[inline]
    pub fn reset(&mut self) {
        *self = Page::zeroed();
    }
}

/// A page-granular block handed out (or cached) by the large-block layer:
/// the view of `Large`, `Cached`, `Huge` and `HugeCached` heads.
#[repr(C, align(64))]
pub struct LargeBlock {
    /// A [`PageKind`]: Large, Cached, Huge or HugeCached.
    pub kind: AtomicU8,
    /// Buddy order of the block (Large, Cached); 0 for huge blocks.
    pub order: u8,
    _migratetype: u8,
    /// `flags` bits: EXACT, CLEAN.
    pub flags: u8,
    /// Pages the caller may use (its usable size is this × 4 KiB); for an
    /// EXACT block also the range freed with it.
    pub pages: u32,
    /// Huge blocks: the list of every huge block (see `large/huge/`).
    pub next: *mut LargeBlock,
    /// Huge blocks: the list of every huge block.
    pub prev: *mut LargeBlock,
    _head: AtomicPtr<Page>,
    /// Huge blocks: bytes of the block's mapping (at least `pages` pages).
    pub len: usize,
    /// With `flags::SAMPLED`: the heap profile's record of the block's
    /// sample (its owner's, like the block).
    pub sample: usize,
    /// PcpLarge blocks: the pages found resident when the block was last
    /// measured on its list, or [`NOT_MEASURED`]
    /// (`page_alloc/pcp/class_lists_resident.rs`).
    pub resident: u16,
    /// PcpLarge blocks, measured: how many of those are its first pages.
    pub head: u16,
    _pad: u32,
    _rest: [usize; 1],
}

/// [`LargeBlock::resident`] of a cached block not measured since it was
/// freed.
pub(crate) const NOT_MEASURED: u16 = u16::MAX;

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<LargeBlock>() == PAGE_DESC_SIZE);
    assert!(offset_of!(LargeBlock, kind) == offset_of!(Page, kind));
    assert!(offset_of!(LargeBlock, order) == offset_of!(Page, order));
    assert!(offset_of!(LargeBlock, flags) == offset_of!(Page, flags));
    assert!(offset_of!(LargeBlock, pages) == offset_of!(Page, free_epoch));
    assert!(offset_of!(LargeBlock, next) == offset_of!(Page, next));
    assert!(offset_of!(LargeBlock, prev) == offset_of!(Page, prev));
    assert!(offset_of!(LargeBlock, _head) == offset_of!(Page, head));
};

impl LargeBlock {
    /// Makes the block headed by `head` a live large block of `order` whose
    /// caller may use `pages` pages (`flags`: EXACT for a block freed as
    /// its pages). The one place a block becomes `Large`.
    ///
    /// # Safety
    /// The caller owns the block (fresh from the page allocator, or taken
    /// out of a cache); its other descriptors are `None`.
    #[inline]
    pub unsafe fn make(head: *mut Page, order: u32, pages: usize, flags: u8) -> *mut LargeBlock {
        let b = head.cast::<LargeBlock>();
        // SAFETY: same layout (asserted above); the caller owns the block.
        unsafe {
            (*b).order = order as u8;
            (*b).flags = flags;
            (*b).pages = pages as u32;
            (*b).kind
                .store(PageKind::Large as u8, core::sync::atomic::Ordering::Release);
        }
        b
    }

    /// Undoes [`make`](Self::make) before the block goes back to the page
    /// allocator: the head keeps only its order (the memory is dirty). The
    /// one place a large block stops being one.
    ///
    /// # Safety
    /// The caller owns the block and no longer uses it.
    #[inline]
    pub unsafe fn unmake(b: *mut LargeBlock) -> *mut Page {
        // SAFETY: the caller owns the block.
        unsafe {
            (*b).kind.store(PageKind::None as u8, Relaxed);
            (*b).flags = 0;
            (*b).pages = 0;
        }
        b.cast()
    }

    /// The kind.
    #[inline]
    pub fn kind(&self) -> PageKind {
        PageKind::from_u8(self.kind.load(Relaxed))
    }

    /// Sets the kind.
    #[inline]
    pub fn set_kind(&self, k: PageKind) {
        self.kind.store(k as u8, Relaxed);
    }
}

/// A descriptor that can sit on a [`PageList`]: a view with the common
/// `next`/`prev` links.
///
/// # Safety
/// `links` returns pointers to the element's own two link fields.
pub unsafe trait Linked: Sized {
    /// The `next` and `prev` fields of `p`.
    ///
    /// # Safety
    /// `p` is a valid descriptor.
    unsafe fn links(p: *mut Self) -> (*mut *mut Self, *mut *mut Self);
}

// SAFETY: next and prev are Page's own link fields.
unsafe impl Linked for Page {
    #[inline(always)]
    unsafe fn links(p: *mut Page) -> (*mut *mut Page, *mut *mut Page) {
        // SAFETY: p is valid (contract).
        unsafe { (ptr::addr_of_mut!((*p).next), ptr::addr_of_mut!((*p).prev)) }
    }
}

/// A doubly-linked list of descriptors through `next`/`prev`, with a count.
///
/// Invariants: `len` is the number of linked descriptors; `head.prev` and
/// `tail.next` are null; empty iff `head` is null iff `tail` is null. The
/// list does not own its elements; the caller holds the lock that guards
/// both the list and the descriptors on it.
pub struct PageList<T: Linked = Page> {
    head: *mut T,
    tail: *mut T,
    len: usize,
}

// SAFETY: a PageList is plain data behind whatever lock guards its owner.
unsafe impl<T: Linked> Send for PageList<T> {}

impl<T: Linked> PageList<T> {
    /// An empty list.
    pub const fn new() -> PageList<T> {
        PageList {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            len: 0,
        }
    }

    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// The first element, or null.
    #[inline]
    pub fn first(&self) -> *mut T {
        self.head
    }

    /// The last element, or null.
    #[inline]
    pub fn last(&self) -> *mut T {
        self.tail
    }

    /// Links `p` at the front.
    ///
    /// # Safety
    /// `p` is a valid descriptor on no list, owned by the caller.
    #[inline]
    pub unsafe fn push_front(&mut self, p: *mut T) {
        // SAFETY: p and the current head are valid descriptors owned by the
        // caller (list invariant + this function's contract).
        unsafe {
            let (next, prev) = T::links(p);
            *prev = ptr::null_mut();
            *next = self.head;
            if self.head.is_null() {
                self.tail = p;
            } else {
                *T::links(self.head).1 = p;
            }
        }
        self.head = p;
        self.len += 1;
    }

    /// Links `p` at the back.
    ///
    /// # Safety
    /// As [`PageList::push_front`].
    #[inline]
    pub unsafe fn push_back(&mut self, p: *mut T) {
        // SAFETY: as push_front.
        unsafe {
            let (next, prev) = T::links(p);
            *next = ptr::null_mut();
            *prev = self.tail;
            if self.tail.is_null() {
                self.head = p;
            } else {
                *T::links(self.tail).0 = p;
            }
        }
        self.tail = p;
        self.len += 1;
    }

    /// Links `p` just before `at`.
    ///
    /// # Safety
    /// `at` is on this list; `p` as in [`PageList::push_front`].
    #[inline]
    pub unsafe fn insert_before(&mut self, at: *mut T, p: *mut T) {
        // SAFETY: at is on this list, so it and its neighbours are valid;
        // p is owned by the caller (contract).
        unsafe {
            let before = *T::links(at).1;
            if before.is_null() {
                self.push_front(p);
                return;
            }
            let (next, prev) = T::links(p);
            *next = at;
            *prev = before;
            *T::links(before).0 = p;
            *T::links(at).1 = p;
        }
        self.len += 1;
    }

    /// The element before `p`, or null.
    ///
    /// # Safety
    /// `p` is on this list.
    #[inline]
    pub unsafe fn prev_of(&self, p: *mut T) -> *mut T {
        // SAFETY: p is a valid element (contract).
        unsafe { *T::links(p).1 }
    }

    /// Unlinks `p`.
    ///
    /// # Safety
    /// `p` is on this list.
    #[inline]
    pub unsafe fn remove(&mut self, p: *mut T) {
        // SAFETY: p is on this list, so it and its neighbours are valid.
        unsafe {
            let (next, prev) = T::links(p);
            let (n, pr) = (*next, *prev);
            if pr.is_null() {
                self.head = n;
            } else {
                *T::links(pr).0 = n;
            }
            if n.is_null() {
                self.tail = pr;
            } else {
                *T::links(n).1 = pr;
            }
            *next = ptr::null_mut();
            *prev = ptr::null_mut();
        }
        self.len -= 1;
    }

    /// Unlinks and returns the first element, or null.
    ///
    /// # Safety
    /// The list's elements are valid (list invariant).
    #[inline]
    pub unsafe fn pop_front(&mut self) -> *mut T {
        let p = self.head;
        if !p.is_null() {
            // SAFETY: p is the head of this list.
            unsafe { self.remove(p) };
        }
        p
    }

    /// Unlinks and returns the last element, or null.
    ///
    /// # Safety
    /// The list's elements are valid (list invariant).
    #[inline]
    pub unsafe fn pop_back(&mut self) -> *mut T {
        let p = self.tail;
        if !p.is_null() {
            // SAFETY: p is the tail of this list.
            unsafe { self.remove(p) };
        }
        p
    }

    /// The element after `p`, or null.
    ///
    /// # Safety
    /// `p` is on this list.
    #[inline]
    pub unsafe fn next_of(&self, p: *mut T) -> *mut T {
        // SAFETY: p is a valid element (contract).
        unsafe { *T::links(p).0 }
    }

    /// Checks the list invariants by walking it; returns the element count.
    ///
    /// # Safety
    /// The list's elements are valid.
    pub unsafe fn check(&self) -> usize {
        let mut n = 0;
        let mut prev: *mut T = ptr::null_mut();
        let mut p = self.head;
        while !p.is_null() {
            // SAFETY: every linked element is valid (contract).
            unsafe {
                let (next, back) = T::links(p);
                assert!(*back == prev, "page list: broken prev link");
                prev = p;
                p = *next;
            }
            n += 1;
            assert!(n <= self.len, "page list: longer than its count (cycle?)");
        }
        assert!(prev == self.tail, "page list: tail mismatch");
        assert!(n == self.len, "page list: count mismatch");
        n
    }
}

impl<T: Linked> Default for PageList<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The pcp list index of (migratetype, order): the kernel's
/// `order_to_pindex`, one list per pair for orders 0..=COSTLY_ORDER.
#[inline]
pub(crate) const fn order_to_pindex(mt: MigrateType, order: u32) -> usize {
    mt as usize * NR_PCP_ORDERS + order as usize
}

/// The order of pcp list `pindex` (`pindex_to_order`).
#[inline]
pub(crate) const fn pindex_to_order(pindex: usize) -> u32 {
    (pindex % NR_PCP_ORDERS) as u32
}
