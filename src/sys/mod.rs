//! The platform contract: everything pcpalloc asks of the operating system.
//!
//! Every function here is callable from inside `malloc`: none allocates,
//! none takes a lock of ours, none panics, and none changes errno (each
//! restores it), so a successful `malloc` leaves errno as it found it. Failures come back as `None` or
//! `false`; the caller decides what a failure means. The Linux backend —
//! [`linux`] for memory, clocks and the environment, [`machine`] for what
//! the machine is — is the only code that calls libc for memory and files.
//!
//! Preconditions shared by the memory calls: addresses and lengths are
//! multiples of the page size, and ranges passed back were obtained from
//! [`reserve`] or [`map`] and are not in use by anyone else.

mod inject;
mod linux;
mod machine;
mod memcg;
mod resident;
pub(crate) mod rseq;
pub(crate) mod valgrind;

#[cfg(feature = "internals")]
pub use inject::inject_map_failures;

pub use linux::MapAtError;
pub use linux::{
    advise_huge, coarse_now_ns, collapse, commit, current_cpu, decommit, errno, for_each_env,
    getenv, map, map_at, membarrier, move_mapping, now_ns, page_size, release, release_many,
    reserve, reserve_offset, resident_map, resident_pages, resize_in_place, secure_mode, set_errno,
    unmap, write_fd, write_stderr, yield_now,
};
pub use machine::{
    huge_page_bytes, llc_slice_bytes, mem_total_bytes, nr_cpus_online, nr_cpus_possible,
    program_name,
};
pub use memcg::{find_mem_cgroup, MemCgroup};
pub use resident::{measure_grouped, BATCH_MAX as MEASURE_BATCH_MAX};
