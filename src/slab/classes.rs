//! Size classes for small objects (≤ 8 KiB).
//!
//! 16-byte steps from 16 to 128 bytes, then eight classes per doubling up
//! to 8 KiB, so a request wastes at most 12.5% above 128 bytes (below, the
//! quantum is 16 bytes). Every class is a multiple of 16, so every block is
//! 16-byte aligned, as glibc guarantees for every request (its
//! `MALLOC_ALIGNMENT`) and every peer measured gives: C17 asks for the
//! alignment of any fundamental type that fits, and gcc compiles a store to
//! an `__m128` or `long double` member of a block of 24, 40, … bytes as an
//! aligned `movaps`. Power-of-two classes are naturally aligned because
//! slabs start on a page and objects are packed from offset 0.
//!
//! Every class lives in slabs of order 3 (32 KiB, [`SLAB_ORDER`]): the
//! largest order the pagesets cache, and one order for all, so a slab's
//! head page descriptor is found from any of its pages' by masking the
//! descriptor's address (`slab::free_view`), and an empty slab parked by
//! one class serves any other. The untouched tail is carved a page at a
//! time (`slab::extend`), so a class barely used costs no more memory than
//! with one-page slabs. Four classes waste more than 1/16 of a 32 KiB slab
//! (3328: 8.6%, 7168: 12.5%, 5632: 14.1%, 6656: 18.8%); we keep the 12.5%
//! internal-waste spacing and accept those tails.

use crate::geometry::{PAGE_SHIFT, PAGE_SIZE, SMALL_MAX};

/// Smallest class (every block holds a free-list link and a free key).
pub(crate) const MIN_CLASS_SIZE: usize = 16;
/// The alignment of every block (every class is a multiple of it).
pub(crate) const QUANTUM: usize = 16;
/// Number of size classes.
pub const NR_CLASSES: usize = 128 / QUANTUM + 6 * 8;
/// Size lookups go through a table indexed by `(size + 15) / 16`.
const LOOKUP_LEN: usize = SMALL_MAX / QUANTUM + 1;

const fn build_sizes() -> [u32; NR_CLASSES] {
    let mut s = [0u32; NR_CLASSES];
    let mut i = 0;
    let mut size = 16;
    while size <= 128 {
        s[i] = size as u32;
        i += 1;
        size += QUANTUM;
    }
    let mut base = 128;
    while base < SMALL_MAX {
        let step = base / 8;
        let mut k = 1;
        while k <= 8 {
            s[i] = (base + k * step) as u32;
            i += 1;
            k += 1;
        }
        base *= 2;
    }
    assert!(i == NR_CLASSES);
    s
}

/// Object size of each class.
pub static CLASS_SIZE: [u32; NR_CLASSES] = build_sizes();

/// log2 of the stride of a heap's bins (`bin::Bin`, which asserts it):
/// the bin of class `c` is `c << BIN_SHIFT` bytes into the bins.
pub(crate) const BIN_SHIFT: u32 = 4;

/// The bin offset (`class << BIN_SHIFT`) of each `(size + 15) / 16`: the
/// one size table, behind both [`bin_offset_of`] (malloc's fast path, one
/// load and one add to the bin) and [`class_of`].
const fn build_lookup() -> [u16; LOOKUP_LEN] {
    let sizes = build_sizes();
    let mut t = [0u16; LOOKUP_LEN];
    let mut q = 0;
    let mut c = 0;
    while q < LOOKUP_LEN {
        let size = q * QUANTUM;
        while (sizes[c] as usize) < size {
            c += 1;
        }
        t[q] = (c as u16) << BIN_SHIFT;
        q += 1;
    }
    t
}

static BIN_OFFSET_OF: [u16; LOOKUP_LEN] = build_lookup();

/// The offset into a heap's bins of the bin for a request of `size` ≤
/// SMALL_MAX bytes (its class is the offset `>> BIN_SHIFT`).
#[inline(always)]
pub(crate) fn bin_offset_of(size: usize) -> usize {
    debug_assert!(size <= SMALL_MAX);
    // The table covers every size up to SMALL_MAX.
    BIN_OFFSET_OF[(size + QUANTUM - 1) >> QUANTUM.trailing_zeros()] as usize
}

/// The class of a request of `size` ≤ SMALL_MAX bytes.
#[inline(always)]
pub fn class_of(size: usize) -> usize {
    bin_offset_of(size) >> BIN_SHIFT
}

/// The order of every slab. 32 KiB: a slab of objects that come and go by
/// the thousand runs dry, fills or empties every few hundred operations,
/// each time a trip through the heap's slab lists and the page allocator —
/// fewer with larger slabs; and a free reads the descriptor that its
/// slab's eight pages share, not one per page, so frees of a slab's
/// objects mostly find it in cache. Measured against slabs of order
/// 0..=3 by class with a free view in every page: on an AMD EPYC (Zen 3)
/// larsonN 0.96 of the time, sh6bench 0.97, sh8bench 0.99; on an Intel
/// Xeon, 3 interleaved rounds of the published programs, larsonN 0.90,
/// sh8bench 0.93, sh6bench 1.05, glibc-thread 1.07, 0.99 on the geometric
/// mean.
pub const SLAB_ORDER: u32 = 3;
/// Pages of a slab.
pub(crate) const SLAB_PAGES: usize = 1 << SLAB_ORDER;

const fn build_capacity() -> [u16; NR_CLASSES] {
    let sizes = build_sizes();
    let mut cap = [0u16; NR_CLASSES];
    let mut c = 0;
    while c < NR_CLASSES {
        cap[c] = ((PAGE_SIZE << SLAB_ORDER) / sizes[c] as usize) as u16;
        c += 1;
    }
    cap
}

/// Objects per slab of each class.
pub static CAPACITY: [u16; NR_CLASSES] = build_capacity();

/// The most objects a slab of any class holds (a refill's most).
pub(crate) const MAX_CAPACITY: u16 = {
    let cap = build_capacity();
    let mut m = 0;
    let mut c = 0;
    while c < NR_CLASSES {
        if cap[c] > m {
            m = cap[c];
        }
        c += 1;
    }
    m
};

/// The inverse of odd `d` modulo 2^16 (Newton's iteration: each step
/// doubles the correct low bits, from 3 to more than 16).
const fn inverse_mod_2_16(d: u16) -> u16 {
    assert!(d % 2 == 1);
    let mut inv = d;
    let mut i = 0;
    while i < 3 {
        inv = inv.wrapping_mul(2u16.wrapping_sub(d.wrapping_mul(inv)));
        i += 1;
    }
    inv
}

/// What the free path needs of a class to tell whether an offset starts an
/// object, with one multiply and no division (Granlund and Montgomery's
/// divisibility test, on 16 bits since a slab is at most 32 KiB): for
/// `size = odd << shift` and an offset `off` < 2^16,
/// `q = (off * inverse(odd)).rotate_right(shift)` (mod 2^16) equals
/// `off / size` when `size` divides `off`, and exceeds `(2^16 - 1) / size`
/// otherwise — so `q < capacity` is exactly "off starts one of the
/// objects". `slab::init` copies both into the slab's descriptor.
#[derive(Clone, Copy)]
pub(crate) struct ClassInfo {
    /// The inverse of the odd part of the size, modulo 2^16.
    pub inverse: u16,
    /// Trailing zero bits of the size.
    pub shift: u8,
}

const fn build_info() -> [ClassInfo; NR_CLASSES] {
    let sizes = build_sizes();
    let mut t = [ClassInfo {
        inverse: 0,
        shift: 0,
    }; NR_CLASSES];
    let mut c = 0;
    while c < NR_CLASSES {
        let size = sizes[c];
        let shift = size.trailing_zeros();
        t[c] = ClassInfo {
            inverse: inverse_mod_2_16((size >> shift) as u16),
            shift: shift as u8,
        };
        c += 1;
    }
    t
}

/// Per-class facts for the free path.
pub(crate) static CLASS_INFO: [ClassInfo; NR_CLASSES] = build_info();

/// The index of the object at byte offset `off` < 2^16 of a slab whose
/// class has `inverse`, `shift` and `capacity`, if `off` is exactly the
/// start of an object (see [`ClassInfo`]) — given `scaled`, the offset
/// times `inverse` (mod 2^16). The slab's object check computes it as
/// `p * inverse - base * inverse`, which is `(p - base) * inverse`.
#[inline(always)]
pub(crate) fn object_index_scaled(scaled: u16, shift: u8, capacity: u16) -> Option<usize> {
    let q = scaled.rotate_right(u32::from(shift));
    (q < capacity).then_some(q as usize)
}

/// The smallest class that holds `size` bytes at alignment `align` (a power
/// of two, at most 8192 for slabs: a power-of-two class is aligned to its
/// size, up to its slab's), if any.
pub(crate) fn class_for_aligned(size: usize, align: usize) -> Option<usize> {
    if size > SMALL_MAX || align > PAGE_SIZE << 1 {
        return None;
    }
    let start = class_of(size.max(align).min(SMALL_MAX));
    (start..NR_CLASSES)
        .find(|&c| (CLASS_SIZE[c] as usize).is_multiple_of(align) && slab_align(c) >= align)
}

/// The alignment every object of class `c` has: the largest power of two
/// dividing its size, capped by the slab's own alignment.
pub(crate) fn slab_align(c: usize) -> usize {
    let size = CLASS_SIZE[c] as usize;
    let pow = 1usize << size.trailing_zeros();
    pow.min(PAGE_SIZE << SLAB_ORDER)
}

const _: () = assert!(NR_CLASSES <= 255);
// Every class keeps every block QUANTUM-aligned.
const _: () = {
    let sizes = build_sizes();
    let mut c = 0;
    while c < NR_CLASSES {
        assert!((sizes[c] as usize).is_multiple_of(QUANTUM));
        c += 1;
    }
};
// Slab offsets fit the 16-bit object check, and the pagesets cache slabs.
const _: () = assert!(PAGE_SIZE << SLAB_ORDER <= 1 << 16);
const _: () = assert!(SLAB_ORDER <= crate::geometry::PAGE_ALLOC_COSTLY_ORDER);
const _: () = assert!(PAGE_SHIFT == 12);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_bounded_waste() {
        for size in 0..=SMALL_MAX {
            let c = class_of(size);
            let cs = CLASS_SIZE[c] as usize;
            assert!(cs >= size.max(MIN_CLASS_SIZE), "size {size} -> {cs}");
            if c > 0 {
                assert!(
                    (CLASS_SIZE[c - 1] as usize) < size,
                    "size {size} not in its smallest class"
                );
            }
            if size > 128 {
                assert!(
                    (cs - size) * 8 <= size,
                    "size {size} wastes more than 12.5% in {cs}"
                );
            }
        }
        assert_eq!(CLASS_SIZE[NR_CLASSES - 1] as usize, SMALL_MAX);
    }

    #[test]
    fn slabs_waste_little_and_hold_several_objects() {
        for c in 0..NR_CLASSES {
            let slab = PAGE_SIZE << SLAB_ORDER;
            let size = CLASS_SIZE[c] as usize;
            let waste = slab - CAPACITY[c] as usize * size;
            assert!(CAPACITY[c] >= 4, "class {size}: {} objects", CAPACITY[c]);
            let limit = if [3328, 5632, 6656, 7168].contains(&size) {
                5
            } else {
                16
            };
            assert!(waste * limit <= slab, "class {size} wastes {waste}");
        }
    }

    /// The object check as `slab::object_at` computes it, for the object
    /// at `off` of a slab of class `c` at an address whose low 16 bits are
    /// `base`.
    fn object_index_of_class(c: usize, base: u16, off: usize) -> Option<usize> {
        let info = CLASS_INFO[c];
        let p = base.wrapping_add(off as u16);
        let scaled = p
            .wrapping_mul(info.inverse)
            .wrapping_sub(base.wrapping_mul(info.inverse));
        object_index_scaled(scaled, info.shift, CAPACITY[c])
    }

    #[test]
    fn object_index_is_exact_at_every_offset_and_base() {
        for c in 0..NR_CLASSES {
            let size = CLASS_SIZE[c] as usize;
            let slab = PAGE_SIZE << SLAB_ORDER;
            // Every page-aligned base a slab of the class can have, the
            // top of the 16 bits included (the product wraps).
            for base in (0..1usize << 16).step_by(PAGE_SIZE) {
                let base = base as u16;
                for off in 0..slab {
                    let want =
                        (off % size == 0 && off / size < CAPACITY[c] as usize).then(|| off / size);
                    assert_eq!(
                        object_index_of_class(c, base, off),
                        want,
                        "class {size} base {base:#x} off {off}"
                    );
                }
                // Offsets past the slab are never objects.
                for off in [slab, slab + size, (1 << 16) - size, (1 << 16) - 1] {
                    assert_eq!(
                        object_index_of_class(c, base, off),
                        None,
                        "class {size} base {base:#x} off {off:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn aligned_classes_are_aligned() {
        for align in [8usize, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192] {
            for size in [1usize, 17, 100, 1000, 3000, 5000, 8192] {
                if let Some(c) = class_for_aligned(size, align) {
                    assert!(CLASS_SIZE[c] as usize >= size);
                    assert_eq!(CLASS_SIZE[c] as usize % align, 0);
                    assert!(slab_align(c) >= align);
                }
            }
        }
        assert_eq!(class_for_aligned(100, 64).map(|c| CLASS_SIZE[c]), Some(128));
        assert_eq!(
            class_for_aligned(1, 4096).map(|c| CLASS_SIZE[c]),
            Some(4096)
        );
    }
}
