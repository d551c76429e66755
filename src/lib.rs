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
//! - [`PcpAlloc`](struct@PcpAlloc), [`Config`] and its value types: the
//!   allocator and its settings; [`set`] changes the ones that can change
//!   while the program runs.
//! - [`stats()`](fn@stats) and the [`stats`](mod@stats) types: a snapshot of every counter, in
//!   bytes ([`stats::Bytes`]: allocated, active, resident, mapped, peak) and
//!   in the kernel's own terms (zone, pagesets, `free_high`, `alloc_zone`,
//!   lock contention); [`thread_stats`]: the calling thread's allocated
//!   and freed bytes.
//! - [`write_report`] and [`write_report_json`]: the report `PCPALLOC_STATS`
//!   prints at exit, as text (a summary, then `name value` lines) or JSON.
//! - [`profile`]: the heap profile (`PCPALLOC_PROFILE`, [`Config::profile`])
//!   written on demand, and its totals.
//! - [`trim`] gives every cache and all free memory back to the OS;
//!   [`thread_flush`] the calling thread's caches.
//! - [`usable_size`], [`VERSION`].
//!
//! # Platforms
//!
//! Linux on 64-bit x86 or ARM, with 4 KiB pages (the allocator says so on
//! stderr and fails every allocation on another page size). Tested on
//! x86-64. On any other target the crate compiles to nothing, so a
//! program can depend on it everywhere and use it where it runs:
//!
//! ```ignore
//! #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
//! #[global_allocator]
//! static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;
//! ```
//!
//! # Names
//!
//! Where a concept is the kernel's, so is its name (`high`, `batch`,
//! `free_count`, `alloc_factor`, `free_high`, `alloc_zone`, `pageblock`,
//! `migratetype`). The documentation refers to the kernel changes it
//! follows by number: *patches 1–9* are the nine patches of Huang Ying's
//! PCP auto-tuning series (Linux 6.7); *seed 002* is Nikhil Dhama's
//! free_count fix (2025) and its variants, one of which was merged in
//! Linux 6.16; *seed 004* is Vlastimil Babka's page stealing series
//! (Linux 4.0).

#![warn(missing_docs)]
// Elsewhere the crate is empty (see "Platforms" above).
#![cfg(all(
    target_os = "linux",
    target_pointer_width = "64",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod alert;
mod config;
mod geometry;
mod global;
mod heap;
mod heap_profile;
mod large;
mod maint;
mod malloc;
mod meta;
mod page;
mod page_alloc;
mod runtime;
mod section;
mod settings;
mod slab;
mod stats_report;
mod sync;
mod sys;
mod trace;
mod util;

pub use config::{
    Config, FreeCount, FreeHighThreshold, Grouping, Heuristics, HugePages, PageStealing, Pagesets,
    PcpEntry, StatsAtExit,
};
pub use global::PcpAlloc;
pub use runtime::control::{SetError, SetErrorKind};

/// This crate's version (`"0.1.0"`); C programs get it from
/// `pcpalloc_version()`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The usable size of the block at `ptr`: at least what was asked for,
/// and all of it may be used (as `malloc_usable_size`). 0 for null.
///
/// # Safety
/// `ptr` is null or a live block from this allocator (a pointer from
/// another allocator, or to the inside of a block, aborts the program
/// with a line naming it).
pub unsafe fn usable_size(ptr: *const u8) -> usize {
    // SAFETY: forwarded contract.
    unsafe { malloc::usable_size(ptr.cast_mut()) }
}

/// Changes a setting while the program runs: `name` is its variable
/// (`"PCPALLOC_DECAY_MS"`) or its [`Config`] method (`"decay_ms"`),
/// `value` the text the environment would give (`"500"`), parsed by the
/// same code. These can change at run time: `PCPALLOC_DECAY_MS`,
/// `PCPALLOC_HEURISTICS`, `PCPALLOC_FREE_COUNT`,
/// `PCPALLOC_FREE_HIGH_THRESHOLD`, `PCPALLOC_BATCH_SCALE_MAX`,
/// `PCPALLOC_MEMORY_LIMIT` (lowered below what the heap holds, it takes
/// nothing back: later requests fail until enough is freed),
/// `PCPALLOC_STATS` and `PCPALLOC_PROFILE`; the others are read once at
/// start
/// ([`SetErrorKind::NotAtRunTime`]). An error names the setting:
/// `PCPALLOC_MEMORY_LIMIT: below the minimum of 4 MiB`. C:
/// `pcpalloc_set(name, value)`.
///
/// ```no_run
/// pcpalloc::set("decay_ms", "250").unwrap();
/// assert!(pcpalloc::set("PCPALLOC_MEMORY_LIMIT", "1M").is_err()); // below 4 MiB
/// ```
pub fn set(name: &str, value: &str) -> Result<(), SetError> {
    runtime::control::set(name.as_bytes(), value.as_bytes())
}

/// Writes the value of a setting in force — `name` as for [`set`] — to
/// `w`, as the report shows it: `1000` for `PCPALLOC_DECAY_MS`, `none`
/// for no memory limit, `(stderr)` for `PCPALLOC_STATS_FILE` unset.
/// [`SetErrorKind::Unknown`] if there is no such setting. Does not
/// allocate (`w` may). C: `pcpalloc_get(name, buf, len)`.
///
/// ```no_run
/// let mut v = String::new();
/// pcpalloc::get("decay_ms", &mut v).unwrap();
/// assert_eq!(v, "1000");
/// ```
pub fn get(name: &str, w: &mut impl core::fmt::Write) -> Result<(), SetError> {
    runtime::control::get(name.as_bytes(), w)
}

/// Gives back what the calling thread caches — free objects on its bins,
/// cached large blocks, parked empty slabs — and collects what other
/// threads freed of its objects (jemalloc's `thread.tcache.flush`). The
/// thread keeps its heap. C: `pcpalloc_thread_flush()`.
pub fn thread_flush() {
    runtime::thread_flush()
}

/// The calling thread's allocated and freed bytes (jemalloc's
/// `thread.allocated` and `thread.deallocated`; see [`stats::ThreadStats`]
/// for their granularity). Cheap: no lock, no snapshot.
pub fn thread_stats() -> stats::ThreadStats {
    runtime::thread_stats()
}

/// A snapshot of the allocator's counters, taken without allocating (see
/// [`stats::Stats`]).
pub fn stats() -> stats::Stats {
    runtime::stats()
}

/// Writes the report `PCPALLOC_STATS=1` prints at exit: two summary lines
/// starting with `#` (process, program, live / resident / mapped bytes,
/// peak, pageset hit rate), then `pcpalloc_version`, `pid`, `program`,
/// every setting in force as `PCPALLOC_NAME value` (what the environment
/// would take), then every counter as `name value`, one per line. The
/// snapshot is taken before `w` sees any of it, so `w` may allocate.
pub fn write_report(w: &mut dyn core::fmt::Write) -> core::fmt::Result {
    runtime::write_report(w)
}

/// Writes the same report as one JSON object on one line (what
/// `PCPALLOC_STATS=json` prints at exit): `{"pcpalloc_version": ..,
/// "pid": .., "program": .., "summary": {..}, "settings": {..},
/// "counters": {..}}`, the counters under the names of the text report.
pub fn write_report_json(w: &mut dyn core::fmt::Write) -> core::fmt::Result {
    runtime::write_report_json(w)
}

/// Gives everything cached back: empty slabs, pagesets, and all free memory
/// to the OS. Returns the resident bytes given back: how far the heap's
/// resident memory (mincore) fell across the call, so memory never
/// touched, or given back before, does not count (other threads'
/// allocations meanwhile count against it). Costs a mincore walk of the
/// heap before and after.
pub fn trim() -> usize {
    runtime::trim()
}

/// The heap profile (`PCPALLOC_PROFILE`, [`Config::profile`]): sampled
/// allocations with their call stacks, written in pprof's format; see the
/// README's heap profile section. `pcpalloc-prof` (the repository's
/// `prof/` crate) symbolises a profile and draws its flame graph.
pub mod profile {
    pub use crate::heap_profile::Summary;

    /// Writes the heap profile now: to `path` (each `%p` becomes the
    /// process id), or with `None` to the `PCPALLOC_PROFILE_FILE` path
    /// followed by `.1`, `.2`… — what was sampled so far, live and
    /// allocated bytes by stack. Does not allocate. C:
    /// `pcpalloc_profile_dump(path)`.
    pub fn dump(path: Option<&str>) -> std::io::Result<()> {
        if path.is_some_and(|p| p.contains('\0')) {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        match crate::runtime::sampled::dump(path.map(str::as_bytes)) {
            0 => Ok(()),
            e => Err(std::io::Error::from_raw_os_error(e)),
        }
    }

    /// What the profile holds now: samples taken, those still live and
    /// the bytes they stand for, distinct stacks.
    pub fn summary() -> Summary {
        crate::heap_profile::summary()
    }
}

/// The types of a stats snapshot.
pub mod stats {
    pub use crate::large::huge::HugeUsage;
    pub use crate::page_alloc::pcp::{tune::PcpState, PcpCounters};
    pub use crate::page_alloc::zone::{snapshot::ZoneSnapshot, watermark::PcpParams, ZoneCounters};
    pub use crate::stats_report::{
        Bytes, PagesetStats, ReclaimCounters, Stats, Summary, ThreadStats, MAX_REPORTED_PAGESETS,
    };
}

/// The malloc family with C's semantics, and what a C library built on the
/// crate needs beside it (`libpcpalloc.so`, the `cdylib/` crate, is a shim
/// over this module): null and `errno` instead of a Rust allocation
/// error, glibc's extensions, the C++ operators' counters, the settings
/// and report by name, the atfork handlers of a library loaded before
/// us. Rust programs use [`PcpAlloc`] instead.
pub mod c {
    /// The size of a page (4 KiB): `getpagesize()` and `valloc` use it.
    pub use crate::geometry::PAGE_SIZE;
    /// `malloc`, `free`, `calloc`, `realloc`, the aligned allocations and
    /// the size queries, with C's semantics (each documents its own).
    pub use crate::malloc::*;
    /// An atfork handler, and its registration after ours (a library's
    /// `pthread_atfork` handlers, which must run while our locks are
    /// free).
    pub use crate::runtime::fork::{register_after_ours as register_atfork_after_ours, Handler};
    /// The report, in text chunks, and its one-line summary.
    pub use crate::runtime::{report_to, summary};
    /// The C++ operators' calls, counted for the report.
    pub use crate::stats_report::{count_cxx, CxxCall};
    /// Whether the process runs under valgrind, any tool (asked once).
    pub use crate::sys::valgrind::on as on_valgrind;

    /// [`crate::get`] with the name as bytes (`pcpalloc_get`).
    pub fn get_bytes(name: &[u8], w: &mut dyn core::fmt::Write) -> Result<(), crate::SetError> {
        crate::runtime::control::get(name, w)
    }

    /// [`crate::set`] with the name and value as bytes (`pcpalloc_set`).
    pub fn set_bytes(name: &[u8], value: &[u8]) -> Result<(), crate::SetError> {
        crate::runtime::control::set(name, value)
    }

    /// Writes the heap profile to `path` (`None`: the configured one with
    /// a number); 0 or an errno (`pcpalloc_profile_dump`, the C face of
    /// [`crate::profile::dump`]).
    pub fn profile_dump(path: Option<&[u8]>) -> i32 {
        crate::runtime::sampled::dump(path)
    }
}

/// What the tests, the benchmarks and the replay use of the insides. Not
/// an API: it changes with the code.
#[doc(hidden)]
#[cfg(feature = "internals")]
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
    pub use crate::heap::block_bins::{
        BlockBins, BINS_HIGH_MAX, BINS_HIGH_MIN, BIN_CLASSES, BIN_MAX_BYTES, BIN_SLOTS,
    };
    pub use crate::heap::heap::{Local, PARK_HIGH_MAX, PARK_HIGH_MIN};
    pub use crate::heap::remote::{REMOTE_BATCH, REMOTE_SLOTS};
    pub use crate::heap::{check_quiescent, free_owned, Heap, HeapRegistry, Owned};
    pub use crate::page::{flags as page_flags, LargeBlock, MigrateType, Page, PageKind, PageList};
    pub use crate::page_alloc::block_classes::{
        class_of as large_class_of, class_pages as large_class_pages, NR_LARGE_CLASSES,
    };
    pub use crate::page_alloc::knobs::{FreeCountMode, FreeHighThreshold, Heuristics, Knobs};
    pub use crate::page_alloc::pcp::{tune::PCPF_FREE_HIGH_BATCH, Pageset, PagesetPool};
    pub use crate::page_alloc::zone::{
        Grow, Shrink, StealRules, ThpPolicy, Zone, ZoneConfig, ZoneWalk, DEFAULT_DIRTY_RATIO,
        NO_LIMIT,
    };
    pub use crate::page_alloc::{PageAllocator, Pages};
    pub use crate::runtime::fork::{register_after_ours as register_atfork_after_ours, Handler};
    pub use crate::runtime::tick::{background_running, pause, tick};
    pub use crate::runtime::{
        check_invariants, check_invariants_quiescent, ensure_init, print_stats, report_json_to,
        report_to, summary,
    };
    pub use crate::section::{desc_of, lookup, lookup_block, page_addr};
    pub use crate::settings::{PcpMode, SETTINGS, TUNABLES};
    pub use crate::slab::classes::{class_of, CAPACITY, CLASS_SIZE, NR_CLASSES, SLAB_ORDER};
    pub use crate::slab::slab::{tf_count, tf_list};
    pub use crate::slab::Slab;
    pub use crate::stats_report::{contention_percent, count_cxx, CxxCall};
    /// Whether the process runs under valgrind, any tool (asked once).
    pub use crate::sys::valgrind::on as on_valgrind;
    pub use crate::sys::{current_cpu, inject_map_failures};

    use crate::page::LargeBlock as Block;
    use crate::runtime::{self, PAGES};

    /// Writes the heap profile to `path` (`None`: the configured one with
    /// a number); 0 or an errno (the C face of [`crate::profile::dump`]).
    pub fn profile_dump(path: Option<&[u8]>) -> i32 {
        runtime::sampled::dump(path)
    }

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

    /// [`crate::get`] with the name as bytes (the C face).
    pub fn get_bytes(name: &[u8], w: &mut dyn core::fmt::Write) -> Result<(), crate::SetError> {
        runtime::control::get(name, w)
    }

    /// [`crate::set`] with the name and value as bytes (the C face).
    pub fn set_bytes(name: &[u8], value: &[u8]) -> Result<(), crate::SetError> {
        runtime::control::set(name, value)
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

    /// Frees a block from [`alloc_pages`] (or [`alloc_pages_zone`]) the
    /// way `alloc_pages` takes one: to this CPU's pageset, at its order
    /// (not through `free`, whose page-granular blocks go to the thread's
    /// block bins and the pagesets' large lists, where `alloc_pages` never
    /// looks).
    ///
    /// # Safety
    /// `p` came from `alloc_pages*` and is not used again.
    pub unsafe fn free_pages(p: *mut u8) {
        let d = desc_of(p as usize).cast::<crate::page::LargeBlock>();
        let h = runtime::thread_heap();
        // SAFETY: p heads a Large block of ours (contract), made by
        // page_out with its order; h is this thread's heap (it allocated
        // before, so it has one).
        unsafe {
            let order = u32::from((*d).order);
            let pages = runtime::pages_of(&*h);
            pages.free(Block::unmake(d), order);
        }
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
