//! `libpcpalloc.so`: the malloc family for `LD_PRELOAD`, a thin shim over
//! `pcpalloc::malloc` (which holds the C semantics: errno, EINVAL/ENOMEM,
//! outputs untouched on error, fatal reports on bad frees).
//!
//! Every export is `extern "C"`: a panic cannot unwind into C (Rust aborts
//! at the boundary), and the allocator does not panic on these paths.

use core::ffi::{c_int, c_void};

use pcpalloc_core::internals::malloc as m;

/// C `malloc`.
#[no_mangle]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    m::malloc(size).cast()
}

/// C `free`.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// Old alias of `free`.
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// C `calloc`.
#[no_mangle]
pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    m::calloc(n, size).cast()
}

/// C `realloc`.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { m::realloc(p.cast(), size).cast() }
}

/// C `reallocarray`.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { m::reallocarray(p.cast(), n, size).cast() }
}

/// POSIX `posix_memalign`.
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { m::posix_memalign(out.cast(), align, size) }
}

/// C11 `aligned_alloc`.
#[no_mangle]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    m::aligned_alloc(align, size).cast()
}

/// Obsolete `memalign`.
#[no_mangle]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    m::memalign(align, size).cast()
}

/// Obsolete `valloc`.
#[no_mangle]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    m::valloc(size).cast()
}

/// Obsolete `pvalloc`.
#[no_mangle]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    m::pvalloc(size).cast()
}

/// glibc `malloc_usable_size`.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    // SAFETY: forwarded contract.
    unsafe { m::usable_size(p.cast()) }
}

/// glibc `malloc_trim`: gives cached and free memory back; 1 if any was
/// released.
#[no_mangle]
pub extern "C" fn malloc_trim(_pad: usize) -> c_int {
    c_int::from(pcpalloc_core::trim() > 0)
}

/// glibc `malloc_stats`: the stats report on stderr.
#[no_mangle]
pub extern "C" fn malloc_stats() {
    pcpalloc_core::internals::print_stats(2);
}
