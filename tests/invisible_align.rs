//! Issue 42, "invisible as a drop-in": the alignment glibc gives every
//! block, and a double free after the free key was overwritten never
//! making a bin hand one block out forever. The C programs run under
//! LD_PRELOAD=libpcpalloc.so and on glibc as the reference.

mod support;

use std::alloc::{GlobalAlloc, Layout};
use std::os::unix::process::ExitStatusExt;

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

/// What the double-free program saw: how often the block came back, or
/// the abort that stopped it.
fn double_free_outcome(run: &Run) -> (Option<u32>, bool) {
    let out = run.stdout();
    let times = out
        .lines()
        .find_map(|l| l.strip_prefix("block handed out "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok());
    let addr = out
        .lines()
        .find_map(|l| l.strip_prefix("block "))
        .unwrap_or("?")
        .to_string();
    let aborted = run.out.status.signal() == Some(libc::SIGABRT);
    let named = run
        .stderr()
        .lines()
        .any(|l| l.starts_with("pcpalloc: ") && l.contains("0x"));
    if aborted {
        assert!(
            named,
            "the abort names no address (block {addr}): {}",
            run.describe()
        );
    }
    (times, aborted)
}

/// A 64-byte block freed, its first 16 bytes (link and free key) cleared
/// through the dangling pointer, freed again, then 10,000 malloc(64): the
/// block is handed out at most twice — then the corrupted list is
/// reported with one line and an abort — never round and round. Also
/// with a neighbour freed in between (a list A -> B -> A). (Before: 9,999
/// of 10,000 mallocs returned the block; glibc: 2, its tcache count
/// bounding the damage.)
#[test]
fn a_double_free_after_a_wiped_key_never_loops() {
    let glibc = on_glibc("inv_double_free_wiped", &["64"]);
    println!("glibc: {}", glibc.stdout().trim());
    for args in [["64", "0"], ["64", "1"], ["200", "0"], ["3000", "1"]] {
        let run = on_pcpalloc("inv_double_free_wiped", &args, &[], QUICK);
        assert!(!run.timed_out, "{}", run.describe());
        let (times, aborted) = double_free_outcome(&run);
        println!("pcpalloc {args:?}: handed out {times:?}, aborted {aborted}");
        match times {
            Some(t) => assert!(t <= 2, "{args:?}: the block came back {t} times"),
            None => assert!(aborted, "{args:?}: {}", run.describe()),
        }
    }
}
