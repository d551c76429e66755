//! What a batch of ranges holds resident, asked with as few mincore calls
//! as their addresses allow.
//!
//! A mincore call costs about 0.7 µs before it looks at a page, and 6 ns
//! a page after: asking about a 40-page block one call at a time is four
//! fifths the call. Ranges a few pages apart — a thread's blocks, carved
//! from the zone one after the other — are asked about in one call over
//! the span that covers them, gaps included, as long as the gaps cost
//! less than the calls they save.

use crate::geometry::{MAX_ORDER_PAGES, PAGE_SIZE};

use super::linux::resident_map;

/// The most ranges of one batch.
pub const BATCH_MAX: usize = 32;
/// The widest gap between two ranges asked about in one call, in pages: a
/// call costs about as much as looking at 100 pages. Below
/// `MAX_ORDER_PAGES`, so a gap between two ranges of online zone memory
/// is online zone memory too (mapped: mincore answers).
const GAP_MAX: usize = 96;

/// One range of a batch as measured: its index in the batch, and a byte a
/// page (bit 0: resident), or `None` if the kernel could not tell.
pub(crate) struct Measured<'a> {
    /// Where the range is in the batch passed in.
    pub index: usize,
    /// Its pages' residency.
    pub map: Option<&'a [u8]>,
}

/// Asks which pages of each range of `ranges` — `(address, pages)`, page
/// aligned, at most [`BATCH_MAX`] of at most `MAX_ORDER_PAGES` pages each,
/// not overlapping, in the zone's online memory — are resident, and calls
/// `group` once a mincore call with the ranges it answered for, in address
/// order.
pub fn measure_grouped(ranges: &[(usize, usize)], mut group: impl FnMut(&[Measured<'_>])) {
    debug_assert!(ranges.len() <= BATCH_MAX);
    let n = ranges.len().min(BATCH_MAX);
    // Insertion sort of the indices by address: a batch is small.
    let mut order = [0usize; BATCH_MAX];
    for i in 0..n {
        let mut j = i;
        while j > 0 && ranges[order[j - 1]].0 > ranges[i].0 {
            order[j] = order[j - 1];
            j -= 1;
        }
        order[j] = i;
    }
    let mut map = [0u8; MAX_ORDER_PAGES];
    let mut i = 0;
    while i < n {
        // The group: from order[i], while the next range starts at most
        // GAP_MAX pages after the end so far and the span fits the map.
        let start = ranges[order[i]].0;
        let mut end = start + ranges[order[i]].1 * PAGE_SIZE;
        let mut k = i + 1;
        while k < n {
            let (a, pages) = ranges[order[k]];
            let new_end = end.max(a + pages * PAGE_SIZE);
            if a > end + GAP_MAX * PAGE_SIZE || new_end - start > MAX_ORDER_PAGES * PAGE_SIZE {
                break;
            }
            end = new_end;
            k += 1;
        }
        let span = (end - start) / PAGE_SIZE;
        let answered = resident_map(start as *const u8, &mut map[..span]).is_some();
        if !answered && k - i > 1 {
            // Not answered for the span: one call a range, each on its own.
            for &idx in &order[i..k] {
                let (a, pages) = ranges[idx];
                let ok = resident_map(a as *const u8, &mut map[..pages]).is_some();
                group(&[Measured {
                    index: idx,
                    map: ok.then_some(&map[..pages]),
                }]);
            }
            i = k;
            continue;
        }
        let mut members: [Measured<'_>; BATCH_MAX] = [const {
            Measured {
                index: 0,
                map: None,
            }
        }; BATCH_MAX];
        for (m, &idx) in members.iter_mut().zip(&order[i..k]) {
            let (a, pages) = ranges[idx];
            let off = (a - start) / PAGE_SIZE;
            m.index = idx;
            m.map = answered.then(|| &map[off..off + pages]);
        }
        group(&members[..k - i]);
        i = k;
    }
}
