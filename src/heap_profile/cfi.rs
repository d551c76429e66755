//! The fast way to a sample's stack (x86-64; other targets take libgcc's
//! unwinder alone): each frame's unwind rule —
//! where its caller's frame starts (the CFA, a register plus an offset)
//! and where the frame pointer was saved — is read once from the call
//! frame information (`.eh_frame`, found with libgcc's `_Unwind_Find_FDE`
//! and evaluated with `gimli`, on the stack, without allocating) and kept
//! in a cache by address; a stack whose frames are all in the cache is
//! then walked with a few loads per frame, where libgcc's
//! `_Unwind_Backtrace` parses the tables of every frame every time (about
//! 800 instructions a frame: 8,000 a sample of larson's shallow stack).
//!
//! Only the common rules are taken: the CFA at the stack or frame pointer
//! plus an offset, the return address just below it, the frame pointer
//! saved at an offset or left alone. Anything else — a signal frame, a
//! rule by expression, a frame with no unwind information — returns
//! `None`, and the caller falls back to libgcc, which knows them all.
//!
//! The cache is shared by every thread: a slot is one word of rule and
//! one of address behind a sequence number (a writer makes it odd while
//! it writes; a reader that sees it change, or odd, ignores the slot).
//! An address keeps its rule until an object is unloaded (`dlclose`): new
//! code could then come to the same address, so each walk first asks the
//! loader how many objects were ever unloaded (`dl_iterate_phdr`'s
//! `dlpi_subs`, what libgcc's own cache goes by) and forgets every rule
//! when that moved. `dl_iterate_phdr` holds the loader's list lock, which
//! glibc does not reset in a forked child: a fork while a sample was
//! inside it left the child waiting on it forever (tests/profile.rs
//! caught it, once in 40 runs). So the call is made under [`UNLOADS`]'s
//! lock, which fork's handlers hold (`runtime/fork.rs`), and only when
//! that lock is free: a walk that finds it taken goes on with the rules
//! the other thread is checking.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

use crate::sync::Locked;

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameOffset, NativeEndian, ReaderOffset, Register,
    RegisterRule, UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow, X86_64,
};

/// Slots of the rule cache (a power of two).
const SLOTS: usize = 4096;
/// The largest frame the walk believes in: a CFA further above the
/// stack pointer than this sends the stack to libgcc.
const FRAME_MAX: usize = 1 << 20;

/// A frame's rule, packed: bit 0 set (a rule), bit 1 the CFA is at the
/// frame pointer (else the stack pointer), bits 2..34 the CFA's offset,
/// bits 34..50 where the frame pointer was saved from the CFA (0: not
/// saved), bit 50 the outermost frame (its return address undefined:
/// `_start`, a thread's `clone3`). The return address is always at
/// CFA - 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule(u64);

impl Rule {
    const VALID: u64 = 1;
    const CFA_AT_FP: u64 = 2;
    const OUTERMOST: Rule = Rule(Self::VALID | 1 << 50);

    fn outermost(self) -> bool {
        self.0 & (1 << 50) != 0
    }

    fn new(cfa_at_fp: bool, cfa_offset: i32, fp_saved_at: i16) -> Rule {
        Rule(
            Self::VALID
                | if cfa_at_fp { Self::CFA_AT_FP } else { 0 }
                | (u64::from(cfa_offset as u32) << 2)
                | (u64::from(fp_saved_at as u16) << 34),
        )
    }

    fn cfa_at_fp(self) -> bool {
        self.0 & Self::CFA_AT_FP != 0
    }

    fn cfa_offset(self) -> isize {
        (self.0 >> 2) as u32 as i32 as isize
    }

    fn fp_saved_at(self) -> isize {
        (self.0 >> 34) as u16 as i16 as isize
    }
}

struct Slot {
    seq: AtomicU32,
    pc: AtomicU64,
    rule: AtomicU64,
}

static CACHE: [Slot; SLOTS] = [const {
    Slot {
        seq: AtomicU32::new(0),
        pc: AtomicU64::new(0),
        rule: AtomicU64::new(0),
    }
}; SLOTS];

/// Moves when an object was unloaded since the rules were read; part of
/// every slot's key.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// The loader's count of unloaded objects the rules were read under,
/// behind the lock every look at it takes (see the module docs).
pub(crate) static UNLOADS: Locked<u64> = Locked::new(0);

/// Forgets every rule if an object was unloaded since the last look —
/// unless another thread (or a fork) is looking.
fn check_unloads() {
    let Some(mut seen) = UNLOADS.try_lock() else {
        return;
    };
    extern "C" fn first(info: *mut libc::dl_phdr_info, _size: usize, out: *mut c_void) -> i32 {
        // SAFETY: the loader hands a valid entry; out is the u64 below.
        unsafe { *out.cast::<u64>() = (*info).dlpi_subs };
        1 // one object is enough: the counter is the loader's
    }
    let mut subs = 0u64;
    // SAFETY: the callback reads the entry it is given and writes `subs`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut subs as *mut u64).cast()) };
    if *seen != subs {
        *seen = subs;
        EPOCH.fetch_add(1, Relaxed);
    }
}

/// Takes the unloads lock before fork.
pub(crate) fn lock_for_fork() {
    UNLOADS.lock.lock();
}

/// Releases (parent) or resets (child) the lock [`lock_for_fork`] took.
///
/// # Safety
/// Only right after fork, having called `lock_for_fork` in this thread.
pub(crate) unsafe fn unlock_after_fork(child: bool) {
    // SAFETY: held since lock_for_fork in this thread.
    unsafe {
        if child {
            UNLOADS.lock.force_unlock();
        } else {
            UNLOADS.lock.unlock();
        }
    }
}

/// A slot's key: the address, and the epoch in the bits above any
/// address.
fn key(pc: usize) -> u64 {
    pc as u64 | EPOCH.load(Relaxed) << 48
}

fn slot_of(pc: usize) -> &'static Slot {
    let h = (pc as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52;
    &CACHE[h as usize & (SLOTS - 1)]
}

fn cached(pc: usize) -> Option<Rule> {
    let s = slot_of(pc);
    let seq = s.seq.load(Acquire);
    if seq & 1 != 0 {
        return None;
    }
    let (p, r) = (s.pc.load(Relaxed), s.rule.load(Relaxed));
    core::sync::atomic::fence(Acquire);
    (s.seq.load(Relaxed) == seq && p == key(pc) && r != 0).then_some(Rule(r))
}

fn remember(pc: usize, r: Rule) {
    let s = slot_of(pc);
    let seq = s.seq.load(Relaxed);
    if seq & 1 != 0
        || s.seq
            .compare_exchange(seq, seq + 1, Acquire, Relaxed)
            .is_err()
    {
        return; // another thread writes it: leave it
    }
    s.pc.store(key(pc), Relaxed);
    s.rule.store(r.0, Relaxed);
    s.seq.store(seq + 2, Release);
}

/// libgcc's `struct dwarf_eh_bases`.
#[repr(C)]
struct EhBases {
    tbase: *mut c_void,
    dbase: *mut c_void,
    func: *mut c_void,
}

extern "C" {
    fn _Unwind_Find_FDE(pc: *mut c_void, bases: *mut EhBases) -> *const u8;
}

/// gimli's evaluation state, on the stack (about 2 KiB): room for 16
/// register rules — x86-64 code saves at most the six callee-saved
/// registers and the return address — and two remembered states (code
/// rarely nests `remember_state`). More is an error: libgcc's turn.
struct OnStack;

impl<T: ReaderOffset> UnwindContextStorage<T> for OnStack {
    type Rules = [(Register, RegisterRule<T>); 16];
    type Stack = [UnwindTableRow<T, Self>; 2];
}

/// Reads the rule for `pc` from the call frame information; `None` when
/// there is none or it is not one of the common ones.
fn rule_for(pc: usize) -> Option<Rule> {
    let mut bases = EhBases {
        tbase: core::ptr::null_mut(),
        dbase: core::ptr::null_mut(),
        func: core::ptr::null_mut(),
    };
    // SAFETY: _Unwind_Find_FDE reads the loaded objects' tables; bases is
    // a valid out-parameter.
    let fde = unsafe { _Unwind_Find_FDE(pc as *mut c_void, &mut bases) } as usize;
    if fde == 0 {
        return None;
    }
    // SAFETY: an FDE libgcc found is mapped: its 32-bit length, then the
    // offset back to its CIE, whose own length starts it.
    let (fde_len, cie, cie_len) = unsafe {
        let fde_len = (fde as *const u32).read_unaligned() as usize;
        let back = ((fde + 4) as *const u32).read_unaligned() as usize;
        if fde_len == 0xffff_ffff || back == 0 || back > fde + 4 {
            return None; // 64-bit DWARF, or not an FDE
        }
        let cie = fde + 4 - back;
        (fde_len, cie, (cie as *const u32).read_unaligned() as usize)
    };
    if cie_len == 0xffff_ffff {
        return None;
    }
    let start = cie.min(fde);
    let end = (fde + 4 + fde_len).max(cie + 4 + cie_len);
    // SAFETY: the CIE and the FDE are mapped whole, and so is what lies
    // between them (one `.eh_frame` section).
    let bytes = unsafe { core::slice::from_raw_parts(start as *const u8, end - start) };
    let eh = EhFrame::new(bytes, NativeEndian);
    let gbases = BaseAddresses::default()
        .set_eh_frame(start as u64)
        .set_text(bases.tbase as u64)
        .set_got(bases.dbase as u64);
    let entry = eh
        .fde_from_offset(
            &gbases,
            EhFrameOffset(fde - start),
            EhFrame::cie_from_offset,
        )
        .ok()?;
    if entry.cie().is_signal_trampoline() {
        return None;
    }
    let mut ctx = UnwindContext::<usize, OnStack>::new_in();
    let row = entry
        .unwind_info_for_address(&eh, &gbases, &mut ctx, pc as u64)
        .ok()?;
    let (cfa_at_fp, cfa_offset) = match *row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let at_fp = match register {
                X86_64::RSP => false,
                X86_64::RBP => true,
                _ => return None,
            };
            (at_fp, i32::try_from(offset).ok()?)
        }
        CfaRule::Expression(_) => return None,
    };
    match row.register(X86_64::RA) {
        RegisterRule::Offset(-8) => {}
        RegisterRule::Undefined => return Some(Rule::OUTERMOST),
        _ => return None,
    }
    let fp_saved_at = match row.register(X86_64::RBP) {
        RegisterRule::Undefined | RegisterRule::SameValue => 0,
        RegisterRule::Offset(o) if o < 0 && o >= i64::from(i16::MIN) => o as i16,
        _ => return None,
    };
    Some(Rule::new(cfa_at_fp, cfa_offset, fp_saved_at))
}

/// The rule for `pc`, from the cache or the tables.
fn rule(pc: usize) -> Option<Rule> {
    if let Some(r) = cached(pc) {
        return Some(r);
    }
    let r = rule_for(pc)?;
    remember(pc, r);
    Some(r)
}

/// Walks the stack from the frame whose code is at `pc`, stack pointer
/// `sp` and frame pointer `fp`, calling `frame` with each caller's return
/// address less one (inside its call) until it returns false or the
/// stack ends. `None` if a frame needs more than the common rules (the
/// caller then asks libgcc); what `frame` saw then is to be forgotten.
///
/// # Safety
/// `pc`, `sp` and `fp` are the calling thread's registers at a point of
/// one of its functions that has not returned.
pub(crate) unsafe fn walk(
    mut pc: usize,
    mut sp: usize,
    mut fp: usize,
    mut frame: impl FnMut(usize) -> bool,
) -> Option<()> {
    check_unloads();
    loop {
        let r = rule(pc)?;
        if r.outermost() {
            return Some(());
        }
        let base = if r.cfa_at_fp() { fp } else { sp };
        let cfa = base.wrapping_add_signed(r.cfa_offset());
        if cfa <= sp || cfa - sp > FRAME_MAX || cfa % 8 != 0 {
            return None;
        }
        // SAFETY: by the frame's rule (its own unwind table), the return
        // address is at CFA - 8 and the saved frame pointer at the offset
        // given, both in this thread's live stack between sp and cfa.
        let ra = unsafe { ((cfa - 8) as *const usize).read() };
        if r.fp_saved_at() != 0 {
            // SAFETY: as above.
            fp = unsafe { (cfa.wrapping_add_signed(r.fp_saved_at()) as *const usize).read() };
        }
        sp = cfa;
        if ra == 0 {
            return Some(()); // the outermost frame
        }
        pc = ra - 1;
        if !frame(pc) {
            return Some(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_pack_and_unpack() {
        let r = Rule::new(true, 16, -16);
        assert!(r.cfa_at_fp());
        assert_eq!((r.cfa_offset(), r.fp_saved_at()), (16, -16));
        let r = Rule::new(false, 8, 0);
        assert!(!r.cfa_at_fp());
        assert_eq!((r.cfa_offset(), r.fp_saved_at()), (8, 0));
        let r = Rule::new(false, -4, 0);
        assert_eq!(r.cfa_offset(), -4);
    }

    #[test]
    fn the_cache_keeps_what_it_was_told() {
        let pc = rules_pack_and_unpack as *const () as usize;
        let r = Rule::new(false, 24, -16);
        remember(pc, r);
        assert_eq!(cached(pc), Some(r));
        assert_eq!(cached(pc + 1), None);
    }
}
