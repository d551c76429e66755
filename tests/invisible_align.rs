//! Issue 42, "invisible as a drop-in": the alignment glibc gives every
//! block. The C programs run under LD_PRELOAD=libpcpalloc.so and on glibc
//! as the reference.

mod support;

use std::alloc::{GlobalAlloc, Layout};

use pcpalloc::PcpAlloc;
use support::*;

/// Every size 1-4096 (malloc, calloc, realloc) and a sample to 64 KiB is
/// 16-byte aligned, and gcc's movaps store into an `__m128` member of a
/// flexible-array struct runs. (Before: 1,792 misaligned blocks of 12,352
/// and SIGSEGV on the store, classes of 24, 40, ... bytes being only
/// 8-byte aligned.)
#[test]
fn every_block_is_16_byte_aligned_as_glibc_gives() {
    on_glibc("inv_align", &[]).assert_says("inv_align ok");
    on_pcpalloc("inv_align", &[], &[], QUICK).assert_says("inv_align ok");
}

/// The same guarantee for a Rust program: layouts of alignment 1, 8 and
/// 16 of every size 1-4096 come 16-byte aligned from the global
/// allocator, with a usable size that covers the request and wastes at
/// most 15 bytes below 128 and 12.5% above.
#[test]
fn rust_layouts_are_16_byte_aligned() {
    let a = PcpAlloc::new();
    for align in [1usize, 8, 16] {
        for size in 1..=4096usize {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero layout; freed with the same layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null());
                assert_eq!(p as usize % 16, 0, "size {size} align {align}: {p:p}");
                let usable = pcpalloc::usable_size(p);
                assert!(usable >= size);
                if size > 128 {
                    assert!((usable - size) * 8 <= size, "size {size}: usable {usable}");
                } else {
                    assert!(usable - size.max(16) < 16, "size {size}: usable {usable}");
                }
                a.dealloc(p, l);
            }
        }
    }
}
