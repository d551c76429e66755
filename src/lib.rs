//! pcpalloc: a malloc whose page layer is the Linux kernel page allocator
//! brought to userspace — buddy zones behind per-CPU page caches that tune
//! themselves as the kernel's do (see DESIGN.md and the seeds).
//!
//! Use it as the global allocator:
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;
//! ```
//!
//! or from C with `LD_PRELOAD=libpcpalloc.so` (the `cdylib/` crate).
//!
//! Layers, each calling only the one below:
//!
//! ```text
//!   malloc API / GlobalAlloc       malloc.rs, global.rs
//!   small objects (slabs, heaps)   slab/
//!   large and huge blocks          large.rs
//!   page allocator front           pages.rs
//!   per-CPU pagesets (PCP)         pcp/
//!   buddy zone                     zone/
//!   sections + page descriptors    section.rs, page.rs
//!   OS                             sys/
//! ```
//!
//! The maintenance tick (`maint.rs`), fork handling (`fork.rs`), the stats
//! report (`stats.rs`) and the tunables (`tunables.rs`) sit beside them.

#![warn(missing_docs)]

pub mod config;
pub mod fork;
pub mod global;
pub mod large;
pub mod maint;
pub mod malloc;
pub mod meta;
pub mod page;
pub mod pages;
pub mod pcp;
pub mod report;
pub mod section;
pub mod slab;
pub mod state;
pub mod stats;
pub mod sync;
pub mod sys;
pub mod tunables;
pub mod util;
pub mod zone;

pub use global::{alloc_pages, alloc_pages_zone, free_pages, free_pages_zone, trim, PcpAlloc};
pub use page::MigrateType;
pub use stats::{snapshot as stats, Stats};

/// Runs the invariant checks that hold at any moment: the zone's free
/// lists and descriptors, and every pageset's lists (each under its lock).
/// Panics on a broken invariant; returns the zone walk.
pub fn check_invariants() -> zone::ZoneWalk {
    pcp::pool::for_each(|ps| {
        ps.check();
    });
    state::ZONE.check_invariants()
}

/// Every invariant check, including those that only hold while no thread
/// allocates or frees: pages cached in pagesets match their counts, and
/// every slab's objects are accounted for (see `slab::check_quiescent`).
/// Returns (slabs, objects in use).
pub fn check_invariants_quiescent() -> (usize, usize) {
    let mut cached = 0;
    pcp::pool::for_each(|ps| cached += ps.check());
    let walk = state::ZONE.check_invariants();
    assert_eq!(
        walk.pcp, cached,
        "pages on pageset lists disagree with pageset counts"
    );
    slab::check_quiescent()
}
