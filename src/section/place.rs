//! Where sections go: far below where the kernel puts mappings, so that
//! the holes of a section that maps only what it uses stay free for it
//! (see the module docs of `section`).

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::geometry::{PAGE_SIZE, SECTION_META_BYTES, SECTION_SIZE};
use crate::sys;

/// How far below the kernel's lowest mapping the first section goes, at
/// most (1 TiB; a quarter of the address below it when that is less, as
/// on a 39-bit address space): the kernel reaches a section's holes only
/// once a process has mapped that much more.
const PLACE_FAR: usize = 1 << 40;
/// Section-aligned addresses tried, downwards, before giving up.
const PLACE_TRIES: usize = 64;

/// The next address to try for a section, 0 before the first; sections go
/// down from there, one after the other. A hint: placement is decided by
/// the kernel (MAP_FIXED_NOREPLACE), so racing callers cannot collide.
static NEXT_BASE: AtomicUsize = AtomicUsize::new(0);

/// Takes the address range of a new section far below the kernel's
/// mappings: the first section-aligned range free whole, reserved for a
/// moment to be sure and then given back but for its first `header`
/// bytes; where the address space is too scarce for that (`ulimit -v`),
/// the first place the header fits. Returns the base, its header mapped
/// read-write; `None` if no place was found.
pub(super) fn place(header: usize) -> Option<*mut u8> {
    let mut start = NEXT_BASE.load(Ordering::Relaxed);
    if start == 0 {
        let probe = sys::map(PAGE_SIZE)?;
        sys::unmap(probe, PAGE_SIZE);
        let top = (probe as usize) & !(SECTION_SIZE - 1);
        start = top.checked_sub((top / 4).min(PLACE_FAR) & !(SECTION_SIZE - 1))?;
    }
    let candidates = (0..PLACE_TRIES).map_while(|i| {
        let c = start.checked_sub(i * SECTION_SIZE)?;
        (c >= SECTION_SIZE).then_some(c)
    });
    let found = candidates.clone().find(|&c| {
        let p = c as *mut u8;
        if sys::map_at(p, SECTION_SIZE, false).is_err() {
            return false;
        }
        // Free whole: keep the header, give the rest back.
        let ok = sys::commit(p, header);
        sys::unmap((c + header) as *mut u8, SECTION_SIZE - header);
        if !ok {
            sys::unmap(p, header);
        }
        ok
    });
    let found = found.or_else(|| {
        candidates
            .into_iter()
            .find(|&c| sys::map_at(c as *mut u8, header, true).is_ok())
    })?;
    NEXT_BASE.store(found - SECTION_SIZE, Ordering::Relaxed);
    Some(found as *mut u8)
}

/// Where sections cannot be placed: reserves a whole aligned section
/// inaccessible where the OS puts it and opens its descriptor block.
pub(super) fn reserve_whole() -> Option<*mut u8> {
    let base = sys::reserve(SECTION_SIZE, SECTION_SIZE)?;
    if !sys::commit(base, SECTION_META_BYTES) {
        sys::unmap(base, SECTION_SIZE);
        return None;
    }
    Some(base)
}
