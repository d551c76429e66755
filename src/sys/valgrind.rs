//! Valgrind's client requests: how a program tells memcheck which ranges
//! are heap blocks, and asks whether it runs under valgrind at all.
//!
//! A request is a marker sequence of instructions that does nothing on a
//! real CPU (rotations of a register by a total of 128 bits, then an
//! exchange of a register with itself) and leaves the default answer in
//! the result register; valgrind's instrumentation recognises the marker
//! and answers instead. So each call costs a few register instructions
//! natively, and nothing here allocates or makes a system call. The codes
//! and the marker are valgrind.h's and memcheck.h's (a stable ABI); on an
//! architecture without a marker here every request answers its default.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use core::arch::asm;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

const RUNNING_ON_VALGRIND: usize = 0x1001;
const MALLOCLIKE_BLOCK: usize = 0x1301;
const FREELIKE_BLOCK: usize = 0x1302;
const RESIZEINPLACE_BLOCK: usize = 0x130b;
const CHANGE_ERR_DISABLEMENT: usize = 0x1801;
/// memcheck's requests start at `('M' << 24) | ('C' << 16)`.
const MC_BASE: usize = (b'M' as usize) << 24 | (b'C' as usize) << 16;
const MAKE_MEM_NOACCESS: usize = MC_BASE;
const MAKE_MEM_DEFINED: usize = MC_BASE + 2;

const CHECK_MEM_IS_ADDRESSABLE: usize = MC_BASE + 4;

const UNKNOWN: u8 = 0;
const NATIVE: u8 = 1;
const OTHER_TOOL: u8 = 2;
const MEMCHECK: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether the process runs under valgrind, any tool: asked of valgrind
/// once, then a load of a static.
#[inline]
pub fn on() -> bool {
    state() != NATIVE
}

/// Whether the process runs under valgrind's memcheck (callgrind and
/// cachegrind, which measure the fast paths, are not it).
#[inline]
pub(crate) fn memcheck() -> bool {
    state() == MEMCHECK
}

#[inline]
fn state() -> u8 {
    match STATE.load(Relaxed) {
        UNKNOWN => detect(),
        s => s,
    }
}

#[cold]
fn detect() -> u8 {
    let s = if !running_on_valgrind() {
        NATIVE
    } else {
        // Only memcheck answers its own requests: it finds a word of this
        // stack addressable (0); any other tool leaves the default.
        let word = 0usize;
        let at = &word as *const usize as usize;
        match request(1, &[CHECK_MEM_IS_ADDRESSABLE, at, 8, 0, 0, 0]) {
            0 => MEMCHECK,
            _ => OTHER_TOOL,
        }
    };
    STATE.store(s, Relaxed);
    s
}

/// Sends request `args[0]` with arguments `args[1..]`; `default` natively.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn request(default: usize, args: &[usize; 6]) -> usize {
    let r: usize;
    // SAFETY: the rotations of rdi add up to 128 bits (rdi is unchanged)
    // and `xchg rbx, rbx` changes nothing: natively the sequence only
    // moves `default` through rdx. Under valgrind the tool reads the six
    // words at rax (a live array) and writes its answer to rdx.
    unsafe {
        asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") default => r,
            in("rax") args.as_ptr(),
            inout("rdi") 0usize => _,
            options(nostack),
        );
    }
    r
}

/// Sends request `args[0]` with arguments `args[1..]`; `default` natively.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn request(default: usize, args: &[usize; 6]) -> usize {
    let r: usize;
    // SAFETY: as on x86-64: the rotations of x12 add up to 128 bits and
    // `orr x10, x10, x10` changes nothing; valgrind reads the words at x4
    // and answers in x3.
    unsafe {
        asm!(
            "ror x12, x12, #3",
            "ror x12, x12, #13",
            "ror x12, x12, #51",
            "ror x12, x12, #61",
            "orr x10, x10, x10",
            inout("x3") default => r,
            in("x4") args.as_ptr(),
            inout("x12") 0usize => _,
            options(nostack),
        );
    }
    r
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(always)]
fn request(default: usize, _args: &[usize; 6]) -> usize {
    default
}

/// Whether the process runs under valgrind (any tool), asked now.
fn running_on_valgrind() -> bool {
    request(0, &[RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0]) != 0
}

/// `[p, p + size)` is now a heap block (memcheck: addressable, undefined
/// unless `zeroed`; tracked for leaks and for use after free).
pub(crate) fn malloclike_block(p: *const u8, size: usize, zeroed: bool) {
    request(
        0,
        &[MALLOCLIKE_BLOCK, p as usize, size, 0, zeroed as usize, 0],
    );
}

/// Heap block `p` is freed (memcheck: no longer addressable; an address
/// that is not a block's start is reported as an invalid free).
pub(crate) fn freelike_block(p: *const u8) {
    request(0, &[FREELIKE_BLOCK, p as usize, 0, 0, 0, 0]);
}

/// Heap block `p` of `old` bytes now holds `new` bytes in place.
pub(crate) fn resize_in_place_block(p: *const u8, old: usize, new: usize) {
    request(0, &[RESIZEINPLACE_BLOCK, p as usize, old, new, 0, 0]);
}

/// `[p, p + len)` may not be touched by the program (nor is it scanned
/// for pointers by the leak check).
pub(crate) fn make_mem_noaccess(p: *const u8, len: usize) {
    request(0, &[MAKE_MEM_NOACCESS, p as usize, len, 0, 0, 0]);
}

/// `[p, p + len)` holds defined values.
pub(crate) fn make_mem_defined(p: *const u8, len: usize) {
    request(0, &[MAKE_MEM_DEFINED, p as usize, len, 0, 0, 0]);
}

/// Stops (`true`) or resumes (`false`) the reporting of errors in the
/// calling thread; nested stops need as many resumes.
pub(crate) fn quiet(stop: bool) {
    let arg = if stop { 1 } else { usize::MAX };
    request(0, &[CHANGE_ERR_DISABLEMENT, arg, 0, 0, 0, 0]);
}
