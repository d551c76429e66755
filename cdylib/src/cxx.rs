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
//! A program may replace `operator new(size_t)` and `operator
//! delete(void*)` alone (or the aligned pair), with blocks of its own — a
//! header before each, say. libstdc++ defines every other form through
//! those two, so array, sized and nothrow calls reach the replacement; so
//! do ours (below, "Forwarding").
//!
//! With the report at exit on (`PCPALLOC_STATS=1`), calls are counted
//! (`cxx_new`, `cxx_new_aligned`, `cxx_delete_sized`,
//! `cxx_delete_aligned`): that is how a test sees the routing.

use core::ffi::{c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use pcpalloc_core::c as m;
use pcpalloc_core::c::{count_cxx, CxxCall};

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

/// Defines plain `operator new` `$name` (exported with `#[no_mangle]`):
/// on x86-64 it calls the allocation (a Rust frame that cannot throw, on
/// the stack only during the call) and returns what it got, or — null —
/// jumps (no frame of ours left) to the C side, which calls the
/// new_handler and may throw. That saves the C loop's frame on every
/// `new`. Elsewhere it jumps to the C loop at once.
macro_rules! new_fast {
    ($(#[$attr:meta])* $vis:vis fn $name:ident) => {
        $(#[$attr])*
        #[unsafe(naked)]
        $vis extern "C" fn $name(size: usize) -> *mut c_void {
            // The push keeps `size` and aligns the stack to 16 for the call.
            // The CFI directives give the stub an unwind table: a stack
            // through its call (the heap profile's) unwinds past it.
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                "call {fast}",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "test rax, rax",
                "jz 2f",
                "ret",
                "2:",
                "xor esi, esi",
                "jmp {failed}",
                ".cfi_endproc",
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

new_fast!(
    /// C++ `operator new(size_t)`.
    #[no_mangle]
    pub fn _Znwm
);
new_fast!(
    /// `operator new[](size_t)` when nothing is replaced: as `new`.
    fn new_array_direct
);

/// C++ `operator new(size_t, align_val_t)`.
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn _ZnwmSt11align_val_t(size: usize, align: usize) -> *mut c_void {
    #[cfg(target_arch = "x86_64")]
    core::arch::naked_asm!("jmp {f}", f = sym pcpalloc_cxx_new);
    #[cfg(target_arch = "aarch64")]
    core::arch::naked_asm!("b {f}", f = sym pcpalloc_cxx_new);
}

/// nothrow `operator new(size_t, const nothrow_t&)` and `new[]` when
/// nothing is replaced: the default alignment, no new_handler, null on
/// failure.
#[unsafe(naked)]
extern "C" fn new_nothrow_direct(size: usize) -> *mut c_void {
    #[cfg(target_arch = "x86_64")]
    core::arch::naked_asm!("xor esi, esi", "jmp {f}", f = sym pcpalloc_cxx_new_nothrow);
    #[cfg(target_arch = "aarch64")]
    core::arch::naked_asm!("mov x1, xzr", "b {f}", f = sym pcpalloc_cxx_new_nothrow);
}

/// C++ `operator delete(void*)`.
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPv(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// C++ `operator delete(void*, align_val_t)`.
///
/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPvSt11align_val_t(p: *mut c_void, _align: usize) {
    count_cxx(CxxCall::DeleteAligned);
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// Unsized, array and nothrow `delete` when nothing is replaced (their
/// other arguments are ignored).
///
/// # Safety
/// As `free`.
unsafe extern "C" fn delete_direct(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// Sized `delete` and `delete[]` when nothing is replaced. The size
/// vouches for nothing: `free`'s checks (an interior pointer aborts).
///
/// # Safety
/// As `free`.
unsafe extern "C" fn delete_sized_direct(p: *mut c_void) {
    count_cxx(CxxCall::DeleteSized);
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

/// The aligned `delete` forms when nothing is replaced.
///
/// # Safety
/// As `free`.
unsafe extern "C" fn delete_aligned_direct(p: *mut c_void) {
    count_cxx(CxxCall::DeleteAligned);
    // SAFETY: forwarded contract.
    unsafe { m::free(p.cast()) }
}

// Forwarding.
//
// libstdc++ defines the other forms through the base ones (`operator
// new(size_t)`, `operator delete(void*)` and the aligned pair): `new[]`
// calls `new`; array, sized and nothrow `delete` call `delete`; nothrow
// `new` calls `new` inside try/catch and returns null for what it throws.
// A program that replaces only a base operator gets its blocks back
// through every form. Ours do the same when the program — or any object
// before this library in the lookup scope — replaced one.
//
// Each such form is one indirect jump through its slot below: to our own
// code when nothing is replaced (one instruction more than calling it
// directly, no branch to mispredict), else to the replacement — whose
// arguments are a prefix of the form's, except the sized aligned deletes,
// which go through a stub that drops the size. A slot starts at a stub
// that looks every slot up and jumps again: the library's constructor
// does that before the program runs, but other libraries' constructors
// run before ours and may use the operators. A slot holds its stub or its
// one final value, whoever looked it up, so any thread may run the stub.
//
// Nothrow `new` over a replaced `new` goes to the next object's nothrow
// `new` (libstdc++'s), which calls the replacement inside its try/catch:
// C code cannot catch a C++ exception. Without one (no C++ runtime after
// this library) it goes to the replaced `new` itself, and what that
// throws reaches the caller instead of becoming null.

/// Defines a stub that looks every slot up, then jumps where `$slot` now
/// says with the arguments it came with (three at most: the calls saved
/// and restored around the lookup).
macro_rules! lookup_stub {
    ($stub:ident => $slot:ident) => {
        #[doc = concat!("`", stringify!($slot), "`'s first value: looks it up.")]
        #[unsafe(naked)]
        extern "C" fn $stub() {
            // Three pushes after the return address: the stack is aligned
            // to 16 for the call (and the CFI says so, for unwinders).
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                "push rsi",
                ".cfi_adjust_cfa_offset 8",
                "push rdx",
                ".cfi_adjust_cfa_offset 8",
                "call {look_up}",
                "pop rdx",
                ".cfi_adjust_cfa_offset -8",
                "pop rsi",
                ".cfi_adjust_cfa_offset -8",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "jmp qword ptr [rip + {slot}]",
                ".cfi_endproc",
                look_up = sym look_up,
                slot = sym $slot,
            );
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!(
                "stp x0, x1, [sp, #-32]!",
                "stp x2, x30, [sp, #16]",
                "bl {look_up}",
                "ldp x2, x30, [sp, #16]",
                "ldp x0, x1, [sp], #32",
                "adrp x16, {slot}",
                "ldr x16, [x16, :lo12:{slot}]",
                "br x16",
                look_up = sym look_up,
                slot = sym $slot,
            );
        }
    };
}

/// Defines an exported form that jumps where `$slot` says.
macro_rules! through_slot {
    ($name:ident => $slot:ident) => {
        #[doc = concat!(
            "C++ operator `", stringify!($name), "`: where `", stringify!($slot), "` says."
        )]
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp qword ptr [rip + {slot}]", slot = sym $slot);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!(
                "adrp x16, {slot}",
                "ldr x16, [x16, :lo12:{slot}]",
                "br x16",
                slot = sym $slot,
            );
        }
    };
}

/// The slots, each with its stub and the exported forms that jump through
/// it.
macro_rules! slots {
    ($($(#[$doc:meta])* $slot:ident, $stub:ident: $($name:ident),+;)*) => {$(
        $(#[$doc])*
        static $slot: AtomicPtr<c_void> = AtomicPtr::new($stub as *mut c_void);
        lookup_stub!($stub => $slot);
        $(through_slot!($name => $slot);)+
    )*};
}

slots! {
    /// `new[]` → replaced `new`.
    NEW_ARRAY, look_up_new_array: _Znam;
    /// nothrow `new` → the next object's nothrow `new`.
    NEW_NOTHROW, look_up_new_nothrow: _ZnwmRKSt9nothrow_t;
    /// nothrow `new[]` → the next object's nothrow `new[]`.
    NEW_ARRAY_NOTHROW, look_up_new_array_nothrow: _ZnamRKSt9nothrow_t;
    /// aligned `new[]` → replaced aligned `new`.
    NEW_ALIGNED_ARRAY, look_up_new_aligned_array: _ZnamSt11align_val_t;
    /// aligned nothrow `new` → the next object's.
    NEW_ALIGNED_NOTHROW, look_up_new_aligned_nothrow: _ZnwmSt11align_val_tRKSt9nothrow_t;
    /// aligned nothrow `new[]` → the next object's.
    NEW_ALIGNED_ARRAY_NOTHROW, look_up_new_aligned_array_nothrow:
        _ZnamSt11align_val_tRKSt9nothrow_t;
    /// `delete[]`, nothrow `delete` → replaced `delete`.
    DELETE, look_up_delete: _ZdaPv, _ZdlPvRKSt9nothrow_t;
    /// sized `delete` → replaced `delete`.
    DELETE_SIZED, look_up_delete_sized: _ZdlPvm;
    /// nothrow `delete[]` → replaced `delete[]`, else `delete`.
    DELETE_ARRAY, look_up_delete_array: _ZdaPvRKSt9nothrow_t;
    /// sized `delete[]` → replaced `delete[]`, else `delete`.
    DELETE_ARRAY_SIZED, look_up_delete_array_sized: _ZdaPvm;
    /// aligned `delete[]`, nothrow aligned `delete` → replaced aligned
    /// `delete`.
    DELETE_ALIGNED, look_up_delete_aligned:
        _ZdaPvSt11align_val_t, _ZdlPvSt11align_val_tRKSt9nothrow_t;
    /// sized aligned `delete` → replaced aligned `delete`, without the size.
    DELETE_ALIGNED_SIZED, look_up_delete_aligned_sized: _ZdlPvmSt11align_val_t;
    /// nothrow aligned `delete[]` → replaced aligned `delete[]`, else
    /// aligned `delete`.
    DELETE_ALIGNED_ARRAY, look_up_delete_aligned_array: _ZdaPvSt11align_val_tRKSt9nothrow_t;
    /// sized aligned `delete[]` → the same, without the size.
    DELETE_ALIGNED_ARRAY_SIZED, look_up_delete_aligned_array_sized: _ZdaPvmSt11align_val_t;
}

/// Defines a stub for a sized aligned `delete` over a replacement: drops
/// the size (`(p, size, align)` → `(p, align)`) and jumps where `$slot`
/// says — the replacement, once this stub is in use (it is chosen only
/// together with that value, and a thread that still sees `$slot`'s
/// lookup stub gets there too).
macro_rules! drop_size {
    ($stub:ident => $slot:ident) => {
        #[doc = concat!("Drops the size, then where `", stringify!($slot), "` says.")]
        #[unsafe(naked)]
        extern "C" fn $stub() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!(
                "mov rsi, rdx",
                "jmp qword ptr [rip + {slot}]",
                slot = sym $slot,
            );
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!(
                "mov x1, x2",
                "adrp x16, {slot}",
                "ldr x16, [x16, :lo12:{slot}]",
                "br x16",
                slot = sym $slot,
            );
        }
    };
}

drop_size!(delete_aligned_drop_size => DELETE_ALIGNED);
drop_size!(delete_aligned_array_drop_size => DELETE_ALIGNED_ARRAY);

/// The start of the object (executable or library) that holds `p`, or 0.
fn object_of(p: usize) -> usize {
    if p == 0 {
        return 0;
    }
    // SAFETY: dladdr fills `info` (a plain C struct) or returns 0; it does
    // not allocate.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(p as *const c_void, &mut info) == 0 {
            return 0;
        }
        info.dli_fbase as usize
    }
}

/// Looks the base operators up as the program sees them and sets every
/// slot. Nothing it calls allocates when the symbols are there (dlsym
/// allocates only for an error message). Several threads may run it at
/// once: they store the same values.
extern "C" fn look_up() {
    let ours = object_of(look_up as *const () as usize);
    let global = |name: &CStr| -> usize {
        // SAFETY: looking up a NUL-terminated name.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    };
    let next = |name: &CStr| -> usize {
        // SAFETY: as above; RTLD_NEXT searches the objects after this one.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
    };
    // Only when this library is in the global scope are its operators the
    // program's (dlopen'ed without RTLD_GLOBAL, the ones found first
    // would be libstdc++'s, which are not replacements).
    let in_scope = object_of(global(c"pcpalloc_version")) == ours;
    // The base operator `name` if a replacement comes first, else 0.
    let replaced = |name: &CStr| -> usize {
        let f = global(name);
        if in_scope && f != 0 && object_of(f) != ours {
            f
        } else {
            0
        }
    };
    let either = |a: usize, b: usize| if a != 0 { a } else { b };
    // Nothrow over a replaced `base`: the next object's `name`, else the
    // throwing form `throwing` as the program sees it.
    let nothrow = |base: usize, name: &CStr, throwing: &CStr| {
        if base == 0 {
            0
        } else {
            either(next(name), global(throwing))
        }
    };
    let set = |slot: &AtomicPtr<c_void>, to: usize, direct: *mut c_void| {
        slot.store(if to != 0 { to as *mut c_void } else { direct }, Relaxed);
    };
    let new = replaced(c"_Znwm");
    let new_array = either(replaced(c"_Znam"), new);
    let new_aligned = replaced(c"_ZnwmSt11align_val_t");
    let new_aligned_array = either(replaced(c"_ZnamSt11align_val_t"), new_aligned);
    let delete = replaced(c"_ZdlPv");
    let delete_array = either(replaced(c"_ZdaPv"), delete);
    let delete_aligned = replaced(c"_ZdlPvSt11align_val_t");
    let delete_aligned_array = either(replaced(c"_ZdaPvSt11align_val_t"), delete_aligned);

    let new_nothrow = new_nothrow_direct as *mut c_void;
    let aligned_nothrow = pcpalloc_cxx_new_nothrow as *mut c_void;
    set(&NEW_ARRAY, new, new_array_direct as *mut c_void);
    set(
        &NEW_NOTHROW,
        nothrow(new, c"_ZnwmRKSt9nothrow_t", c"_Znwm"),
        new_nothrow,
    );
    set(
        &NEW_ARRAY_NOTHROW,
        nothrow(new_array, c"_ZnamRKSt9nothrow_t", c"_Znam"),
        new_nothrow,
    );
    set(
        &NEW_ALIGNED_ARRAY,
        new_aligned,
        pcpalloc_cxx_new as *mut c_void,
    );
    set(
        &NEW_ALIGNED_NOTHROW,
        nothrow(
            new_aligned,
            c"_ZnwmSt11align_val_tRKSt9nothrow_t",
            c"_ZnwmSt11align_val_t",
        ),
        aligned_nothrow,
    );
    set(
        &NEW_ALIGNED_ARRAY_NOTHROW,
        nothrow(
            new_aligned_array,
            c"_ZnamSt11align_val_tRKSt9nothrow_t",
            c"_ZnamSt11align_val_t",
        ),
        aligned_nothrow,
    );
    set(&DELETE, delete, delete_direct as *mut c_void);
    set(&DELETE_SIZED, delete, delete_sized_direct as *mut c_void);
    set(&DELETE_ARRAY, delete_array, delete_direct as *mut c_void);
    set(
        &DELETE_ARRAY_SIZED,
        delete_array,
        delete_sized_direct as *mut c_void,
    );
    let aligned = delete_aligned_direct as *mut c_void;
    set(&DELETE_ALIGNED, delete_aligned, aligned);
    set(&DELETE_ALIGNED_ARRAY, delete_aligned_array, aligned);
    // The stubs that drop the size jump through the two slots just set.
    let drop_size = |to: usize, stub: extern "C" fn()| {
        if to != 0 {
            stub as *const () as usize
        } else {
            0
        }
    };
    set(
        &DELETE_ALIGNED_SIZED,
        drop_size(delete_aligned, delete_aligned_drop_size),
        aligned,
    );
    set(
        &DELETE_ALIGNED_ARRAY_SIZED,
        drop_size(delete_aligned_array, delete_aligned_array_drop_size),
        aligned,
    );
}

#[used]
#[link_section = ".init_array"]
static LOOK_UP_AT_START: extern "C" fn() = look_up;
