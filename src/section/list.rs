//! The section list: a slot per live section, so the zone's walks find
//! its sections without a map of the address space.

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::geometry::MAX_SECTIONS;

/// The section list, a slot per section. 64 KiB: metadata memory taken
/// with the first section, not `.bss` (whose every page `mlockall` locks,
/// and which counts against `RLIMIT_MEMLOCK` whether used or not).
pub(super) struct SectionList {
    /// Every live section's base address (0 = free slot, 1 = claimed).
    pub(super) base: [AtomicUsize; MAX_SECTIONS],
    /// The zone tag of each slot's section, so iteration can filter
    /// without touching another zone's (possibly just destroyed) header.
    pub(super) zone: [AtomicUsize; MAX_SECTIONS],
}

/// The section list, null before the first section; set once, never
/// freed.
static LIST: AtomicPtr<SectionList> = AtomicPtr::new(ptr::null_mut());
/// Highest slot index ever used + 1 (bounds iteration).
static SECTIONS_HIGH: AtomicUsize = AtomicUsize::new(0);

/// The section list, if any section was ever made.
pub(super) fn list() -> Option<&'static SectionList> {
    let l = LIST.load(Ordering::Acquire);
    // SAFETY: a published list is zeroed metadata memory (all slots free)
    // that lives for the process.
    (!l.is_null()).then(|| unsafe { &*l })
}

/// The section list, made first if need be; `None` if its memory is
/// refused.
fn list_or_make() -> Option<&'static SectionList> {
    if let Some(l) = list() {
        return Some(l);
    }
    let fresh = crate::meta::alloc(core::mem::size_of::<SectionList>(), 64).cast::<SectionList>();
    if fresh.is_null() {
        return None;
    }
    // Two threads making it: one wins, the other's copy is never used.
    let _ = LIST.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire);
    list()
}

/// Takes a free slot in the section list (marking it busy with 1).
pub(super) fn claim_slot() -> Option<(&'static SectionList, usize)> {
    let list = list_or_make()?;
    for (i, s) in list.base.iter().enumerate() {
        if s.load(Ordering::Relaxed) == 0
            && s.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            SECTIONS_HIGH.fetch_max(i + 1, Ordering::Relaxed);
            return Some((list, i));
        }
    }
    None
}

/// Calls `f` with the base of every live section of zone `zone`. Only
/// the zone's own sections are touched, so another zone destroying its
/// sections concurrently (tests) cannot fault this walk.
pub(super) fn for_each_base(zone: usize, mut f: impl FnMut(usize)) {
    let Some(list) = list() else {
        return;
    };
    let high = SECTIONS_HIGH.load(Ordering::Acquire);
    for (i, s) in list.base[..high].iter().enumerate() {
        if list.zone[i].load(Ordering::Relaxed) != zone {
            continue;
        }
        let base = s.load(Ordering::Acquire);
        if base > 1 {
            f(base);
        }
    }
}
