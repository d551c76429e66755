//! Fault injection: the OS refuses memory (every mmap-family call of the
//! allocator fails for a while). Allocations must fail cleanly — NULL with
//! ENOMEM, nothing corrupted — and work again once the OS gives memory.

use pcpalloc::internals::malloc as m;

fn errno() -> i32 {
    // SAFETY: errno's location is valid for this thread.
    unsafe { *libc::__errno_location() }
}

#[test]
fn mmap_failures_give_null_and_recover() {
    // Warm up so the allocator is initialised and has a little memory.
    let warm: Vec<usize> = (0..100).map(|i| m::malloc(32 + i) as usize).collect();
    assert!(warm.iter().all(|&p| p != 0));

    // Huge blocks need a fresh mapping: refused.
    pcpalloc::internals::inject_map_failures(1_000_000);
    // SAFETY: errno's location is valid.
    unsafe { *libc::__errno_location() = 0 };
    assert!(m::malloc(8 << 20).is_null());
    assert_eq!(errno(), libc::ENOMEM);

    // Keep asking for large blocks until the zone has nothing left and
    // cannot grow: every failure is a clean NULL.
    let mut got = Vec::new();
    let mut failures = 0;
    for _ in 0..10_000 {
        let p = m::malloc(1 << 20);
        if p.is_null() {
            assert_eq!(errno(), libc::ENOMEM);
            failures += 1;
            if failures > 3 {
                break;
            }
        } else {
            // SAFETY: p holds 1 MiB.
            unsafe { p.write_bytes(0xAB, 1 << 20) };
            got.push(p as usize);
        }
    }
    assert!(failures > 0, "the injected failures never surfaced");
    // Small objects keep working from memory already mapped, or fail
    // cleanly: never a crash.
    for _ in 0..1000 {
        let p = m::malloc(48);
        if !p.is_null() {
            // SAFETY: p holds 48 bytes.
            unsafe { m::free(p) };
        }
    }
    pcpalloc::internals::inject_map_failures(0);

    // Recovery: the same requests succeed now.
    let big = m::malloc(8 << 20);
    assert!(!big.is_null());
    let more: Vec<usize> = (0..16).map(|_| m::malloc(1 << 20) as usize).collect();
    assert!(more.iter().all(|&p| p != 0));
    for p in got.into_iter().chain(more).chain(warm) {
        // SAFETY: live blocks from malloc.
        unsafe { m::free(p as *mut u8) };
    }
    // SAFETY: live.
    unsafe { m::free(big) };
    pcpalloc::internals::check_invariants();
}
