//! The page allocator's size classes for exact-size blocks (malloc's large
//! blocks): page counts a quarter-power apart (1, 2, …, 8, then 10, 12, 14,
//! 16, 20, 24, 28, 32, … up to 1024 pages, 4 MiB), as jemalloc's large
//! classes are. A block holds exactly its class's pages — never a power of
//! two it does not need (a 33 KiB request holds 40 KiB, not 64; 2.1 MiB
//! holds 2.5 MiB, not 4) — and blocks of one class are interchangeable, so a
//! freed block serves the next request of its class as it is, from a
//! pageset's list (`pcp/class_lists.rs`) without the zone.
//!
//! The index of a class is computed (its page count is a table of the
//! same formula): for `p` pages above 8,
//! with `l = ⌊log2(p − 1)⌋`, the class holds `m << (l − 2)` pages where
//! `m = ((p − 1) >> (l − 2)) + 1` ∈ 5..=8, and its index is
//! `8 + 4·(l − 3) + (m − 5)`; the waste is below a quarter of the block.

use crate::geometry::MAX_ORDER_PAGES;
use crate::page::MigrateType;

/// Classes up to MAX_ORDER_PAGES: 8 below 9 pages, 4 per doubling above.
pub const NR_LARGE_CLASSES: usize = 8 + 4 * (MAX_ORDER_PAGES.trailing_zeros() as usize - 3);

/// The class of a block of `pages` pages (1..=MAX_ORDER_PAGES).
#[inline]
pub const fn class_of(pages: usize) -> usize {
    debug_assert!(pages >= 1 && pages <= MAX_ORDER_PAGES);
    if pages <= 8 {
        return pages - 1;
    }
    let l = (usize::BITS - 1 - (pages - 1).leading_zeros()) as usize;
    let m = ((pages - 1) >> (l - 2)) + 1;
    8 + 4 * (l - 3) + (m - 5)
}

/// Pages of a block of class `class`.
#[inline]
pub const fn class_pages(class: usize) -> usize {
    debug_assert!(class < NR_LARGE_CLASSES);
    // The mask keeps the index in the table without a bounds check.
    CLASS_PAGES[class & (CLASS_TABLE_LEN - 1)] as usize
}

/// Entries of [`CLASS_PAGES`]: a power of two, so a mask bounds an index.
const CLASS_TABLE_LEN: usize = NR_LARGE_CLASSES.next_power_of_two();

/// The pages of a class, computed ([`class_pages`] reads the table: the
/// large-block paths ask it five to ten times per malloc and free).
const fn compute_class_pages(class: usize) -> usize {
    if class < 8 {
        return class + 1;
    }
    let l = (class - 8) / 4 + 3;
    let m = (class - 8) % 4 + 5;
    m << (l - 2)
}

/// [`compute_class_pages`] for every class (0 past the last).
static CLASS_PAGES: [u16; CLASS_TABLE_LEN] = {
    let mut t = [0u16; CLASS_TABLE_LEN];
    let mut c = 0;
    while c < NR_LARGE_CLASSES {
        assert!(compute_class_pages(c) <= u16::MAX as usize);
        t[c] = compute_class_pages(c) as u16;
        c += 1;
    }
    t
};

/// Blocks of at least this many pages (1 MiB) are *big*: see
/// [`migratetype_for`].
pub(crate) const BIG_BLOCK_PAGES: usize = 256;

/// The migratetype a large block of `pages` pages is taken as: smaller
/// blocks movable, big ones reclaimable, so the two sizes fill different
/// pageblocks (the kernel's grouping, by size here) and a free MAX_ORDER
/// block is not split for a 40 KiB block while a 4 MiB one waits. Big,
/// not small, blocks share the reclaimable pageblocks of short-lived
/// small objects (`heap/lifetime.rs`): a block of 1 MiB or more fills at
/// least half of a pageblock itself, where a long-lived 64 KiB buffer
/// among churned slabs would keep their pageblock from emptying whole.
#[inline]
pub(crate) fn migratetype_for(pages: usize) -> MigrateType {
    if pages >= BIG_BLOCK_PAGES {
        MigrateType::Reclaimable
    } else {
        MigrateType::Movable
    }
}

/// Most pages [`class_of_small`] answers for (256 KiB, the large bins'
/// reach).
pub(crate) const SMALL_CLASS_PAGES: usize = 64;

/// [`class_of`] for 0..=SMALL_CLASS_PAGES pages (0 as 1) by one table load:
/// the large bins' hit path asks it on every malloc.
#[inline(always)]
pub(crate) fn class_of_small(pages: usize) -> usize {
    debug_assert!(pages <= SMALL_CLASS_PAGES);
    // The mask keeps the index in the table without a bounds check.
    usize::from(SMALL_CLASS_OF[pages & (SMALL_TABLE_LEN - 1)])
}

/// Entries of [`SMALL_CLASS_OF`]: a power of two, so a mask bounds an
/// index.
const SMALL_TABLE_LEN: usize = (SMALL_CLASS_PAGES + 1).next_power_of_two();

/// [`class_of`] of 0..=SMALL_CLASS_PAGES pages (0 past them).
static SMALL_CLASS_OF: [u8; SMALL_TABLE_LEN] = {
    let mut t = [0u8; SMALL_TABLE_LEN];
    let mut p = 1;
    while p <= SMALL_CLASS_PAGES {
        t[p] = class_of(p) as u8;
        p += 1;
    }
    t
};

const _: () = assert!(class_pages(NR_LARGE_CLASSES - 1) == MAX_ORDER_PAGES);
const _: () = assert!(class_of(MAX_ORDER_PAGES) == NR_LARGE_CLASSES - 1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_small_table_agrees_with_the_formula() {
        assert_eq!(class_of_small(0), 0);
        for pages in 1..=SMALL_CLASS_PAGES {
            assert_eq!(class_of_small(pages), class_of(pages), "{pages} pages");
        }
    }

    #[test]
    fn classes_cover_every_size_within_a_quarter() {
        let mut last = 0;
        for c in 0..NR_LARGE_CLASSES {
            let p = class_pages(c);
            assert!(p > last, "classes grow");
            assert_eq!(class_of(p), c);
            last = p;
        }
        for pages in 1..=MAX_ORDER_PAGES {
            let c = class_of(pages);
            let p = class_pages(c);
            assert!(p >= pages, "{pages} pages in class {c} of {p}");
            assert!(
                c == 0 || class_pages(c - 1) < pages,
                "{pages}: not the smallest class"
            );
            assert!(
                (p - pages) * 4 <= p,
                "{pages} pages waste more than a quarter of {p}"
            );
        }
        assert_eq!(NR_LARGE_CLASSES, 36);
        assert_eq!(
            [9, 10, 11, 16, 17, 33, 257, 600, 1000].map(|p| class_pages(class_of(p))),
            [10, 10, 12, 16, 20, 40, 320, 640, 1024]
        );
    }
}
