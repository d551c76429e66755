//! pcpalloc: a malloc whose page layer is the Linux kernel page allocator
//! brought to userspace — buddy zones behind per-CPU page caches
//! (*pagesets*) that tune themselves as the kernel's do.
//!
//! # Use
//!
//! As a Rust program's global allocator:
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;
//! # fn main() {}
//! ```
//!
//! or with settings of its own ([`Config`]; the `PCPALLOC_*` environment
//! variables override them):
//!
//! ```no_run
//! use pcpalloc::{Config, PcpAlloc};
//!
//! #[global_allocator]
//! static GLOBAL: PcpAlloc = PcpAlloc::with_config(Config::new().memory_limit(1 << 30));
//! # fn main() {}
//! ```
//!
//! From C and C++ programs, preload the library the `pcpalloc-preload`
//! crate builds: `LD_PRELOAD=libpcpalloc.so program`.
//!
//! # What the API holds
//!
//! - [`PcpAlloc`](struct@PcpAlloc), [`Config`], [`Pagesets`], [`Heuristics`]: the allocator
//!   and its settings.
//! - [`stats()`](fn@stats) and the [`stats`](mod@stats) types: a snapshot of every counter, in
//!   bytes ([`stats::Bytes`]: allocated, active, resident, mapped, peak) and
//!   in the kernel's own terms (zone, pagesets, `free_high`, `alloc_zone`,
//!   lock contention).
//! - [`write_report`]: the same as `name value` lines, with the version and
//!   every setting in force.
//! - [`trim`]: gives every cache and all free memory back to the OS.
//!
//! # Platforms
//!
//! Linux on 64-bit x86 or ARM, with 4 KiB pages (the allocator says so on
//! stderr and fails every allocation on another page size). Tested on
//! x86-64; other targets do not compile.
//!
//! # Names
//!
//! Where a concept is the kernel's, so is its name (`high`, `batch`,
//! `free_count`, `alloc_factor`, `free_high`, `alloc_zone`, `pageblock`,
//! `migratetype`). The documentation refers to the kernel changes it
//! follows by number: *patches 1–9* are the nine patches of Huang Ying's
//! PCP auto-tuning series (Linux 6.7); *seed 002*
//! is Nikhil Dhama's free_count fix (2025) and its variants; *seed 004*
//! is Vlastimil Babka's page stealing series (Linux 3.19).

#![warn(missing_docs)]

#[cfg(not(all(
    target_os = "linux",
    target_pointer_width = "64",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!("pcpalloc supports Linux on x86-64 and aarch64 only");

mod config;
mod geometry;
mod global;
mod large;
mod maint;
mod malloc;
mod meta;
mod page;
mod page_alloc;
mod report;
mod runtime;
mod section;
mod slab;
mod stats_report;
mod sync;
mod sys;
mod trace;
mod util;

pub use config::{Config, Heuristics, Pagesets};
pub use global::PcpAlloc;

/// A snapshot of the allocator's counters, taken without allocating (see
/// [`stats::Stats`]).
pub fn stats() -> stats::Stats {
    runtime::stats()
}

/// Writes the report: `pcpalloc_version`, every setting in force as
/// `PCPALLOC_NAME value` (what the environment would take), then every
/// counter as `name value`, one per line — the text `PCPALLOC_STATS=1`
/// prints at exit. The snapshot is taken before `w` sees any of it, so `w`
/// may allocate.
pub fn write_report(w: &mut dyn core::fmt::Write) -> core::fmt::Result {
    runtime::write_report(w)
}

/// Gives everything cached back: empty slabs, pagesets, and all free memory
/// to the OS. Returns the bytes released to the OS.
pub fn trim() -> usize {
    runtime::trim()
}

/// The types of a stats snapshot.
pub mod stats {
    pub use crate::large::huge::HugeUsage;
    pub use crate::page_alloc::pcp::{tune::PcpState, PcpCounters};
    pub use crate::page_alloc::zone::{watermark::PcpParams, ZoneCounters, ZoneSnapshot};
    pub use crate::stats_report::{
        Bytes, PagesetStats, ReclaimCounters, Stats, MAX_REPORTED_PAGESETS,
    };
}

/// What the tests, the benchmarks and the replay use of the insides. Not
/// an API: it changes with the code.
#[doc(hidden)]
pub mod internals {
    pub use crate::geometry::*;
    pub use crate::large::huge::HugeBlocks;
    pub use crate::maint::{tick as run_tick, TickWork};
    /// The malloc family with C semantics.
    pub mod malloc {
        pub use crate::malloc::*;
    }
    /// Large blocks, driven as values (the replay).
    pub mod large {
        pub use crate::large::{alloc, free, pages_for, usable_size};
    }
    /// The trace format (`PCPALLOC_TRACE`).
    pub mod trace {
        pub use crate::trace::{
            ChunkHeader, Event, FileHeader, Op, BUFFER_EVENTS, FLUSH_AGE_NS, MAGIC, VERSION,
        };
    }
    pub use crate::page::{LargeBlock, MigrateType, Page, PageKind, PageList};
    pub use crate::page_alloc::classes::{
        class_of as large_class_of, class_pages as large_class_pages, NR_LARGE_CLASSES,
    };
    pub use crate::page_alloc::knobs::{FreeCountMode, FreeHighThreshold, Heuristics, Knobs};
    pub use crate::page_alloc::pcp::{tune::PCPF_FREE_HIGH_BATCH, Pageset, PagesetPool};
    pub use crate::page_alloc::zone::{
        Shrink, StealRules, ThpPolicy, Zone, ZoneConfig, ZoneWalk, NO_LIMIT,
    };
    pub use crate::page_alloc::{PageAllocator, Pages};
    pub use crate::runtime::settings::{PcpMode, SETTINGS, TUNABLES};
    pub use crate::runtime::tick::{background_running, pause, tick};
    pub use crate::runtime::{
        check_invariants, check_invariants_quiescent, ensure_init, print_stats, report_to,
    };
    pub use crate::section::{desc_of, page_addr};
    pub use crate::slab::classes::{class_of, CAPACITY, CLASS_SIZE, NR_CLASSES, SLAB_ORDER};
    pub use crate::slab::heap::{Local, PARK_HIGH_MAX, PARK_HIGH_MIN};
    pub use crate::slab::{check_quiescent, free_owned, Heap, HeapRegistry, Owned, Slab};
    pub use crate::stats_report::{contention_percent, count_cxx, CxxCall};
    pub use crate::sys::{current_cpu, inject_map_failures};

    use crate::page::LargeBlock as Block;
    use crate::runtime::{self, PAGES};

    /// The allocator's own page allocator.
    pub fn page_allocator() -> &'static PageAllocator {
        &PAGES
    }

    /// The allocator's own thread heaps.
    pub fn heaps() -> &'static HeapRegistry {
        &runtime::HEAPS
    }

    /// The knobs in force in the allocator's pagesets.
    pub fn knobs() -> Knobs {
        PAGES.knobs()
    }

    /// Replaces the knobs at run time (the benchmark's ablation).
    pub fn set_knobs(k: Knobs) {
        PAGES.set_knobs(k);
    }

    /// The calling thread's heap, if it has one.
    pub fn current_heap() -> Option<&'static Heap> {
        let h = runtime::tls::heap();
        // SAFETY: heaps live forever.
        let h = unsafe { &*h };
        (!h.is_empty_heap()).then_some(h)
    }

    /// Allocates a naturally aligned block of `2^order` pages of
    /// migratetype `mt` through this CPU's pageset (orders ≤ 3). Null when
    /// out of memory. Free it with [`free_pages`].
    pub fn alloc_pages(order: u32, mt: MigrateType) -> *mut u8 {
        let h = runtime::thread_heap();
        if h.is_null() || order > MAX_PAGE_ORDER {
            return core::ptr::null_mut();
        }
        // SAFETY: h is this thread's heap.
        let pages = unsafe { runtime::pages_of(&*h) };
        page_out(pages.alloc(order, mt), order)
    }

    /// Like [`alloc_pages`] but straight from the zone, bypassing the
    /// pagesets (every call takes the zone lock): the "PCP off" baseline.
    pub fn alloc_pages_zone(order: u32, mt: MigrateType) -> *mut u8 {
        if order > MAX_PAGE_ORDER || !ensure_init() {
            return core::ptr::null_mut();
        }
        page_out(PAGES.zone.alloc(order, mt), order)
    }

    fn page_out(head: *mut Page, order: u32) -> *mut u8 {
        if head.is_null() {
            return core::ptr::null_mut();
        }
        // SAFETY: the block is ours.
        unsafe { Block::make(head, order, 1 << order, 0) };
        page_addr(head) as *mut u8
    }

    /// Frees a block from [`alloc_pages`] (or [`alloc_pages_zone`]).
    ///
    /// # Safety
    /// `p` came from `alloc_pages*` and is not used again.
    pub unsafe fn free_pages(p: *mut u8) {
        // SAFETY: forwarded contract; free handles a Large head.
        unsafe { malloc::free(p) };
    }

    /// Frees a block straight to the zone (the "PCP off" baseline).
    ///
    /// # Safety
    /// `p` came from `alloc_pages*` with this `order` and is not used
    /// again.
    pub unsafe fn free_pages_zone(p: *mut u8, order: u32) {
        let d = desc_of(p as usize);
        // SAFETY: p heads a Large block of ours with this order (contract).
        unsafe { PAGES.zone.free(Block::unmake(d.cast()), order) };
    }
}
