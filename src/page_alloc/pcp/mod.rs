//! Per-CPU pagesets (PCP): cached blocks of order 0..=3, and exact-size
//! large blocks per size class, in front of the zone, with the
//! self-tuning heuristics of seed 000 and seed 002.
//!
//! - `tuner.rs`: the self-tuning rule every cache of the allocator shares
//!   (high and its bounds, growth, decay, free_count, free_high), driven
//!   by the knobs.
//! - `tune.rs`: the order lists' heuristics as pure functions on it
//!   (nr_pcp_alloc, free_unref_page_commit, nr_pcp_high, nr_pcp_free,
//!   decay_pcp_high).
//! - `pageset.rs`: a pageset, its lists and lock, refill and bulk free.
//! - `class_lists.rs`: a pageset's lists of exact-size large blocks, one per size class (the class lists);
//!   `class_lists/share.rs`, what they give the depot.
//! - `class_lists_resident.rs`: what those lists hold resident (measured), and
//!   how it goes back to the OS.
//! - `pageset_class_lists.rs`: a pageset's entry points to those lists.
//! - `depot.rs`: the shared stock of large blocks between the CPUs' class
//!   lists and the zone (a transfer cache).
//! - `pool.rs`: where pagesets live (per CPU, or per thread) and how the
//!   maintenance tick and drain-all reach every one of them.

pub(crate) mod class_lists;
mod class_lists_resident;
pub(crate) mod depot;
pub(crate) mod pageset;
mod pageset_class_lists;
mod pageset_lock;
pub(crate) mod pool;
pub(crate) mod tune;
pub(crate) mod tuner;

pub use pageset::{Pageset, PcpCounters};
pub use pool::PagesetPool;
