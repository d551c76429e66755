//! The runtime: the allocator's one composition root. It owns the
//! process-wide parts — the page allocator (zone and pagesets), the thread
//! heaps, the huge blocks — and everything about their life: process
//! initialisation, a thread's first allocation and its exit, fork, the
//! maintenance tick, the report at exit. Nothing below calls up into it:
//! slabs, large blocks and pagesets are values handed the parts they use.
//!
//! - `process.rs`: the parts, and their initialisation from the
//!   environment;
//! - `thread.rs`: a thread's first allocation and its exit;
//! - `late.rs`: allocations of a thread past its exit hook;
//! - `hooks.rs`: what is registered with the C library (constructor,
//!   destructor);
//! - `tls.rs`: the calling thread's heap pointer;
//! - `paths.rs`: the slow paths that need the runtime;
//! - `reclaim.rs`: what is given back before a request fails;
//! - `trim.rs`: `malloc_trim`, everything cached given back;
//! - `tick.rs`: when the maintenance tick runs (its background thread,
//!   when asked for);
//! - `give_back.rs`: what a free gives back at once, with no thread;
//! - `memcg.rs`: the memory cgroup's limit, kept clear of;
//! - `fork.rs`: the fork handlers and the list of every lock;
//! - `report.rs`: the counters and the invariant checks;
//! - `record.rs`: the allocation trace (`PCPALLOC_TRACE`);
//! - `sampled.rs`: the heap profile's hooks on the slow paths and its
//!   files (`PCPALLOC_PROFILE`);
//! - `files.rs`: the files written per process (report, trace);
//! - `control.rs`: settings changed at run time, and the word said before
//!   a Rust allocation failure aborts.

pub(crate) mod control;
pub(crate) mod files;
pub(crate) mod fork;
pub(crate) mod free_small;
pub(crate) mod give_back;
pub(crate) mod hooks;
pub(crate) mod late;
pub(crate) mod memcg;
pub(crate) mod paths;
pub(crate) mod process;
pub(crate) mod reclaim;
pub(crate) mod record;
pub(crate) mod report;
pub(crate) mod sampled;
pub(crate) mod thread;
pub(crate) mod tick;
pub(crate) mod tls;
pub(crate) mod trim;
pub(crate) mod valgrind;

pub use paths::{alloc_big, alloc_small_slow, finish_free, free_foreign, realloc_huge};
pub use process::{configure_once, free_key};
pub use trim::trim;
// What only `internals` (the tests, the benchmarks) reaches.
#[cfg(feature = "internals")]
pub use process::{ensure_init, pages_of, HEAPS, PAGES};
#[cfg(feature = "internals")]
pub use report::{check_invariants, check_invariants_quiescent, print_stats, report_json_to};
pub use report::{report_to, stats, summary, write_report, write_report_json};
#[cfg(feature = "internals")]
pub use thread::thread_heap;
pub use thread::{thread_flush, thread_stats};
