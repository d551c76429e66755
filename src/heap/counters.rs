//! What a heap counts, and the bytes in use it reports from any thread:
//! the only-growing counters the owner bumps on its slow paths (and the
//! bin-full free), summed by the stats snapshot (`heaps.rs`) into the
//! bytes of live small objects and large blocks. Each counter is written
//! by its heap's owner alone, with a load and a store (`sync::bump`), and
//! read by anyone; the empty heap's, shared by every thread without a
//! heap, are added to atomically.

use core::ptr::addr_of;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::sync::bump;

use super::bin::Bins;
use super::heap::Heap;
use crate::slab::classes::{CLASS_SIZE, NR_CLASSES};

/// What a heap's counters say about bytes in use (see [`Heap::usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapUsage {
    /// Bytes of small objects taken off slabs minus those put back.
    pub small_out: i64,
    /// Bytes of small objects waiting on bins (out of their slabs, but
    /// free).
    pub binned: u64,
    /// Bytes of large blocks allocated minus freed through this heap (a
    /// block freed by another thread counts there).
    pub large_out: i64,
    /// Bytes of other heaps' small objects this heap's thread freed.
    pub remote_freed: i64,
}

/// The bytes of block-bin hits that count as one call of a slow path for
/// the tick (a power of two; blocks from the bins are at most 256 KiB).
const HIT_TICK_BYTES: u64 = 1 << 20;

/// Bytes of the objects counted per class in `counts`.
fn bytes_of(counts: &[AtomicU64; NR_CLASSES]) -> u64 {
    counts
        .iter()
        .zip(CLASS_SIZE)
        .map(|(n, size)| n.load(Relaxed).wrapping_mul(u64::from(size)))
        .fold(0, u64::wrapping_add)
}

impl Heap {
    /// Counts a large block of `bytes` allocated by this heap's thread.
    /// Owner only.
    #[inline]
    pub fn note_large_allocated(&self, bytes: usize) {
        bump(&self.large_allocated, bytes as u64);
    }

    /// [`note_large_allocated`](Self::note_large_allocated) for a hit in
    /// the block bins, which runs no slow path: true each time the count
    /// passes a multiple of [`HIT_TICK_BYTES`], when the hit should count
    /// as a slow path's call for the tick (`runtime::tick`). A test of the
    /// word the hit writes anyway, where a call per hit wrote a counter
    /// every thread shares. Owner only.
    #[inline(always)]
    pub fn note_large_allocated_tick_due(&self, bytes: usize) -> bool {
        let old = self.large_allocated.load(Relaxed);
        let new = old.wrapping_add(bytes as u64);
        self.large_allocated.store(new, Relaxed);
        (old ^ new) >= HIT_TICK_BYTES
    }

    /// Counts a large block of `bytes` freed by this heap's thread. Owner
    /// only.
    #[inline]
    pub fn note_large_freed(&self, bytes: usize) {
        bump(&self.large_freed, bytes as u64);
    }

    /// This heap's share of the bytes in use, from any thread. Summed over
    /// every heap, `small_out - binned` is the bytes of live small objects
    /// and `large_out` the bytes of live large blocks (each term may be
    /// negative for one heap: an object can be freed by another heap than
    /// the one that handed it out). Racy but never torn: each counter is
    /// read once.
    pub fn usage(&self) -> HeapUsage {
        let local = self.local.get();
        let mut binned = 0u64;
        for (c, &size) in CLASS_SIZE.iter().enumerate() {
            // SAFETY: the heap lives forever; only what `Bins::count_of`
            // may read from any thread is read.
            let n = unsafe { Bins::count_of(addr_of!((*local).bins), c) };
            binned += u64::from(n) * u64::from(size);
        }
        let d = |a: &AtomicU64, b: &AtomicU64| a.load(Relaxed).wrapping_sub(b.load(Relaxed)) as i64;
        HeapUsage {
            small_out: self
                .small_taken
                .load(Relaxed)
                .wrapping_sub(self.small_returned()) as i64,
            binned,
            large_out: d(&self.large_allocated, &self.large_freed),
            remote_freed: bytes_of(&self.remote_freed_objects) as i64,
        }
    }

    /// The only-growing counters behind [`usage`](Self::usage): bytes of
    /// small objects taken onto this heap's bins, put back on its slabs,
    /// and freed by its thread onto other heaps' slabs; bytes of large
    /// blocks its thread allocated, and freed.
    pub fn totals(&self) -> [u64; 5] {
        let l = |c: &AtomicU64| c.load(Relaxed);
        [
            l(&self.small_taken),
            self.small_returned(),
            bytes_of(&self.remote_freed_objects),
            l(&self.large_allocated),
            l(&self.large_freed),
        ]
    }

    /// Bytes of the objects put back on this heap's slabs.
    fn small_returned(&self) -> u64 {
        bytes_of(&self.returned_objects)
    }

    /// Counts another heap's small object of class `class` freed by `h`'s
    /// thread (`h` is the calling thread's heap or the empty heap). So the
    /// bytes in use drop at the free, not when the owner collects it.
    ///
    /// # Safety
    /// `h` is the calling thread's heap or the empty heap; `class <
    /// NR_CLASSES`.
    #[inline(always)]
    pub unsafe fn note_remote_freed(h: *const Heap, class: usize) {
        // SAFETY: heaps live forever; the owner alone writes its counter;
        // class is in range (contract).
        unsafe {
            let n = (*h).remote_freed_objects.get_unchecked(class);
            if (*h).is_empty_heap() {
                n.fetch_add(1, Relaxed);
            } else {
                bump(n, 1);
            }
        }
    }
}
