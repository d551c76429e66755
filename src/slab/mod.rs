//! Small objects (≤ 8 KiB): size classes in 32 KiB slabs (order 3) taken
//! from a page allocator. This folder is the slab itself; the thread heaps
//! that serve objects from slabs are `crate::heap`.
//!
//! - `classes.rs`: the size classes and the slab order;
//! - `slab.rs`: one slab and its descriptor (the [`Slab`] view);
//! - `object.rs`: a free object (its link and its free key);
//! - `marks.rs`: a slab holding sampled objects (the heap profile's);
//! - `remote_list.rs`: a slab's remote list (its `thread_free` word and
//!   the flags the owner learns from).

pub(crate) mod classes;
pub(crate) mod marks;
pub(crate) mod object;
pub(crate) mod remote_list;
#[allow(clippy::module_inception)]
pub(crate) mod slab;

pub use slab::Slab;
