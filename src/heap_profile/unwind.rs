//! A sample's call stack, by the call frame information every x86-64
//! object carries (`.eh_frame`): frame pointers cannot be trusted — Debian
//! builds its libraries without them, and so does Rust's release profile.
//! Two ways, the second the first's fallback:
//!
//! - the cached walk of `cfi.rs`: each frame's rule read once (through
//!   libgcc's `_Unwind_Find_FDE` and `gimli`) and kept by address, then a
//!   few loads per frame — about 400 instructions a sample where libgcc
//!   spends 8,000;
//! - libgcc's own unwinder, `_Unwind_Backtrace` (what glibc's
//!   `backtrace()` and Rust's backtraces use), for a stack with a frame
//!   the cache does not take (a signal frame, a rule by expression).
//!
//! Why it is safe inside `malloc`: libgcc is linked, not loaded on first
//! use (glibc's `backtrace()` dlopens it, which allocates and takes the
//! loader's lock); its one first-use initialisation is a `pthread_once`
//! that does not allocate; and it finds each frame's unwind table with
//! glibc's `_dl_find_object` (glibc 2.35 and libgcc 12 on), which takes no
//! lock and does not allocate — older pairs go through `dl_iterate_phdr`,
//! whose lock is recursive and under which glibc does not allocate (the
//! cached walk also asks it, once a walk, how many objects were
//! unloaded). The one lock libgcc takes is for unwind tables registered at
//! run time (`__register_frame`, used by JIT compilers), and only in
//! libgcc 12 and older: the first search of each such table sorts it with
//! `malloc` under that lock. The thread that takes a sample marks itself
//! busy, so an allocation made while it unwinds is not sampled again;
//! what remains is a JIT program whose own unwinding allocates there at
//! the moment a sample of that same allocation unwinds (see the README).
//!
//! The first frames are the allocator's own: when pcpalloc is a shared
//! object of its own (`libpcpalloc.so` under `LD_PRELOAD`), every frame
//! inside its text is left out; linked into a Rust program, its frames
//! are the program's text too, and the symbolising tool drops them by
//! name.

use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering::*};

use super::maps;

/// Most frames a sample keeps.
pub(crate) const MAX_FRAMES: usize = 64;
/// Words of a captured stack: its frames, and [`TRUNCATED`] after them
/// when there were more.
pub(crate) const STACK_WORDS: usize = MAX_FRAMES + 1;
/// The outermost word of a stack cut at [`MAX_FRAMES`] (no code is at
/// address 1).
pub(crate) const TRUNCATED: usize = 1;

/// A captured stack: its words, innermost first, of which only those
/// pushed are set (the rest is not zeroed first: a memset of half a KiB
/// was 50 instructions a sample).
pub(crate) struct Stack {
    words: [MaybeUninit<usize>; STACK_WORDS],
    len: usize,
}

impl Stack {
    /// An empty stack.
    #[inline(always)]
    pub(crate) fn new() -> Self {
        let mut s = MaybeUninit::<Stack>::uninit();
        // SAFETY: `len` is written; the words may stay uninitialised (a
        // `MaybeUninit` each). Built field by field, as the array's
        // `uninit()` repeated was zeroed by the compiler all the same.
        unsafe {
            core::ptr::addr_of_mut!((*s.as_mut_ptr()).len).write(0);
            s.assume_init()
        }
    }

    /// Adds `word` (the caller keeps to [`STACK_WORDS`]).
    #[inline(always)]
    fn push(&mut self, word: usize) {
        self.words[self.len].write(word);
        self.len += 1;
    }

    /// The words pushed.
    #[inline(always)]
    pub(crate) fn frames(&self) -> &[usize] {
        // SAFETY: the first `len` words were written by `push`.
        unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast::<usize>(), self.len) }
    }
}

/// libgcc's unwinder (`unwind.h`).
mod ffi {
    use core::ffi::{c_int, c_void};

    /// `_Unwind_Reason_Code`: go on with the next frame.
    pub const URC_NO_REASON: c_int = 0;
    /// `_Unwind_Reason_Code`: stop.
    pub const URC_END_OF_STACK: c_int = 5;

    pub type Trace = extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> c_int;

    extern "C" {
        pub fn _Unwind_Backtrace(trace: Trace, arg: *mut c_void) -> c_int;
        pub fn _Unwind_GetIPInfo(ctx: *mut c_void, ip_before_insn: *mut c_int) -> usize;
    }
}

const UNPREPARED: u8 = 0;
const PREPARING: u8 = 1;
const PREPARED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNPREPARED);
/// The allocator's own text, left out of stacks (empty when linked into
/// the program).
static OWN_START: AtomicUsize = AtomicUsize::new(0);
static OWN_END: AtomicUsize = AtomicUsize::new(0);
/// Stacks libgcc walked because a frame needed more than the common rules.
pub(crate) static SLOW_WALKS: AtomicUsize = AtomicUsize::new(0);

/// A stack being captured.
struct Capture<'a> {
    frames: &'a mut Stack,
    own: (usize, usize),
}

extern "C" fn on_frame(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: arg is the Capture `capture` passed, alive for the walk.
    let c = unsafe { &mut *arg.cast::<Capture<'_>>() };
    let mut before: c_int = 0;
    // SAFETY: ctx is the unwinder's context for this frame.
    let ip = unsafe { ffi::_Unwind_GetIPInfo(ctx, &mut before) };
    if ip == 0 {
        return ffi::URC_END_OF_STACK;
    }
    // A return address points after its call: step back into the call
    // (a signal frame's address is the interrupted instruction itself).
    let pc = if before != 0 { ip } else { ip - 1 };
    if c.frames.len == 0 && pc >= c.own.0 && pc < c.own.1 {
        return ffi::URC_NO_REASON;
    }
    if c.frames.len == MAX_FRAMES {
        c.frames.push(TRUNCATED);
        return ffi::URC_END_OF_STACK;
    }
    c.frames.push(pc);
    ffi::URC_NO_REASON
}

/// Fills empty `frames` with the calling thread's stack, innermost first
/// (the allocator's own frames left out where they can be told apart;
/// past [`MAX_FRAMES`], [`TRUNCATED`] last). The caller marks itself busy
/// first (see the module docs).
///
/// The frames' rules come from the cache of `cfi.rs` when every frame
/// has a common one (almost always), else from libgcc.
#[inline(never)]
pub(crate) fn capture(frames: &mut Stack) {
    prepare();
    let regs = Regs::here();
    // SAFETY: the registers of this very function, which is running.
    if unsafe { walk_from(regs, frames) } {
        return;
    }
    capture_libgcc(frames, own_text())
}

/// The allocator's own text, left out at a stack's start.
fn own_text() -> (usize, usize) {
    (OWN_START.load(Relaxed), OWN_END.load(Relaxed))
}

/// Where a walk starts: a function's instruction, stack and frame
/// pointers at one point of it.
#[derive(Clone, Copy)]
pub(crate) struct Regs {
    pc: usize,
    sp: usize,
    fp: usize,
}

impl Regs {
    /// This point's registers, in the frame of the function this is
    /// inlined into.
    #[inline(always)]
    pub(crate) fn here() -> Regs {
        #[cfg(target_arch = "x86_64")]
        {
            let (pc, sp, fp): (usize, usize, usize);
            // SAFETY: reads this point's instruction, stack and frame
            // pointers; nothing is written.
            unsafe {
                core::arch::asm!(
                    "lea {pc}, [rip]",
                    "mov {sp}, rsp",
                    "mov {fp}, rbp",
                    pc = out(reg) pc,
                    sp = out(reg) sp,
                    fp = out(reg) fp,
                    options(nomem, nostack, preserves_flags),
                );
            }
            Regs { pc, sp, fp }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Regs {
            pc: 0,
            sp: 0,
            fp: 0,
        }
    }
}

/// The cached walk of `cfi.rs` alone, from `regs`: fills empty `frames`
/// as [`capture`] does and returns true, or returns false with `frames`
/// empty when a frame needs libgcc's unwinder (and on other
/// architectures than x86-64). It may run on another stack than the one
/// it walks ([`super::sample_stack`]). Call [`prepare`] first.
///
/// # Safety
/// `regs` were taken by [`Regs::here`] in a function of this thread that
/// is still running (suspended in a call until this returns).
pub(crate) unsafe fn walk_from(regs: Regs, frames: &mut Stack) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let own = own_text();
        // SAFETY: forwarded contract.
        let walked = unsafe {
            super::cfi::walk(regs.pc, regs.sp, regs.fp, |pc| {
                if frames.len == 0 && pc >= own.0 && pc < own.1 {
                    return true;
                }
                if frames.len == MAX_FRAMES {
                    frames.push(TRUNCATED);
                    return false;
                }
                frames.push(pc);
                true
            })
        };
        if walked.is_some() {
            return true;
        }
        SLOW_WALKS.fetch_add(1, Relaxed);
        frames.len = 0;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = regs;
    false
}

/// [`capture`] by libgcc's unwinder alone.
#[inline(never)]
fn capture_libgcc(frames: &mut Stack, own: (usize, usize)) {
    let mut c = Capture { frames, own };
    // SAFETY: on_frame matches the callback type and reads `c` only.
    unsafe {
        ffi::_Unwind_Backtrace(on_frame, (&mut c as *mut Capture<'_>).cast());
    }
}

/// Whether [`prepare`] has run to its end.
pub(crate) fn prepared() -> bool {
    STATE.load(Acquire) == PREPARED
}

/// Once per process, at a point where nothing is held (a sample's start,
/// or the library's constructor): finds the allocator's own text and runs
/// the unwinder once, so that its first-use work is done. Other threads
/// arriving meanwhile go on without the own-text range.
pub(crate) fn prepare() {
    if STATE.load(Acquire) == PREPARED
        || STATE
            .compare_exchange(UNPREPARED, PREPARING, Acquire, Relaxed)
            .is_err()
    {
        return;
    }
    let here = prepare as *const () as usize;
    // SAFETY: getauxval has no preconditions.
    let entry = unsafe { libc::getauxval(libc::AT_ENTRY) } as usize;
    let mut own = (0, 0);
    let mut own_inode = 0;
    let mut program_inode = 0;
    maps::for_each(|m| {
        if m.start <= here && here < m.end {
            own = (m.start, m.end);
            own_inode = m.inode;
        }
        if m.start <= entry && entry < m.end {
            program_inode = m.inode;
        }
    });
    // Linked into the program, the allocator's text is the program's.
    if own_inode != 0 && own_inode != program_inode {
        OWN_START.store(own.0, Relaxed);
        OWN_END.store(own.1, Relaxed);
    }
    let mut frames = Stack::new();
    let mut c = Capture {
        frames: &mut frames,
        own: (0, 0),
    };
    // SAFETY: as in capture.
    unsafe {
        ffi::_Unwind_Backtrace(on_frame, (&mut c as *mut Capture<'_>).cast());
    }
    STATE.store(PREPARED, Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn both() -> (Stack, Stack) {
        let mut fast = Stack::new();
        let mut slow = Stack::new();
        capture(&mut fast);
        capture_libgcc(&mut slow, (0, 0));
        (fast, slow)
    }

    /// The cached walk (`cfi.rs`) finds libgcc's frames: the same callers
    /// above the two captures' own frames.
    #[test]
    fn the_fast_walk_agrees_with_libgcc() {
        for _ in 0..2 {
            let slow_walks = SLOW_WALKS.load(Relaxed);
            let (fast, slow) = both();
            assert_eq!(SLOW_WALKS.load(Relaxed), slow_walks, "libgcc walked");
            assert!(fast.frames().len() >= 4, "{} frames", fast.frames().len());
            // capture_libgcc has one frame more of its own (its caller is
            // `both`, as `capture`'s is).
            let slow = slow.frames();
            let fast = fast.frames();
            let tail = fast.len().min(slow.len()) - 1;
            assert_eq!(
                fast[fast.len() - tail..],
                slow[slow.len() - tail..],
                "fast {fast:x?}\nlibgcc {slow:x?}"
            );
        }
    }
}
