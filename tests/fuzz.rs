//! Long randomized sequences of malloc, calloc, realloc, free and the
//! aligned calls, sizes 0 to 8 MiB and alignments 1 B to 4 MiB, against a
//! model: every block is pattern-filled and checked before it is freed or
//! reallocated, usable sizes cover requests, alignment holds, and the heap's
//! invariants hold at the end. PCPTEST_FUZZ_CASES sets the number of
//! sequences (default 64; by hand we ran far more, see the README).

use pcpalloc::internals::malloc as m;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Malloc(usize),
    Calloc(usize, usize),
    Realloc(usize, usize),
    Free(usize),
    Memalign(u32, usize),
    PosixMemalign(u32, usize),
    AlignedAlloc(u32, usize),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        10 => 0usize..=256,
        6 => 257usize..=8192,
        3 => 8193usize..=(1 << 20),
        1 => (1usize << 20)..=(8 << 20),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => size().prop_map(Op::Malloc),
        1 => (0usize..64, 0usize..512).prop_map(|(a, b)| Op::Calloc(a, b)),
        3 => (any::<usize>(), size()).prop_map(|(i, n)| Op::Realloc(i, n)),
        6 => any::<usize>().prop_map(Op::Free),
        1 => (0u32..=22, size()).prop_map(|(a, n)| Op::Memalign(a, n)),
        1 => (3u32..=22, size()).prop_map(|(a, n)| Op::PosixMemalign(a, n)),
        1 => (0u32..=22, size()).prop_map(|(a, n)| Op::AlignedAlloc(a, n)),
    ]
}

struct Live {
    p: *mut u8,
    n: usize,
    seed: u8,
}

/// Fills the first and last 256 bytes and one in the middle.
fn fill(l: &Live) {
    for i in pattern_positions(l.n) {
        // SAFETY: i < n, a live block.
        unsafe { l.p.add(i).write(l.seed.wrapping_add(i as u8)) };
    }
}

/// Checks the bytes `fill` wrote below `upto`.
fn check(l: &Live, upto: usize) -> bool {
    pattern_positions(l.n)
        .filter(|&i| i < upto)
        // SAFETY: i < n, a live block.
        .all(|i| unsafe { l.p.add(i).read() } == l.seed.wrapping_add(i as u8))
}

fn pattern_positions(n: usize) -> impl Iterator<Item = usize> {
    let head = 0..n.min(256);
    let tail = n.saturating_sub(256).max(n.min(256))..n;
    let mid = if n > 512 { Some(n / 2) } else { None };
    head.chain(tail).chain(mid)
}

fn new_block(p: *mut u8, n: usize, align: usize, seed: u8) -> Option<Live> {
    if p.is_null() {
        return None;
    }
    assert_eq!(
        p as usize % align.max(1),
        0,
        "misaligned block for align {align}"
    );
    // SAFETY: p is a live block.
    assert!(unsafe { m::usable_size(p) } >= n);
    let l = Live { p, n, seed };
    fill(&l);
    Some(l)
}

fn cases() -> u32 {
    std::env::var("PCPTEST_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn malloc_family_keeps_every_byte(ops in prop::collection::vec(op(), 1..400)) {
        let mut live: Vec<Live> = Vec::new();
        let mut seed = 0u8;
        for op in ops {
            seed = seed.wrapping_add(37);
            match op {
                Op::Malloc(n) => live.extend(new_block(m::malloc(n), n, 8, seed)),
                Op::Calloc(a, b) => {
                    let p = m::calloc(a, b);
                    if !p.is_null() {
                        // SAFETY: calloc returned a*b bytes.
                        let zeroed = unsafe { std::slice::from_raw_parts(p, a * b) }.iter().all(|&x| x == 0);
                        prop_assert!(zeroed, "calloc memory not zeroed");
                    }
                    live.extend(new_block(p, a * b, 8, seed));
                }
                Op::Realloc(i, n) => {
                    if live.is_empty() { continue; }
                    let i = i % live.len();
                    let old = live.swap_remove(i);
                    prop_assert!(check(&old, usize::MAX), "corrupted before realloc");
                    // SAFETY: old.p is live.
                    let q = unsafe { m::realloc(old.p, n) };
                    if n == 0 {
                        prop_assert!(q.is_null());
                        continue;
                    }
                    prop_assert!(!q.is_null());
                    let moved = Live { p: q, n: old.n, seed: old.seed };
                    prop_assert!(check(&moved, n), "realloc lost data");
                    live.extend(new_block(q, n, 8, seed));
                }
                Op::Free(i) => {
                    if live.is_empty() { continue; }
                    let l = live.swap_remove(i % live.len());
                    prop_assert!(check(&l, usize::MAX), "block corrupted");
                    // SAFETY: l.p is live.
                    unsafe { m::free(l.p) };
                }
                Op::Memalign(a, n) => {
                    let align = 1usize << a;
                    live.extend(new_block(m::memalign(align, n), n, align, seed));
                }
                Op::PosixMemalign(a, n) => {
                    let align = 1usize << a;
                    let mut p = std::ptr::null_mut();
                    // SAFETY: p is a valid out-parameter.
                    prop_assert_eq!(unsafe { m::posix_memalign(&mut p, align, n) }, 0);
                    live.extend(new_block(p, n, align, seed));
                }
                Op::AlignedAlloc(a, n) => {
                    let align = 1usize << a;
                    live.extend(new_block(m::aligned_alloc(align, n), n, align, seed));
                }
            }
        }
        for l in live.drain(..) {
            prop_assert!(check(&l, usize::MAX));
            // SAFETY: l.p is live.
            unsafe { m::free(l.p) };
        }
        pcpalloc::internals::check_invariants();
    }
}
