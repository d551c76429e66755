//! `libpcpalloc.so`: pcpalloc for C and C++ programs, by `LD_PRELOAD` or
//! by linking. A thin shim over `pcpalloc::internals::malloc`, which holds
//! the C semantics (errno, EINVAL/ENOMEM, outputs untouched on error,
//! fatal reports on bad frees).
//!
//! What it exports:
//! - the C and POSIX family: `malloc`, `free`, `calloc`, `realloc`,
//!   `reallocarray`, `posix_memalign`, `aligned_alloc`, `memalign`,
//!   `valloc`, `pvalloc`, `malloc_usable_size`, C23's `free_sized` and
//!   `free_aligned_sized` (`libc_api.rs`);
//! - glibc's own names for them, `__libc_malloc` and friends, so a program
//!   or shim that calls those reaches the same heap (`libc_api.rs`);
//! - glibc's introspection: `mallinfo`, `mallinfo2`, `mallopt` (what it
//!   maps and what it ignores is in `glibc.rs`), `malloc_info`,
//!   `malloc_stats`, `malloc_trim` (`glibc.rs`);
//! - C++'s `operator new` and `operator delete`, every variant
//!   (`cxx.rs`, `cxx_new.c`);
//! - pcpalloc's own: `pcpalloc_stat` reads one counter by name,
//!   `pcpalloc_report` writes the report through a callback, `pcpalloc_set`
//!   changes a setting at run time, `pcpalloc_version`,
//!   `pcpalloc_thread_flush` and `pcpalloc_thread_stats` (`ext.rs`,
//!   declared in `include/pcpalloc.h`).
//!
//! Every export is `extern "C"`: a panic cannot unwind into C (Rust aborts
//! at the boundary), and the allocator does not panic on these paths. Only
//! C++'s `operator new` throws, from C code compiled with unwind tables.

mod cxx;
mod ext;
mod glibc;
mod libc_api;
mod lines;
