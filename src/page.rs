//! Page descriptors: our `struct page`, and the intrusive lists built on them.
//!
//! Every 4 KiB page of a section has a 64-byte descriptor at a fixed place
//! in the section's first MAX_ORDER block (see [`crate::section`]). As in
//! the kernel, only the *head* page of a block (free, cached or allocated)
//! carries state; every other descriptor is `PageKind::None` with all fields
//! zero, except the tail pages of a slab, which point at their head.
//!
//! Which fields mean what depends on `kind` (the kernel overlays a union the
//! same way):
//!
//! | kind          | order | migratetype | aux          | next/prev         | slab fields |
//! |---------------|-------|-------------|--------------|-------------------|-------------|
//! | `Buddy`       | yes   | free list   | free epoch   | free_area list    | -           |
//! | `Pcp`         | yes   | pcp list    | -            | pcp list          | -           |
//! | `Isolated`    | yes   | free list   | -            | private list      | -           |
//! | `Large`       | yes   | -           | pages in use | -                 | -           |
//! | `Slab`        | yes   | -           | used objects | heap's slab list  | all         |
//! | `SlabTail`    | -     | -           | -            | -                 | `head` only |
//! | `Cached`      | yes   | -           | -            | -                 | -           |
//!
//! Locking: a descriptor belongs to whoever owns its block: the zone lock
//! for `Buddy`/`Isolated`, the pageset lock for `Pcp`, the owning thread
//! heap for `Slab` (except `thread_free`, which remote threads push to
//! atomically), and the caller for `Large`. `kind` and `head` are atomics
//! because the free path reads them before it knows who the owner is.

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering::Relaxed};

use crate::config::{NR_PCP_ORDERS, PAGE_DESC_SIZE};

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
    /// Head of a freed large block parked in its thread heap's one-block
    /// cache (see `slab/heap.rs`); not free, not allocated.
    Cached = 7,
}

impl PageKind {
    #[inline]
    fn from_u8(v: u8) -> PageKind {
        match v {
            1 => PageKind::Buddy,
            2 => PageKind::Pcp,
            3 => PageKind::Isolated,
            4 => PageKind::Large,
            5 => PageKind::Slab,
            6 => PageKind::SlabTail,
            7 => PageKind::Cached,
            _ => PageKind::None,
        }
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
    /// Pages the caller marks as droppable (Rust page API only).
    Reclaimable = 2,
}

/// Number of migratetypes.
pub const MIGRATE_TYPES: usize = 3;

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

/// Descriptor flag bits (`Page::flags`).
pub mod flags {
    /// The block's memory is not resident and reads as zero: fresh from the
    /// OS, or given back with madvise. Cleared as soon as it is handed out
    /// and written (the allocator's caller owns it then).
    pub const CLEAN: u8 = 1 << 0;
    /// Slab: full, in no list; a local free or a delayed-free notice brings
    /// it back to the partial list.
    pub const IN_FULL: u8 = 1 << 1;
    /// Large: the tail of the power-of-two block past `aux` pages went back
    /// to the buddy (alloc_pages_exact); freed page range is `aux` pages.
    pub const TRIMMED: u8 = 1 << 2;
}

/// One page descriptor (the kernel's `struct page`). See the module docs for
/// which fields are meaningful in which state.
#[repr(C, align(64))]
pub struct Page {
    /// A [`PageKind`].
    pub kind: AtomicU8,
    /// Buddy order of the block this page heads.
    pub order: u8,
    /// For Buddy/Pcp/Isolated: the free list (migratetype) it sits on.
    pub migratetype: u8,
    /// [`flags`] bits.
    pub flags: u8,
    /// Slab: size class index.
    pub class: u8,
    /// Slab: the class's [`crate::slab::classes::ClassInfo`] `shift`.
    pub obj_shift: u8,
    /// Slab: the class's [`crate::slab::classes::ClassInfo`] `inverse`,
    /// here so the free path's object check needs no table.
    pub obj_inverse: u16,
    /// Buddy: tick epoch when it became free. Large: pages in use.
    /// Slab: objects handed out and not yet freed back to this slab.
    pub aux: u32,
    /// Slab: objects carved from the slab so far (the rest is untouched).
    pub reserved: u16,
    /// Slab: objects the slab holds.
    pub capacity: u16,
    /// Intrusive list links (free_area, pcp list, heap slab list, or the
    /// delayed-free stack of a thread heap).
    pub next: *mut Page,
    /// Intrusive list links (see `next`).
    pub prev: *mut Page,
    /// Slab pages: the slab's head descriptor (the head points to itself).
    /// Null for every page that is not part of a live slab.
    pub head: AtomicPtr<Page>,
    /// Slab: the owner's free list of objects (owner-only).
    pub free: *mut u8,
    /// Slab: objects freed by other threads, pushed with CAS; the low bit is
    /// [`crate::slab::slab::FULL_NOTIFY`].
    pub thread_free: AtomicUsize,
    /// Slab: the thread heap owning it. Fixed for the slab's life.
    pub owner: AtomicPtr<u8>,
}

const _: () = assert!(core::mem::size_of::<Page>() == PAGE_DESC_SIZE);

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
            class: 0,
            obj_shift: 0,
            obj_inverse: 0,
            aux: 0,
            reserved: 0,
            capacity: 0,
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
            head: AtomicPtr::new(ptr::null_mut()),
            free: ptr::null_mut(),
            thread_free: AtomicUsize::new(0),
            owner: AtomicPtr::new(ptr::null_mut()),
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

    /// Returns the descriptor to the all-zero `None` state.
    #[inline]
    pub fn reset(&mut self) {
        self.kind.store(0, Relaxed);
        self.order = 0;
        self.migratetype = 0;
        self.flags = 0;
        self.class = 0;
        self.aux = 0;
        self.reserved = 0;
        self.capacity = 0;
        self.next = ptr::null_mut();
        self.prev = ptr::null_mut();
        self.head.store(ptr::null_mut(), Relaxed);
        self.free = ptr::null_mut();
        self.thread_free.store(0, Relaxed);
        self.owner.store(ptr::null_mut(), Relaxed);
    }
}

/// A doubly-linked list of descriptors through `next`/`prev`, with a count.
///
/// Invariants: `len` is the number of linked descriptors; `head.prev` and
/// `tail.next` are null; empty iff `head` is null iff `tail` is null. The
/// list does not own its elements; the caller holds the lock that guards
/// both the list and the descriptors on it.
pub struct PageList {
    head: *mut Page,
    tail: *mut Page,
    len: usize,
}

// SAFETY: a PageList is plain data behind whatever lock guards its owner.
unsafe impl Send for PageList {}

impl PageList {
    /// An empty list.
    pub const fn new() -> PageList {
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
    pub fn first(&self) -> *mut Page {
        self.head
    }

    /// The last element, or null.
    #[inline]
    pub fn last(&self) -> *mut Page {
        self.tail
    }

    /// Links `p` at the front.
    ///
    /// # Safety
    /// `p` is a valid descriptor on no list, owned by the caller.
    #[inline]
    pub unsafe fn push_front(&mut self, p: *mut Page) {
        // SAFETY: p and the current head are valid descriptors owned by the
        // caller (list invariant + this function's contract).
        unsafe {
            (*p).prev = ptr::null_mut();
            (*p).next = self.head;
            if self.head.is_null() {
                self.tail = p;
            } else {
                (*self.head).prev = p;
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
    pub unsafe fn push_back(&mut self, p: *mut Page) {
        // SAFETY: as push_front.
        unsafe {
            (*p).next = ptr::null_mut();
            (*p).prev = self.tail;
            if self.tail.is_null() {
                self.head = p;
            } else {
                (*self.tail).next = p;
            }
        }
        self.tail = p;
        self.len += 1;
    }

    /// Unlinks `p`.
    ///
    /// # Safety
    /// `p` is on this list.
    #[inline]
    pub unsafe fn remove(&mut self, p: *mut Page) {
        // SAFETY: p is on this list, so it and its neighbours are valid.
        unsafe {
            let (n, pr) = ((*p).next, (*p).prev);
            if pr.is_null() {
                self.head = n;
            } else {
                (*pr).next = n;
            }
            if n.is_null() {
                self.tail = pr;
            } else {
                (*n).prev = pr;
            }
            (*p).next = ptr::null_mut();
            (*p).prev = ptr::null_mut();
        }
        self.len -= 1;
    }

    /// Unlinks and returns the first element, or null.
    ///
    /// # Safety
    /// The list's elements are valid (list invariant).
    #[inline]
    pub unsafe fn pop_front(&mut self) -> *mut Page {
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
    pub unsafe fn pop_back(&mut self) -> *mut Page {
        let p = self.tail;
        if !p.is_null() {
            // SAFETY: p is the tail of this list.
            unsafe { self.remove(p) };
        }
        p
    }

    /// Takes all elements, leaving this list empty.
    pub fn take(&mut self) -> PageList {
        core::mem::take(self)
    }

    /// Checks the list invariants by walking it; returns the element count.
    ///
    /// # Safety
    /// The list's elements are valid.
    pub unsafe fn check(&self) -> usize {
        let mut n = 0;
        let mut prev: *mut Page = ptr::null_mut();
        let mut p = self.head;
        while !p.is_null() {
            // SAFETY: every linked element is valid (contract).
            unsafe {
                assert!((*p).prev == prev, "page list: broken prev link");
                prev = p;
                p = (*p).next;
            }
            n += 1;
            assert!(n <= self.len, "page list: longer than its count (cycle?)");
        }
        assert!(prev == self.tail, "page list: tail mismatch");
        assert!(n == self.len, "page list: count mismatch");
        n
    }
}

impl Default for PageList {
    fn default() -> Self {
        Self::new()
    }
}

/// The pcp list index of (migratetype, order): the kernel's
/// `order_to_pindex`, one list per pair for orders 0..=COSTLY_ORDER.
#[inline]
pub const fn order_to_pindex(mt: MigrateType, order: u32) -> usize {
    mt as usize * NR_PCP_ORDERS + order as usize
}

/// The order of pcp list `pindex` (`pindex_to_order`).
#[inline]
pub const fn pindex_to_order(pindex: usize) -> u32 {
    (pindex % NR_PCP_ORDERS) as u32
}
