//! A stack of the sample's own: a thread takes its samples (the walk of
//! its stack, the record, a peak's file) on a stack its heap maps at its
//! first sample, not on the stack it runs on.
//!
//! The stack a sample falls on may be small: a thread's of 16 KiB, or an
//! alternate signal stack of 8 KiB, half of it the signal frame, in a
//! handler that allocates. Before, each sample asked the kernel first
//! whether the thread was on its alternate stack (`sigaltstack(2)`) and
//! took none there; that call was the largest part of a sample's time
//! (kbuild with the profile on: 1.64% of the run, where the record took
//! 0.67% and the stack 0.62%). No cheaper answer is safe — a cached one
//! goes stale when the program sets an alternate stack later, and an
//! alternate stack may be an array in the thread's own stack — so the
//! question is made moot instead: the sample's work runs here, whatever
//! stack the allocation came from.
//!
//! The walk starts from registers taken in the sampling function before
//! the switch (`unwind::Regs`), so it reads the thread's own frames, which
//! stay put while it runs; the switch itself has no unwind information
//! and is never walked. A stack that needs libgcc's unwinder (a signal
//! frame, a rule by expression: `unwind.rs`) is walked the old way, back
//! on the thread's stack and after the old check. A signal that arrives
//! during the switch runs its handler here (a non-`SA_ONSTACK` one):
//! [`STACK_BYTES`] leaves it room, and an allocation in it is not sampled
//! (the thread is busy).
//!
//! Each heap keeps its stack for good (heaps are never unmapped and go
//! to the next thread whole): a reservation of [`STACK_BYTES`] and a guard
//! page below it, of which the pages a sample touched stay resident
//! (two or three). x86-64 only; elsewhere, and under valgrind (which would
//! take the switch for a stack overflow), samples keep the old way.

use crate::geometry::PAGE_SIZE;
use crate::sys;

/// Bytes of a sample stack (a guard page below them): a walk, a record
/// and a peak's file need a few KiB; the rest is for a signal handler that
/// lands during a sample.
pub(crate) const STACK_BYTES: usize = 128 << 10;

/// Maps a sample stack; its top (16-byte aligned), or 0 when the address
/// space or the commit limit refuses.
pub(crate) fn map() -> usize {
    if !cfg!(target_arch = "x86_64") {
        return 0;
    }
    let Some(base) = sys::reserve(STACK_BYTES + PAGE_SIZE, PAGE_SIZE) else {
        return 0;
    };
    // SAFETY: arithmetic inside the reservation just made.
    let usable = unsafe { base.add(PAGE_SIZE) };
    if !sys::commit(usable, STACK_BYTES) {
        sys::unmap(base, STACK_BYTES + PAGE_SIZE);
        return 0;
    }
    usable as usize + STACK_BYTES
}

/// Calls `f` on the sample stack whose top is `top` (from [`map`]) and
/// returns when it has returned.
///
/// # Safety
/// `top` came from [`map`], and no other call of this thread runs on that
/// stack (the caller is not inside `f`: the heap profile marks the thread
/// busy for the whole sample). A panic in `f` aborts: it cannot unwind
/// out of the `extern "C"` function that calls it.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn run_on(top: usize, f: &mut dyn FnMut()) {
    debug_assert!(top != 0 && top.is_multiple_of(16));
    /// The function called on the new stack: runs the closure `data`
    /// points at.
    unsafe extern "C" fn trampoline(data: *mut u8) {
        // SAFETY: data is the `&mut &mut dyn FnMut()` run_on passed, alive
        // across the call.
        let f = unsafe { &mut *data.cast::<&mut dyn FnMut()>() };
        f();
    }
    let mut f = f;
    let data = (&mut f as *mut &mut dyn FnMut()).cast::<u8>();
    // SAFETY: the old stack pointer is kept in r12, which the callee
    // saves (the System V ABI), and put back after the call; the new
    // stack is ours alone (contract) and 16-byte aligned at the call, as
    // the ABI wants; every register the call may change is declared
    // clobbered.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = sym trampoline,
            in("rdi") data,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

/// Elsewhere there is no switch: [`map`] gives 0 and this is never called.
///
/// # Safety
/// None needed; never called.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn run_on(_top: usize, f: &mut dyn FnMut()) {
    f();
}
