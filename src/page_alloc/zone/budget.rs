//! The memory budget: what the allocator has mapped, against a limit.
//!
//! One budget covers everything the allocator maps for memory it hands
//! out: the zone's MAX_ORDER blocks *with their page descriptors*, and
//! each huge block (live or cached) with its header and descriptor page.
//! Not counted: the section headers (one page per 256 MiB section), the
//! thread heaps and pagesets (a few KiB each, see `meta.rs`) and the chunk
//! map — fixed overheads that do not grow with what the program
//! allocates.
//!
//! There are two kinds of limit. A user-set limit (`PCPALLOC_MEMORY_LIMIT`)
//! is a wall: the budget never goes past it, and before a request fails
//! the runtime reclaims (see `runtime/reclaim.rs`). Without one the budget
//! has no wall of its own — only the OS (mmap failing) and the cgroup limit
//! it enforces on resident memory stop growth, exactly as for glibc — but
//! it keeps a *size* (the cgroup limit or the machine's RAM) that the
//! kernel's formulas work from: pageset batch and high bounds, the huge
//! cache's share.
//!
//! The memory cgroup's limit (`sys/memcg.rs`) is neither: not a wall —
//! memory charged is mapped, not all resident, and glibc would hand out
//! what the cgroup may never see touched — but a line the caches must keep
//! clear of, or the kernel kills the process for memory it only caches.
//! The runtime gives the budget a *target* below that limit and, now and
//! then, what the cgroup holds (`runtime/memcg.rs`); between two reads the
//! cgroup is taken to hold that plus whatever more is charged since
//! ([`Budget::cgroup_pressure`]: what was given back since is not counted
//! off until the next read, so the figure errs high). The
//! [`headroom`](Budget::headroom) left under the target bounds what the
//! caches may hold — the zone's resident free pages (`dirty.rs`), the huge
//! blocks' cache, the pagesets (through the zone's watermarks,
//! [`Budget::room`]) — and the runtime gives back what they hold past it.
//!
//! Bytes are taken with [`Budget::charge`], which returns a [`Charge`]:
//! dropped, it gives the bytes back, so a failure path undoes exactly what
//! it took; [`Charge::keep`] hands them to the mapping that now holds them,
//! which gives them back with [`Budget::uncharge`] when it goes. Those two
//! are the only places the counter moves.
//!
//! Invariant: `0 ≤ used ≤ limit` at every moment (`used` never wraps: an
//! uncharge of more than is charged is a bug, caught by a debug assertion
//! and, in release builds, saturated at zero) — except after the wall was
//! lowered at run time ([`Budget::set_limit`]) below what was charged then:
//! nothing is taken back, later charges fail until enough has been given
//! back, and `used ≤ max(limit, what was charged when it was lowered)`
//! ([`Budget::ceiling`]).

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::geometry::{MAX_ORDER_PAGES, PAGE_DESC_SIZE};

/// What one online MAX_ORDER block costs the budget by itself: its page
/// descriptors (its pages are charged as they are handed out, see
/// `charge.rs`).
pub(crate) const BLOCK_COST: usize = MAX_ORDER_PAGES * PAGE_DESC_SIZE;

/// No wall: the limit when the user set none.
pub const NO_LIMIT: usize = usize::MAX;

/// See the module docs.
pub struct Budget {
    /// The wall in bytes, or [`NO_LIMIT`].
    limit: AtomicUsize,
    /// The memory the zone's formulas are sized from, in bytes.
    size: AtomicUsize,
    /// Bytes charged now.
    used: AtomicUsize,
    /// The most `used` has been.
    peak: AtomicUsize,
    /// What was charged when the wall was last lowered below it (0 when
    /// it was not): see [`Budget::ceiling`].
    over: AtomicUsize,
    /// The memory cgroup's target in bytes: its limit less a reserve
    /// ([`NO_LIMIT`]: no cgroup limit).
    cg_target: AtomicUsize,
    /// What the cgroup held at the last read, in bytes, and `used` then.
    cg_usage: AtomicUsize,
    cg_used_then: AtomicUsize,
}

/// Bytes taken from a [`Budget`]; given back when dropped unless kept.
#[must_use = "a charge dropped at once gives its bytes straight back"]
pub struct Charge<'a> {
    budget: &'a Budget,
    bytes: usize,
}

impl Charge<'_> {
    /// The mapping now holds the bytes: they stay charged until it gives
    /// them back with [`Budget::uncharge`].
    #[inline]
    pub fn keep(self) {
        core::mem::forget(self);
    }

    /// The mapping holds only `bytes` of the charge: those stay charged,
    /// the rest goes back now.
    pub fn keep_part(self, bytes: usize) {
        debug_assert!(bytes <= self.bytes);
        let rest = self.bytes - bytes.min(self.bytes);
        let budget = self.budget;
        self.keep();
        if rest > 0 {
            budget.uncharge(rest);
        }
    }

    /// Bytes charged.
    #[inline]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.budget.uncharge(self.bytes);
    }
}

impl Budget {
    /// A budget with no limit and no size yet.
    pub const fn new() -> Budget {
        Budget {
            limit: AtomicUsize::new(NO_LIMIT),
            size: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            over: AtomicUsize::new(0),
            cg_target: AtomicUsize::new(NO_LIMIT),
            cg_usage: AtomicUsize::new(0),
            cg_used_then: AtomicUsize::new(0),
        }
    }

    /// Sets the wall (`NO_LIMIT` for none) and the size the formulas use.
    pub fn configure(&self, limit: usize, size: usize) {
        self.limit.store(limit, Relaxed);
        self.size.store(size, Relaxed);
    }

    /// Moves the wall (`NO_LIMIT` for none) at run time, keeping the size
    /// the formulas use. A wall below what is charged takes nothing back:
    /// charges fail until enough has been given back.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Relaxed);
        let used = self.used();
        self.over
            .store(if used > limit { used } else { 0 }, Relaxed);
    }

    /// The most `used` may be now: the wall, or what was charged when the
    /// wall was lowered below it at run time.
    pub fn ceiling(&self) -> usize {
        self.limit().max(self.over.load(Relaxed))
    }

    /// Takes `bytes` if they fit under the limit. The one place the
    /// counter grows.
    pub fn charge(&self, bytes: usize) -> Option<Charge<'_>> {
        let limit = self.limit.load(Relaxed);
        let mut used = self.used.load(Relaxed);
        loop {
            let next = used.checked_add(bytes).filter(|&n| n <= limit)?;
            match self
                .used
                .compare_exchange_weak(used, next, Relaxed, Relaxed)
            {
                Ok(_) => {
                    if next > self.peak.load(Relaxed) {
                        self.peak.fetch_max(next, Relaxed);
                    }
                    return Some(Charge {
                        budget: self,
                        bytes,
                    });
                }
                Err(u) => used = u,
            }
        }
    }

    /// Gives back `bytes` that a mapping held (see [`Charge::keep`]). The
    /// one place the counter shrinks.
    pub fn uncharge(&self, bytes: usize) {
        let mut used = self.used.load(Relaxed);
        loop {
            debug_assert!(used >= bytes, "budget: uncharging {bytes} of {used} bytes");
            let next = used.saturating_sub(bytes);
            match self
                .used
                .compare_exchange_weak(used, next, Relaxed, Relaxed)
            {
                Ok(_) => return,
                Err(u) => used = u,
            }
        }
    }

    /// Bytes charged now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// The most bytes charged at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Relaxed)
    }

    /// The wall in bytes ([`NO_LIMIT`] when the user set none).
    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Whether the user set a wall.
    pub fn has_limit(&self) -> bool {
        self.limit() != NO_LIMIT
    }

    /// The memory the formulas are sized from: the wall if there is one,
    /// else the cgroup limit or the machine's RAM.
    pub fn size(&self) -> usize {
        let s = self.size.load(Relaxed);
        if s == 0 {
            self.limit().min(1 << 40)
        } else {
            s
        }
    }

    /// Sets the memory cgroup's target (its limit less a reserve;
    /// [`NO_LIMIT`] for none).
    pub fn set_cgroup_target(&self, target: usize) {
        self.cg_target.store(target, Relaxed);
    }

    /// The memory cgroup's target ([`NO_LIMIT`] for none).
    pub fn cgroup_target(&self) -> usize {
        self.cg_target.load(Relaxed)
    }

    /// Notes what the memory cgroup holds now (read from the kernel), in
    /// bytes, against what is charged now.
    pub fn note_cgroup_usage(&self, usage: usize) {
        self.cg_usage.store(usage, Relaxed);
        self.cg_used_then.store(self.used(), Relaxed);
    }

    /// What the memory cgroup holds, as far as the budget can tell: what
    /// it held at the last read, plus what was charged since (charges
    /// given back since are not counted off: the figure errs high).
    #[inline]
    pub fn cgroup_pressure(&self) -> usize {
        let grown = self.used().saturating_sub(self.cg_used_then.load(Relaxed));
        self.cg_usage.load(Relaxed).saturating_add(grown)
    }

    /// Bytes left under the memory cgroup's target (`usize::MAX` without
    /// a cgroup limit): what the caches may still take, and more.
    #[inline]
    pub fn headroom(&self) -> usize {
        let target = self.cg_target.load(Relaxed);
        if target == NO_LIMIT {
            return usize::MAX;
        }
        target.saturating_sub(self.cgroup_pressure())
    }

    /// Bytes the zone may still charge without pressure: the room under
    /// the wall, and under the memory cgroup's target.
    #[inline]
    pub fn room(&self) -> usize {
        self.limit()
            .saturating_sub(self.used())
            .min(self.headroom())
    }

    /// Forgets every charge (a test zone being destroyed).
    pub(super) fn reset(&self) {
        self.used.store(0, Relaxed);
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stay_within_the_limit_and_undo_on_drop() {
        let b = Budget::new();
        b.configure(100, 100);
        let c = b.charge(60).unwrap();
        assert!(b.charge(41).is_none());
        assert_eq!(b.used(), 60);
        drop(c);
        assert_eq!(b.used(), 0);
        b.charge(100).unwrap().keep();
        assert_eq!(b.used(), 100);
        assert!(b.charge(1).is_none());
        b.uncharge(100);
        assert_eq!(b.used(), 0);
        assert_eq!(b.peak(), 100);
        assert!(b.charge(usize::MAX).is_none());
    }

    #[test]
    fn no_limit_is_no_wall() {
        let b = Budget::new();
        b.configure(NO_LIMIT, 1 << 30);
        b.charge(1 << 50).unwrap().keep();
        assert!(!b.has_limit());
        assert_eq!(b.size(), 1 << 30);
    }

    #[test]
    fn the_cgroup_headroom_counts_charges_since_the_last_read() {
        let b = Budget::new();
        b.configure(NO_LIMIT, 1 << 30);
        assert_eq!(b.headroom(), usize::MAX, "no cgroup limit");
        b.charge(100).unwrap().keep();
        b.set_cgroup_target(1000);
        b.note_cgroup_usage(300);
        assert_eq!(b.headroom(), 700);
        b.charge(200).unwrap().keep();
        assert_eq!(b.cgroup_pressure(), 500);
        assert_eq!(b.headroom(), 500);
        assert_eq!(b.room(), 500);
        b.uncharge(250);
        assert_eq!(
            b.headroom(),
            700,
            "given back: not counted off before a read"
        );
        b.note_cgroup_usage(200);
        assert_eq!(b.headroom(), 800);
        b.charge(900).unwrap().keep();
        assert_eq!(b.headroom(), 0, "past the target: none, not a wall");
        b.set_limit(2000);
        assert_eq!(b.room(), 0);
        b.set_cgroup_target(NO_LIMIT);
        assert_eq!(b.room(), 2000 - 950);
    }

    #[test]
    fn a_wall_lowered_below_the_charge_only_stops_new_charges() {
        let b = Budget::new();
        b.configure(NO_LIMIT, 1 << 30);
        b.charge(1000).unwrap().keep();
        b.set_limit(600);
        assert_eq!(b.used(), 1000);
        assert_eq!(b.ceiling(), 1000);
        assert!(b.charge(1).is_none());
        b.uncharge(500);
        assert!(b.charge(101).is_none());
        b.charge(100).unwrap().keep();
        assert_eq!(b.used(), 600);
        assert!(b.used() <= b.ceiling());
        b.set_limit(NO_LIMIT);
        assert!(b.charge(1 << 40).is_some());
        assert_eq!(b.size(), 1 << 30);
    }
}
