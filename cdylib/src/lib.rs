//! `libpcpalloc.so`: pcpalloc for C and C++ programs, by `LD_PRELOAD` or
//! by linking. A thin shim over `pcpalloc::c`, which holds
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
//! - glibc's `__register_atfork`, which every object's `pthread_atfork`
//!   calls: the allocator's fork handlers are registered before the first
//!   of anyone else's, so they run last before fork and first after it
//!   (below);
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

/// glibc's `__register_atfork(prepare, parent, child, dso_handle)`, which
/// the `pthread_atfork` stub glibc links into every object calls: another
/// library's handlers — which may allocate, or take a lock under which
/// other threads allocate — are registered after ours, so that, as with
/// glibc's own malloc, the allocator's locks are taken after their prepare
/// handler and released before their parent and child handlers.
///
/// # Safety
/// As `__register_atfork`.
#[no_mangle]
pub unsafe extern "C" fn __register_atfork(
    prepare: pcpalloc_core::c::Handler,
    parent: pcpalloc_core::c::Handler,
    child: pcpalloc_core::c::Handler,
    dso_handle: *mut core::ffi::c_void,
) -> core::ffi::c_int {
    // SAFETY: forwarded contract.
    unsafe { pcpalloc_core::c::register_atfork_after_ours(prepare, parent, child, dso_handle) }
}
