//! The calling thread's heap pointer, and whether its exit hook has run.
//!
//! On x86-64 it is one word of static TLS reached with the initial-exec
//! sequence (`mov reg, [rip + sym@GOTTPOFF]; mov reg, fs:[reg]`), written in
//! inline assembly because stable Rust cannot ask for that TLS model and
//! the default one for a shared object calls `__tls_get_addr`. The symbol
//! is hidden, so an executable that links pcpalloc and a preloaded
//! libpcpalloc.so each keep their own. Elsewhere a `thread_local!` cell.
//!
//! The slot holds the heap's address and starts as the static empty heap's
//! (a relocated word in the TLS image, which the dynamic loader relocates
//! before any thread's block is copied from it), so the fast path needs no
//! "initialised?" test: an empty heap's bins are empty, so the first
//! allocation takes the slow path, which sets the heap up.

#[cfg(not(target_arch = "x86_64"))]
use core::ptr::addr_of;

use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::heap::heap::Heap;

use super::record;
#[cfg(not(target_arch = "x86_64"))]
use crate::heap::heap::EMPTY_HEAP;

#[cfg(target_arch = "x86_64")]
mod imp {
    use core::arch::{asm, global_asm};

    global_asm!(
        ".pushsection .tdata,\"awT\",@progbits",
        ".p2align 3",
        ".globl __pcpalloc_tls_heap_v2",
        ".hidden __pcpalloc_tls_heap_v2",
        ".type __pcpalloc_tls_heap_v2, @object",
        ".size __pcpalloc_tls_heap_v2, 8",
        "__pcpalloc_tls_heap_v2:",
        ".quad {empty}",
        ".globl __pcpalloc_tls_state_v2",
        ".hidden __pcpalloc_tls_state_v2",
        ".type __pcpalloc_tls_state_v2, @object",
        ".size __pcpalloc_tls_state_v2, 8",
        "__pcpalloc_tls_state_v2:",
        ".quad 0",
        ".popsection",
        empty = sym crate::heap::heap::EMPTY_HEAP,
    );

    #[inline(always)]
    pub fn get_state() -> usize {
        let v: usize;
        // SAFETY: as in get, for the state word.
        unsafe {
            asm!(
                "mov {0}, qword ptr [rip + __pcpalloc_tls_state_v2@GOTTPOFF]",
                "mov {0}, qword ptr fs:[{0}]",
                out(reg) v,
                options(nostack, readonly, preserves_flags)
            );
        }
        v
    }

    #[inline(always)]
    pub fn set_state(v: usize) {
        // SAFETY: as in set, for the state word.
        unsafe {
            asm!(
                "mov {t}, qword ptr [rip + __pcpalloc_tls_state_v2@GOTTPOFF]",
                "mov qword ptr fs:[{t}], {v}",
                t = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags)
            );
        }
    }

    #[inline(always)]
    pub fn get() -> usize {
        let v: usize;
        // SAFETY: reads this thread's own TLS word through the module's TLS
        // offset; the slot always exists for a loaded module.
        unsafe {
            asm!(
                "mov {0}, qword ptr [rip + __pcpalloc_tls_heap_v2@GOTTPOFF]",
                "mov {0}, qword ptr fs:[{0}]",
                out(reg) v,
                options(nostack, readonly, preserves_flags, pure)
            );
        }
        v
    }

    #[inline(always)]
    pub fn set(v: usize) {
        // SAFETY: writes this thread's own TLS word (see get).
        unsafe {
            asm!(
                "mov {t}, qword ptr [rip + __pcpalloc_tls_heap_v2@GOTTPOFF]",
                "mov qword ptr fs:[{t}], {v}",
                t = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags)
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use core::cell::Cell;

    std::thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(0) };
        static STATE: Cell<usize> = const { Cell::new(0) };
    }

    #[inline(always)]
    pub fn get_state() -> usize {
        STATE.with(|s| s.get())
    }

    #[inline(always)]
    pub fn set_state(v: usize) {
        STATE.with(|s| s.set(v))
    }

    // 0 stands for the empty heap here (a thread-local cannot start with
    // a static's address).

    #[inline(always)]
    pub fn get() -> usize {
        SLOT.with(|s| s.get())
    }

    #[inline(always)]
    pub fn set(v: usize) {
        SLOT.with(|s| s.set(v))
    }
}

/// This thread's heap (the static empty heap until the first slow path).
#[inline(always)]
#[cfg(target_arch = "x86_64")]
pub(crate) fn heap() -> *mut Heap {
    imp::get() as *mut Heap
}

/// Sets this thread's heap.
#[inline]
#[cfg(target_arch = "x86_64")]
pub(crate) fn set_heap(h: *mut Heap) {
    imp::set(h as usize);
}

/// This thread's heap (the static empty heap until the first slow path).
#[inline(always)]
#[cfg(not(target_arch = "x86_64"))]
pub fn heap() -> *mut Heap {
    (addr_of!(EMPTY_HEAP) as usize).wrapping_add(imp::get()) as *mut Heap
}

/// Sets this thread's heap.
#[inline]
#[cfg(not(target_arch = "x86_64"))]
pub fn set_heap(h: *mut Heap) {
    imp::set((h as usize).wrapping_sub(addr_of!(EMPTY_HEAP) as usize));
}

/// Whether this thread's exit hook has run: it has no heap any more, and
/// whatever it allocates from now on (later key destructors) comes from
/// the shared late heap (see `late.rs`).
#[inline]
pub(crate) fn exited() -> bool {
    imp::get_state() == STATE_EXITED
}

/// Marks this thread as past its exit hook.
pub(crate) fn set_exited() {
    imp::set_state(STATE_EXITED);
}

/// In a forked child: the forking thread is alive, whatever it was.
pub(crate) fn set_alive() {
    imp::set_state(0);
}

const STATE_EXITED: usize = 1;

/// The thread key whose destructor runs the thread-exit hook (u32::MAX
/// until created); while tracing it also finds the thread's heap.
pub(super) static THREAD_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

/// The calling thread's heap if it has one, else the static empty heap
/// (never null). While tracing, when the TLS pointer stays the empty heap,
/// it is found through the thread's pthread key.
pub(crate) fn current_heap() -> *mut Heap {
    let h = heap();
    if record::every_op_slow() {
        let k = keyed_heap();
        if !k.is_null() {
            return k;
        }
    }
    h
}

/// The heap stored under the thread's pthread key, or null.
pub(super) fn keyed_heap() -> *mut Heap {
    let key = THREAD_KEY.load(Relaxed);
    if key == u32::MAX {
        return core::ptr::null_mut();
    }
    // SAFETY: pthread_getspecific on a created key has no preconditions.
    unsafe { libc::pthread_getspecific(key) }.cast()
}
