//! C++'s `operator new` and `operator delete`, every variant, under their
//! Itanium-ABI names.
//!
//! `new` may throw, and this library is built with panic=abort, so no Rust
//! frame may be on the stack when it does: each `new` symbol is a naked
//! function that jumps (not calls) to the C code in `cxx_new.c`, which
//! retries through the new_handler and throws `std::bad_alloc` — plain
//! `new` after calling the allocation itself first (`new_fast!`). `delete`
//! never throws and is plain Rust; sized delete takes `free`'s checks (a
//! size from C++ vouches for nothing: an interior pointer must abort as
//! in `free`, not corrupt the heap).
//!
//! With the report at exit on (`PCPALLOC_STATS=1`), calls are counted
//! (`cxx_new`, `cxx_new_aligned`, `cxx_delete_sized`,
//! `cxx_delete_aligned`): that is how a test sees the routing.

use core::ffi::c_void;

use pcpalloc_core::internals::malloc as m;
use pcpalloc_core::internals::{count_cxx, CxxCall};

extern "C" {
    fn pcpalloc_cxx_new(size: usize, align: usize) -> *mut c_void;
    fn pcpalloc_cxx_new_failed(size: usize, align: usize) -> *mut c_void;
    fn pcpalloc_cxx_new_nothrow(size: usize, align: usize) -> *mut c_void;
}

/// For plain `new`'s entry (`new_fast!`): `size` bytes with the default
/// alignment, or null — then the C side takes over (new_handler, throw).
/// Not exported: called directly, not through the PLT.
extern "C" fn pcpalloc_cxx_new_default(size: usize) -> *mut c_void {
    count_cxx(CxxCall::New);
    m::malloc(size).cast()
}

/// Exports plain `operator new` `$name`: on x86-64 it calls the allocation
/// (a Rust frame that cannot throw, on the stack only during the call) and
/// returns what it got, or — null — jumps (no frame of ours left) to the C
/// side, which calls the new_handler and may throw. That saves the C
/// loop's frame on every `new`. Elsewhere it jumps to the C loop at once.
macro_rules! new_fast {
    ($name:ident) => {
        #[doc = concat!("C++ `operator new` variant `", stringify!($name), "`.")]
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $name(size: usize) -> *mut c_void {
            // The push keeps `size` and aligns the stack to 16 for the call.
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!(
                "push rdi",
                "call {fast}",
                "pop rdi",
                "test rax, rax",
                "jz 2f",
                "ret",
                "2:",
                "xor esi, esi",
                "jmp {failed}",
                fast = sym pcpalloc_cxx_new_default,
                failed = sym pcpalloc_cxx_new_failed,
            );
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("mov x1, xzr", "b {f}", f = sym pcpalloc_cxx_new);
        }
    };
}

/// For `cxx_new.c`: `size` bytes aligned to `align` (0: the default), or
/// null.
#[no_mangle]
pub extern "C" fn pcpalloc_cxx_alloc(size: usize, align: usize) -> *mut c_void {
    if align == 0 {
        count_cxx(CxxCall::New);
        m::malloc(size).cast()
    } else {
        count_cxx(CxxCall::NewAligned);
        m::aligned_alloc(align, size).cast()
    }
}

/// Exports `$name` as a naked jump to `$target` after zeroing the second
/// argument (the alignment) when `$zero_align`.
macro_rules! jump_to {
    ($name:ident, $target:ident, zero_align) => {
        #[doc = concat!("C++ `operator new` variant `", stringify!($name), "`.")]
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $name(size: usize) -> *mut c_void {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("xor esi, esi", "jmp {f}", f = sym $target);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("mov x1, xzr", "b {f}", f = sym $target);
        }
    };
    ($name:ident, $target:ident, keep_align) => {
        #[doc = concat!("C++ `operator new` variant `", stringify!($name), "`.")]
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $name(size: usize, align: usize) -> *mut c_void {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {f}", f = sym $target);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {f}", f = sym $target);
        }
    };
}

// operator new(size_t) and new[](size_t)
new_fast!(_Znwm);
new_fast!(_Znam);
// (size_t, const nothrow_t&)
jump_to!(_ZnwmRKSt9nothrow_t, pcpalloc_cxx_new_nothrow, zero_align);
jump_to!(_ZnamRKSt9nothrow_t, pcpalloc_cxx_new_nothrow, zero_align);
// (size_t, align_val_t)
jump_to!(_ZnwmSt11align_val_t, pcpalloc_cxx_new, keep_align);
jump_to!(_ZnamSt11align_val_t, pcpalloc_cxx_new, keep_align);
// (size_t, align_val_t, const nothrow_t&): the third argument is ignored.
jump_to!(
    _ZnwmSt11align_val_tRKSt9nothrow_t,
    pcpalloc_cxx_new_nothrow,
    keep_align
);
jump_to!(
    _ZnamSt11align_val_tRKSt9nothrow_t,
    pcpalloc_cxx_new_nothrow,
    keep_align
);

/// Exports `operator delete` variants that free without a size.
macro_rules! delete {
    ($($name:ident($($arg:ident: $ty:ty),*) $count:expr;)*) => {$(
        #[doc = concat!("C++ `operator delete` variant `", stringify!($name), "`.")]
        ///
        /// # Safety
        /// As `free`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *mut c_void, $($arg: $ty),*) {
            $(let _ = $arg;)*
            if let Some(c) = $count {
                count_cxx(c);
            }
            // SAFETY: forwarded contract.
            unsafe { m::free(p.cast()) }
        }
    )*};
}

delete! {
    _ZdlPv() None;
    _ZdaPv() None;
    _ZdlPvRKSt9nothrow_t(_nt: *const c_void) None;
    _ZdaPvRKSt9nothrow_t(_nt: *const c_void) None;
    _ZdlPvSt11align_val_t(_a: usize) Some(CxxCall::DeleteAligned);
    _ZdaPvSt11align_val_t(_a: usize) Some(CxxCall::DeleteAligned);
    _ZdlPvmSt11align_val_t(_s: usize, _a: usize) Some(CxxCall::DeleteAligned);
    _ZdaPvmSt11align_val_t(_s: usize, _a: usize) Some(CxxCall::DeleteAligned);
    _ZdlPvSt11align_val_tRKSt9nothrow_t(_a: usize, _nt: *const c_void) Some(CxxCall::DeleteAligned);
    _ZdaPvSt11align_val_tRKSt9nothrow_t(_a: usize, _nt: *const c_void) Some(CxxCall::DeleteAligned);
}

/// C++ sized `operator delete(void*, size_t)`.
///
/// # Safety
/// As `free`, and `size` is what the block was allocated with.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPvm(p: *mut c_void, size: usize) {
    count_cxx(CxxCall::DeleteSized);
    let _ = size;
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// C++ sized `operator delete[](void*, size_t)`.
///
/// # Safety
/// As `free`, and `size` is what the array was allocated with.
#[no_mangle]
pub unsafe extern "C" fn _ZdaPvm(p: *mut c_void, size: usize) {
    count_cxx(CxxCall::DeleteSized);
    let _ = size;
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}
