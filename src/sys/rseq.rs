//! Restartable sequences (rseq): how a thread takes its CPU's pageset lock
//! with plain loads and one plain store, as the kernel takes a CPU's
//! pageset with preemption off.
//!
//! The kernel aborts a critical section — runs its abort handler instead of
//! letting it finish — when the thread is preempted, migrated or signalled
//! inside it, or when another thread asks with
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)`. The section here
//! ([`lock_local`]) reads the thread's index (its CPU number, or its
//! concurrency id `mm_cid`, which no two running threads of a process share)
//! from the rseq area, looks at the lock word of that index's pageset and,
//! if it is free, commits by storing [`LOCAL`] into it. No other thread
//! with that index can run between the look and the store; a thread on
//! another CPU takes the lock with an atomic compare-and-swap and then
//! aborts any section in flight with a membarrier (`sync/cpu_lock.rs`).
//!
//! Which area, chosen once per process ([`select`]):
//! - glibc's (`__rseq_size > 0`, glibc ≥ 2.35): at the thread pointer plus
//!   `__rseq_offset`. The symbols are weak: absent (older glibc, musl), they
//!   read as zero.
//! - our own, registered by each thread at its first pageset entry and
//!   unregistered at its exit ([`thread_exit`]), when nothing else
//!   registered one (the kernel allows one per thread);
//! - none: `sched_getcpu` and a try-lock, as before (no rseq or membarrier
//!   in the kernel, seccomp, valgrind, other architectures).
//!
//! The index is `mm_cid` when the kernel fills it (`AT_RSEQ_FEATURE_SIZE`
//! ≥ 28) and the area covers it (glibc publishes how much of its area it
//! guarantees in `__rseq_size`), the CPU number otherwise.
//!
//! All of it is x86-64 inline assembly; elsewhere the entry is getcpu.
//! The critical-section descriptor (`struct rseq_cs`), the signature before
//! the abort handler (`RSEQ_SIG`) and the area's layout follow the kernel's
//! `include/uapi/linux/rseq.h`.

use core::sync::atomic::{AtomicIsize, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};

/// The value a local entry stores into a free lock word.
pub(crate) const LOCAL: usize = 1;

/// How the pagesets are entered (`pcp_entry` in the report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PcpEntry {
    /// `sched_getcpu` and an atomic try-lock.
    Getcpu = 0,
    /// A critical section on glibc's rseq area.
    RseqGlibc = 1,
    /// A critical section on our own per-thread rseq area.
    RseqOwn = 2,
}

impl PcpEntry {
    /// The name the report and `PCPALLOC_PCP_ENTRY` use.
    pub fn name(self) -> &'static str {
        match self {
            PcpEntry::Getcpu => "getcpu",
            PcpEntry::RseqGlibc => "rseq-glibc",
            PcpEntry::RseqOwn => "rseq-own",
        }
    }
}

/// What `PCPALLOC_PCP_ENTRY` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WantEntry {
    /// The first of rseq-glibc, rseq-own, getcpu that works.
    Auto,
    /// This one, or getcpu (with a line on stderr) if it does not work.
    Only(PcpEntry),
}

static ENTRY: AtomicU8 = AtomicU8::new(PcpEntry::Getcpu as u8);
/// Offset of the area from the thread pointer.
static AREA_OFF: AtomicIsize = AtomicIsize::new(0);
/// Offset of the index in the area: `cpu_id` (4) or `mm_cid` (24).
static INDEX_OFF: AtomicUsize = AtomicUsize::new(CPU_ID_OFF);

const CPU_ID_OFF: usize = 4;
const MM_CID_OFF: usize = 24;
/// `offsetofend(struct rseq, mm_cid)`.
const MM_CID_END: usize = 28;
/// The area's length we register (`ORIG_RSEQ_SIZE`, 32-byte aligned).
#[cfg(target_arch = "x86_64")]
const OWN_LEN: u32 = 32;
/// `RSEQ_SIG` on x86.
#[cfg(target_arch = "x86_64")]
const RSEQ_SIG: u32 = 0x5305_3053;
const AT_RSEQ_FEATURE_SIZE: libc::c_ulong = 27;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: libc::c_long = 1;

/// The entry in force.
#[inline(always)]
pub(crate) fn entry() -> PcpEntry {
    match ENTRY.load(Relaxed) {
        1 => PcpEntry::RseqGlibc,
        2 => PcpEntry::RseqOwn,
        _ => PcpEntry::Getcpu,
    }
}

/// Whether a pageset may be entered by a critical section (then taking it
/// from elsewhere needs [`fence`]).
#[inline(always)]
pub(crate) fn live() -> bool {
    ENTRY.load(Relaxed) != PcpEntry::Getcpu as u8
}

/// Whether the index is `mm_cid` (else the CPU number).
pub(crate) fn index_is_mm_cid() -> bool {
    INDEX_OFF.load(Relaxed) == MM_CID_OFF
}

/// Chooses the entry once per process (at init): what `want` asks for if
/// it works, else getcpu; `Auto` takes the first that works. `no_rseq`
/// (valgrind) rules rseq out. Returns the entry chosen.
pub(crate) fn select(want: WantEntry, no_rseq: bool) -> PcpEntry {
    let e = if no_rseq || !membarrier_register() {
        PcpEntry::Getcpu
    } else {
        match want {
            WantEntry::Auto => {
                if imp::use_glibc() {
                    PcpEntry::RseqGlibc
                } else if imp::use_own() {
                    PcpEntry::RseqOwn
                } else {
                    PcpEntry::Getcpu
                }
            }
            WantEntry::Only(PcpEntry::RseqGlibc) if imp::use_glibc() => PcpEntry::RseqGlibc,
            WantEntry::Only(PcpEntry::RseqOwn) if imp::use_own() => PcpEntry::RseqOwn,
            WantEntry::Only(_) => PcpEntry::Getcpu,
        }
    };
    if let WantEntry::Only(w) = want {
        if w != e {
            super::write_stderr(match w {
                PcpEntry::RseqGlibc => b"pcpalloc: PCPALLOC_PCP_ENTRY=rseq-glibc: no glibc rseq area or membarrier; using getcpu\n",
                PcpEntry::RseqOwn => b"pcpalloc: PCPALLOC_PCP_ENTRY=rseq-own: cannot register an rseq area or membarrier; using getcpu\n",
                PcpEntry::Getcpu => b"",
            });
        }
    }
    ENTRY.store(e as u8, Relaxed);
    e
}

/// In a forked child: the membarrier registration belongs to the process
/// (its mm), so the child asks again; if refused, the child (one thread)
/// falls back to getcpu.
pub(crate) fn after_fork_child() {
    if live() && !membarrier_register() {
        ENTRY.store(PcpEntry::Getcpu as u8, Relaxed);
    }
}

/// The feature size of the kernel's rseq (0 without `AT_RSEQ_FEATURE_SIZE`).
fn feature_size() -> usize {
    // SAFETY: getauxval has no preconditions; 0 when the entry is absent.
    unsafe { libc::getauxval(AT_RSEQ_FEATURE_SIZE) as usize }
}

fn membarrier_register() -> bool {
    super::linux::membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0)
}

/// Fences taken ([`fence`], [`fence_all`]): each a `membarrier` system
/// call, an interrupt on another CPU (the report's `rseq_fences`).
static FENCES: AtomicU64 = AtomicU64::new(0);

/// The fences taken so far.
pub(crate) fn fences() -> u64 {
    FENCES.load(Relaxed)
}

/// Aborts every critical section in flight on the CPU that runs index
/// `index`'s threads (one CPU when the index is the CPU number; every CPU
/// that runs this process's threads when it is `mm_cid`) and orders their
/// committed stores before this call returns. False if the kernel refused.
pub(crate) fn fence(index: usize) -> bool {
    let (flags, cpu) = if index_is_mm_cid() {
        (0, 0)
    } else {
        (MEMBARRIER_CMD_FLAG_CPU, index as libc::c_long)
    };
    FENCES.fetch_add(1, Relaxed);
    super::linux::membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, flags, cpu)
}

/// [`fence`] on every CPU at once (fork's prepare).
pub(crate) fn fence_all() -> bool {
    FENCES.fetch_add(1, Relaxed);
    super::linux::membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0)
}

/// What [`lock_local`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Local {
    /// The lock of pageset `idx` is ours (the word holds [`LOCAL`]); the
    /// section was aborted and restarted `aborts` times first.
    Held { idx: usize, aborts: u32 },
    /// Pageset `idx`'s lock was taken.
    Busy { idx: usize, aborts: u32 },
    /// No usable area (not registered, or the index is not below `n`).
    NoArea,
}

/// Takes the lock word of this thread's pageset, if free, in one critical
/// section: the word of pageset `i` is at `base + i * STRIDE`, for `i` the
/// thread's index, below `n`. Restarted after every abort. The word is
/// released by storing 0 (Release), by whichever thread the caller then
/// runs on.
///
/// # Safety
/// `base + i * STRIDE` is a live, aligned lock word for every `i < n`, that
/// others take only as `sync/cpu_lock.rs` does; [`select`] chose an rseq
/// entry.
#[inline(always)]
pub(crate) unsafe fn lock_local<const STRIDE: usize>(base: *const AtomicUsize, n: usize) -> Local {
    // SAFETY: forwarded contract.
    let (idx, status, aborts) = unsafe { imp::lock_local::<STRIDE>(base, n) };
    match status {
        0 => Local::Held { idx, aborts },
        1 => Local::Busy { idx, aborts },
        _ => {
            if entry() == PcpEntry::RseqOwn && imp::register_own_if_new() {
                // SAFETY: as above; the area is registered now.
                let (idx, status, aborts) = unsafe { imp::lock_local::<STRIDE>(base, n) };
                return match status {
                    0 => Local::Held { idx, aborts },
                    1 => Local::Busy { idx, aborts },
                    _ => Local::NoArea,
                };
            }
            Local::NoArea
        }
    }
}

/// At thread exit (rseq-own): unregisters the thread's own area, so the
/// kernel never writes into its TLS again; its later entries take no
/// pageset.
pub(crate) fn thread_exit() {
    if entry() == PcpEntry::RseqOwn {
        imp::unregister_own();
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use core::arch::{asm, global_asm};
    use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use super::*;

    // Our own area (`struct rseq`, 32 bytes, 32-aligned, `cpu_id` starting
    // as RSEQ_CPU_ID_UNINITIALIZED) and its state, in static TLS reached
    // with the initial-exec sequence, as `runtime/tls.rs` does for the heap.
    global_asm!(
        ".pushsection .tdata,\"awT\",@progbits",
        ".p2align 5",
        ".globl __pcpalloc_rseq_area_v1",
        ".hidden __pcpalloc_rseq_area_v1",
        ".type __pcpalloc_rseq_area_v1, @object",
        ".size __pcpalloc_rseq_area_v1, 32",
        "__pcpalloc_rseq_area_v1:",
        ".long 0, 0xffffffff",
        ".quad 0",
        ".long 0, 0, 0, 0",
        ".globl __pcpalloc_rseq_state_v1",
        ".hidden __pcpalloc_rseq_state_v1",
        ".type __pcpalloc_rseq_state_v1, @object",
        ".size __pcpalloc_rseq_state_v1, 8",
        "__pcpalloc_rseq_state_v1:",
        ".quad 0",
        ".popsection",
    );

    /// The own area's state: never tried, registered, gone (refused or
    /// unregistered).
    const UNTRIED: usize = 0;
    const REGISTERED: usize = 1;
    const GONE: usize = 2;

    fn thread_pointer() -> usize {
        let tp: usize;
        // SAFETY: fs:0 holds the thread pointer itself (x86-64 TLS ABI).
        unsafe {
            asm!("mov {0}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
        };
        tp
    }

    fn own_offset() -> isize {
        let off: isize;
        // SAFETY: reads the GOT slot the linker made for the symbol's
        // initial-exec offset.
        unsafe {
            asm!(
                "mov {0}, qword ptr [rip + __pcpalloc_rseq_area_v1@GOTTPOFF]",
                out(reg) off,
                options(nostack, readonly, preserves_flags)
            )
        };
        off
    }

    fn state() -> usize {
        let v: usize;
        // SAFETY: the initial-exec sequence for our own TLS word.
        unsafe {
            asm!(
                "mov {0}, qword ptr [rip + __pcpalloc_rseq_state_v1@GOTTPOFF]",
                "mov {0}, qword ptr fs:[{0}]",
                out(reg) v,
                options(nostack, readonly, preserves_flags)
            )
        };
        v
    }

    fn set_state(v: usize) {
        // SAFETY: as in state, a store to the calling thread's own word.
        unsafe {
            asm!(
                "mov {t}, qword ptr [rip + __pcpalloc_rseq_state_v1@GOTTPOFF]",
                "mov qword ptr fs:[{t}], {v}",
                t = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags)
            )
        };
    }

    /// glibc's `__rseq_offset` and `__rseq_size`, through weak references:
    /// (0, 0) when the C library has none.
    fn glibc_rseq() -> (isize, u32) {
        let (off, size): (usize, usize);
        // SAFETY: the GOT slots of weak symbols hold their address or 0;
        // a present symbol is glibc's `ptrdiff_t` / `unsigned int`.
        unsafe {
            asm!(
                ".weak __rseq_offset",
                ".weak __rseq_size",
                "mov {o}, qword ptr [rip + __rseq_offset@GOTPCREL]",
                "mov {s}, qword ptr [rip + __rseq_size@GOTPCREL]",
                o = out(reg) off,
                s = out(reg) size,
                options(nostack, readonly, preserves_flags)
            );
            if off == 0 || size == 0 {
                return (0, 0);
            }
            (*(off as *const isize), *(size as *const u32))
        }
    }

    /// Takes glibc's area if this thread has one registered.
    pub(super) fn use_glibc() -> bool {
        let (off, size) = glibc_rseq();
        if size == 0 {
            return false;
        }
        // SAFETY: glibc's area is in this thread's TCB, at `off` from the
        // thread pointer; cpu_id is at offset 4.
        let cpu = unsafe {
            ((thread_pointer() as isize + off) as *const u32)
                .add(1)
                .read_volatile()
        };
        if (cpu as i32) < 0 {
            return false;
        }
        AREA_OFF.store(off, Relaxed);
        let mm_cid = size as usize >= MM_CID_END && feature_size() >= MM_CID_END;
        INDEX_OFF.store(if mm_cid { MM_CID_OFF } else { CPU_ID_OFF }, Relaxed);
        true
    }

    /// Takes our own area if the calling thread can register it.
    pub(super) fn use_own() -> bool {
        AREA_OFF.store(own_offset(), Relaxed);
        if !register_own_if_new() {
            return false;
        }
        let mm_cid = feature_size() >= MM_CID_END;
        INDEX_OFF.store(if mm_cid { MM_CID_OFF } else { CPU_ID_OFF }, Relaxed);
        true
    }

    fn rseq_syscall(flags: libc::c_long) -> bool {
        let area = (thread_pointer() as isize + own_offset()) as *mut u8;
        // SAFETY: the area is the calling thread's own static TLS, 32
        // bytes aligned to 32, alive until the thread exits (unregistered
        // before, in `thread_exit`); errno is put back.
        unsafe {
            let saved = *libc::__errno_location();
            let r = libc::syscall(libc::SYS_rseq, area, OWN_LEN, flags, RSEQ_SIG);
            *libc::__errno_location() = saved;
            r == 0
        }
    }

    /// Registers the calling thread's own area the first time it asks.
    /// Whether it is registered now.
    #[cold]
    #[inline(never)]
    pub(super) fn register_own_if_new() -> bool {
        match state() {
            UNTRIED => {
                let ok = rseq_syscall(0);
                set_state(if ok { REGISTERED } else { GONE });
                ok
            }
            s => s == REGISTERED,
        }
    }

    pub(super) fn unregister_own() {
        if state() == REGISTERED {
            rseq_syscall(1);
        }
        set_state(GONE);
    }

    /// The critical section (see [`super::lock_local`]). Returns the
    /// index, the status (0 held, 1 busy, 2 no area) and the aborts.
    ///
    /// Between labels 4 and 5 the kernel restarts it at 6 (after the
    /// signature), which counts the abort and starts over at 2, where the
    /// descriptor is armed again (the kernel clears it on abort).
    ///
    /// # Safety
    /// As [`super::lock_local`].
    #[inline(always)]
    pub(super) unsafe fn lock_local<const STRIDE: usize>(
        base: *const AtomicUsize,
        n: usize,
    ) -> (usize, u32, u32) {
        let idx: usize;
        let status: u32;
        let mut aborts: u32 = 0;
        let off = AREA_OFF.load(Relaxed);
        let ioff = INDEX_OFF.load(Relaxed);
        // SAFETY: the area at fs:off is this thread's rseq area (glibc's
        // or ours); the descriptor, signature and abort handler follow
        // the kernel's ABI; the only store inside the section is the
        // commit, to a word that the contract says is a lock word of
        // index idx < n.
        unsafe {
            asm!(
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "3:",
                ".long 0, 0",
                ".quad 4f, 5f - 4f, 6f",
                ".popsection",
                "2:",
                "lea {t}, [rip + 3b]",
                "mov qword ptr fs:[{off} + 8], {t}",
                "4:",
                "mov {idx:e}, dword ptr fs:[{off} + 4]",
                "test {idx:e}, {idx:e}",
                "js 7f",
                "mov {idx:e}, dword ptr fs:[{off} + {ioff}]",
                "cmp {idx}, {n}",
                "jae 7f",
                "imul {t}, {idx}, {stride}",
                "add {t}, {base}",
                "cmp qword ptr [{t}], 0",
                "jne 8f",
                "mov qword ptr [{t}], {local}",
                "5:",
                "xor {st:e}, {st:e}",
                "jmp 9f",
                ".pushsection __rseq_failure, \"ax\"",
                ".byte 0x0f, 0xb9, 0x3d",
                ".long 0x53053053",
                "6:",
                "inc {aborts:e}",
                "jmp 2b",
                ".popsection",
                "7:",
                "mov {st:e}, 2",
                "jmp 9f",
                "8:",
                "mov {st:e}, 1",
                "9:",
                off = in(reg) off,
                ioff = in(reg) ioff,
                base = in(reg) base,
                n = in(reg) n,
                stride = const STRIDE,
                local = const LOCAL,
                idx = out(reg) idx,
                t = out(reg) _,
                st = out(reg) status,
                aborts = inout(reg) aborts,
                options(nostack)
            );
        }
        (idx, status, aborts)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use core::sync::atomic::AtomicUsize;

    pub(super) fn use_glibc() -> bool {
        false
    }
    pub(super) fn use_own() -> bool {
        false
    }
    pub(super) fn register_own_if_new() -> bool {
        false
    }
    pub(super) fn unregister_own() {}
    pub(super) unsafe fn lock_local<const STRIDE: usize>(
        _base: *const AtomicUsize,
        _n: usize,
    ) -> (usize, u32, u32) {
        (0, 2, 0)
    }
}
