//! pcpalloc: a malloc whose page layer is the Linux kernel page allocator
//! brought to userspace.
//!
//! Layers, each calling only the one below (see DESIGN.md):
//!
//! ```text
//!   malloc API / GlobalAlloc      src/malloc.rs, src/global.rs
//!   small objects (slabs)         src/slab/
//!   large blocks                  src/large.rs
//!   per-CPU pagesets (PCP)        src/pcp/
//!   buddy zone                    src/zone/
//!   sections + page descriptors   src/section.rs, src/page.rs
//!   OS                            src/sys/
//! ```

#![warn(missing_docs)]

pub mod config;
pub mod meta;
pub mod page;
pub mod pcp;
pub mod section;
pub mod sync;
pub mod sys;
pub mod tunables;
pub mod util;
pub mod zone;
