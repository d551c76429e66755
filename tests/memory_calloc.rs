//! Issue 43, "memory like glibc where glibc is lean": calloc of a big
//! block costs what glibc's does — a block from the huge cache is not
//! zeroed by hand, its pages go back and fault in zeroed.

mod support;

use support::*;

/// 20 x calloc(1 GiB), touched one byte in 64 MiB and freed: every byte
/// read is zero and the peak RSS stays under 8 MiB. (Before: each cached
/// block was written with zeros, 4.1 s and 1,026 MiB resident; then 33.8
/// MiB, each touch faulting in a 2 MiB huge page, the block advised for
/// them when mapped; glibc maps each one fresh, about 1 MiB.)
#[test]
fn calloc_of_a_cached_huge_block_writes_no_zeros() {
    on_glibc("mem_calloc_huge", &[]).assert_says("mem_calloc_huge ok");
    on_pcpalloc("mem_calloc_huge", &["20", "8"], &[], QUICK).assert_says("mem_calloc_huge ok");
}
