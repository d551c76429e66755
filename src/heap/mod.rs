//! Thread heaps: what a thread owns in front of the page allocator. Small
//! objects come from slabs (`crate::slab`) of the heap's own, as UNMOVABLE
//! blocks (RECLAIMABLE for classes whose objects die young:
//! `lifetime.rs`); page-granular blocks of up to 256 KiB are kept in the
//! heap's block bins.
//!
//! - `heap.rs`: a thread heap ([`Heap`], and [`Owned`], its owner's
//!   handle) and the entry points of the fast paths;
//! - `heaps.rs`: every heap of an allocator, and the abandoned ones;
//! - `counters.rs`: what a heap counts, and the bytes in use it reports
//!   from any thread ([`counters::HeapUsage`]);
//! - `bin.rs`: a heap's list of free objects of one class, its thread
//!   cache;
//! - `refill.rs`: a heap's bins refilled from its slabs, and objects and
//!   emptied slabs given back;
//! - `free.rs`: the free path, with its checks;
//! - `remote.rs`: other heaps' objects a thread freed, sent back in
//!   batches;
//! - `lifetime.rs`: which migratetype a class's new slabs take, learnt
//!   from how its slabs come back (grouping by lifetime);
//! - `emptied.rs`: slabs whose every object is free, given back without
//!   waiting for their owner to refill the class (also when the owner is
//!   idle: the tick, a trim, a reclaim);
//! - `parked.rs`: a heap's emptied slabs kept for reuse;
//! - `park_high.rs`: how many emptied slabs a heap keeps parked
//!   (`park_high`, auto-tuned);
//! - `block_bins/`: a heap's freed page-granular blocks of up to 256
//!   KiB, kept for its thread in front of the pageset (the thread cache
//!   of the page-granular band); `blocks.rs`: the heap's entry points
//!   into them;
//! - `check.rs`: the invariant checker ([`check_quiescent`]).
//!
//! The fast paths: allocation pops the class's bin ([`Heap::alloc_fast`]:
//! no atomics, one branch); free pushes on the freeing thread's bin,
//! whichever heap owns the object's slab ([`free()`]), after checking that
//! the pointer starts an object (a multiply, no division) and does not
//! carry the free key (a double free). Objects go back to their slabs in
//! batches: to the slab's own list from its owner's bins, by one CAS per
//! run onto its remote list from other threads' bins.

pub(crate) mod bin;
pub(crate) mod block_bins;
mod blocks;
mod check;
pub(crate) mod counters;
mod emptied;
pub mod free;
#[allow(clippy::module_inception)]
pub(crate) mod heap;
pub(crate) mod heaps;
pub(crate) mod lifetime;
mod park_high;
pub(crate) mod parked;
mod refill;
pub(crate) mod remote;

pub use check::check_quiescent;
#[cfg(feature = "internals")]
pub use free::free_owned;
pub use free::{
    checked_size, finish, free, free_by_every_path, free_checked, free_keyed_or_own, free_remote,
    free_sized, try_free_remote, Freed,
};
pub use heap::Heap;
#[cfg(feature = "internals")]
pub use heap::Owned;
pub use heaps::HeapRegistry;

/// Puts a `PCPALLOC_PROFILE` setting in force: the rate every thread's
/// sampler follows from its next slow path, and whether a free's push
/// gives its bin pop credit (not while sampling: see `bin.rs`).
pub(crate) fn set_profile(s: crate::heap_profile::Setting) {
    crate::heap_profile::configure(s);
    bin::set_pushes_credit(s.mean == 0);
}
