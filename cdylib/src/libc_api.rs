//! The C and POSIX malloc family, and glibc's `__libc_*` names for it.

use core::ffi::{c_int, c_void};

use pcpalloc_core::c as m;
use pcpalloc_core::c::on_valgrind;

// Under valgrind, memcheck (and every tool that replaces malloc) replaces
// the functions it knows in every object — malloc, free, realloc, calloc,
// the aligned family, malloc_usable_size, C++'s operators — but not
// reallocarray, pvalloc (only libc's), free_sized or free_aligned_sized.
// Those then call the exported functions it replaced, by address, so a
// block never crosses from one heap to the other (reallocarray's block
// freed by memcheck's free was an "Invalid free()" on `ls`).

/// `f`, opaque to the optimiser: a call through it reaches the exported
/// function's address, where valgrind redirects, never an inlined copy.
#[inline(always)]
fn exported<F>(f: F) -> F {
    core::hint::black_box(f)
}

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
    if on_valgrind() {
        let Some(total) = n.checked_mul(size) else {
            // SAFETY: errno's location is valid for the calling thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            return core::ptr::null_mut();
        };
        let f: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void = realloc;
        // SAFETY: forwarded contract.
        return unsafe { exported(f)(p, total) };
    }
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
    if on_valgrind() {
        const PAGE: usize = 4096;
        let Some(s) = size.max(1).checked_next_multiple_of(PAGE) else {
            // SAFETY: errno's location is valid for the calling thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            return core::ptr::null_mut();
        };
        let f: extern "C" fn(usize, usize) -> *mut c_void = memalign;
        return exported(f)(PAGE, s);
    }
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

/// C23 `free_sized`: `free` with the size the block was allocated with
/// (or 0). The size vouches for nothing: the pointer takes `free`'s
/// checks, so an interior pointer aborts with its address.
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: usize) {
    if on_valgrind() {
        let f: unsafe extern "C" fn(*mut c_void) = free;
        // SAFETY: forwarded contract.
        return unsafe { exported(f)(p) };
    }
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// C23 `free_aligned_sized`: an aligned block takes `free`'s full checks
/// (its size class may not be the one its size names).
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, _align: usize, _size: usize) {
    if on_valgrind() {
        let f: unsafe extern "C" fn(*mut c_void) = free;
        // SAFETY: forwarded contract.
        return unsafe { exported(f)(p) };
    }
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

// glibc's internal names for the family. Programs and shim libraries call
// them to reach "the real malloc"; under LD_PRELOAD they must reach this
// heap too, or a block would cross heaps.

/// glibc's `__libc_malloc`.
#[no_mangle]
pub extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    m::malloc(size).cast()
}

/// glibc's `__libc_free`.
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// glibc's `__libc_calloc`.
#[no_mangle]
pub extern "C" fn __libc_calloc(n: usize, size: usize) -> *mut c_void {
    m::calloc(n, size).cast()
}

/// glibc's `__libc_realloc`.
///
/// # Safety
/// As `realloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { m::realloc(p.cast(), size).cast() }
}

/// glibc's `__libc_memalign`.
#[no_mangle]
pub extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
    m::memalign(align, size).cast()
}

/// glibc's `__libc_valloc`.
#[no_mangle]
pub extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
    m::valloc(size).cast()
}

/// glibc's `__libc_pvalloc`.
#[no_mangle]
pub extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
    pvalloc(size)
}

/// glibc's `__posix_memalign`.
///
/// # Safety
/// As `posix_memalign`.
#[no_mangle]
pub unsafe extern "C" fn __posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { m::posix_memalign(out.cast(), align, size) }
}
