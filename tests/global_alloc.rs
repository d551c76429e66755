//! pcpalloc as the Rust global allocator: this whole test binary (harness
//! included) runs on it. A multi-threaded workload of collections, strings
//! and channels checks its own results; then the allocator's invariants,
//! trim and the maintenance tick are checked on the live heap.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread;

use pcpalloc::PcpAlloc;

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc;

/// Tests run one at a time: some inspect global state that the others'
/// frees would change under them.
static SERIAL: Mutex<()> = Mutex::new(());

fn workload(seed: u64) -> u64 {
    let mut map: HashMap<u64, String> = HashMap::new();
    let mut tree: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut q: VecDeque<Box<[u8]>> = VecDeque::new();
    let mut x = seed | 1;
    let mut acc = 0u64;
    for i in 0..40_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = x % 5000;
        let s = format!("{k:x}-{}", "y".repeat((x % 40) as usize));
        map.insert(k, s.clone());
        tree.entry(s).or_default().push(i);
        q.push_back(vec![(i % 251) as u8; (x % 3000) as usize].into_boxed_slice());
        if q.len() > 200 {
            let b = q.pop_front().unwrap();
            assert!(b.iter().all(|&v| v == b[0]));
            acc = acc.wrapping_add(b.len() as u64);
        }
        if i % 7 == 0 {
            map.remove(&((k * 31) % 5000));
        }
    }
    for (k, v) in &map {
        assert!(v.starts_with(&format!("{k:x}-")));
    }
    acc ^ map.len() as u64 ^ tree.values().map(|v| v.len() as u64).sum::<u64>()
}

#[test]
fn threads_collections_strings_channels() {
    let _g = SERIAL.lock().unwrap();
    let expected: Vec<u64> = (0..6).map(workload).collect();
    let (tx, rx) = mpsc::channel::<(u64, Vec<String>)>();
    let handles: Vec<_> = (0..6u64)
        .map(|t| {
            let tx = tx.clone();
            thread::spawn(move || {
                let r = workload(t);
                // Hand a batch of heap objects to the receiver, who frees them.
                let strings: Vec<String> = (0..2000)
                    .map(|i| format!("{t}:{i}:{}", "z".repeat(i % 300)))
                    .collect();
                tx.send((r, strings)).unwrap();
                r
            })
        })
        .collect();
    drop(tx);
    let mut got = Vec::new();
    for (r, strings) in rx {
        assert_eq!(strings.len(), 2000);
        for (i, s) in strings.iter().enumerate() {
            assert!(s.ends_with(&"z".repeat(i % 300)));
        }
        got.push(r);
    }
    let mut joined: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    joined.sort();
    got.sort();
    let mut want = expected;
    want.sort();
    assert_eq!(joined, want);
    assert_eq!(got, want);
}

#[test]
fn over_aligned_and_zeroed_layouts() {
    let _g = SERIAL.lock().unwrap();
    use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
    for align in [16usize, 32, 64, 128, 4096, 8192, 1 << 16, 1 << 21, 1 << 23] {
        for size in [1usize, 24, 100, 5000, 9000, 100_000, 5 << 20] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size; freed with the same layout.
            unsafe {
                let p = alloc(l);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                p.write_bytes(0xAB, size);
                let z = alloc_zeroed(l);
                assert_eq!(z as usize % align, 0);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                let q = realloc(p, l, size * 2);
                assert_eq!(q as usize % align, 0);
                assert!(std::slice::from_raw_parts(q, size)
                    .iter()
                    .all(|&b| b == 0xAB));
                dealloc(q, Layout::from_size_align(size * 2, align).unwrap());
                dealloc(z, l);
            }
        }
    }
}

#[test]
fn exited_threads_pages_come_back_with_trim() {
    let _g = SERIAL.lock().unwrap();
    // Threads that allocate page-sized blocks and exit leave pages cached in
    // pagesets and slabs in their abandoned heaps.
    let hs: Vec<_> = (0..8)
        .map(|t| {
            thread::spawn(move || {
                let v: Vec<Vec<u8>> = (0..500).map(|i| vec![t as u8; 9000 + i * 7]).collect();
                let small: Vec<Box<u64>> = (0..5000).map(Box::new).collect();
                v.len() + small.len()
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), 5500);
    }
    // Other tests' threads of this binary may still be exiting (their
    // heaps giving pages back), and the tick thread may drain a pageset
    // between the trim and the snapshot: trim again until nothing moves.
    let mut s = pcpalloc::stats();
    for _ in 0..50 {
        pcpalloc::trim();
        s = pcpalloc::stats();
        if s.pcp_count == 0 && s.zone.clean_free == s.zone.free {
            break;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(s.pcp_count, 0, "trim must drain every pageset");
    let _quiet = pcpalloc::internals::pause();
    let walk = pcpalloc::internals::check_invariants();
    assert_eq!(walk.pcp, 0);
    assert_eq!(s.zone.free, walk.free);
    assert_eq!(
        s.zone.clean_free, s.zone.free,
        "trim gives all free memory back to the OS"
    );
    assert!(s.heaps[2] >= 1, "exited threads' heaps wait for adoption");
}

#[test]
fn tick_decays_and_releases_idle_memory() {
    let _g = SERIAL.lock().unwrap();
    let before = pcpalloc::stats().zone.counters.released_bytes;
    {
        let big: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 256 << 10]).collect();
        let small: Vec<String> = (0..20000).map(|i| i.to_string()).collect();
        assert_eq!(big.len() + small.len(), 20064);
    }
    for _ in 0..6 {
        pcpalloc::internals::tick();
    }
    let s = pcpalloc::stats();
    assert!(
        s.zone.counters.released_bytes > before,
        "idle memory must go back to the OS"
    );
    pcpalloc::internals::check_invariants();
}

#[test]
fn stats_text_is_name_value_lines() {
    let _g = SERIAL.lock().unwrap();
    let s = pcpalloc::stats();
    let mut text = String::new();
    s.write_text(&mut text).unwrap();
    assert!(text.lines().count() > 60);
    for line in text.lines() {
        let mut it = line.split(' ');
        let (name, value) = (it.next().unwrap(), it.next().unwrap());
        assert!(it.next().is_none() && !name.is_empty(), "{line}");
        assert!(value.parse::<i64>().is_ok(), "{line}");
    }
}

#[test]
fn usable_size_and_version() {
    let _g = SERIAL.lock().unwrap();
    assert_eq!(pcpalloc::VERSION, env!("CARGO_PKG_VERSION"));
    // SAFETY: null is allowed.
    assert_eq!(unsafe { pcpalloc::usable_size(std::ptr::null()) }, 0);
    for n in [1usize, 24, 100, 4000, 9000, 300_000, 5 << 20] {
        let v: Vec<u8> = Vec::with_capacity(n);
        // SAFETY: the vector's buffer is a live block of ours.
        let u = unsafe { pcpalloc::usable_size(v.as_ptr()) };
        assert!(u >= n, "{n}: {u}");
        assert!(u <= 2 * n + 4096, "{n}: {u}");
    }
}

/// Allocates `n` blocks of `size` bytes on this thread; checks that the
/// thread's net bytes grew by exactly the blocks' usable bytes over the
/// allocations (`size` each, or more for a large block served from a
/// cached block of a slightly larger class). Returns the blocks and those
/// bytes.
fn take(n: usize, size: usize) -> (Vec<usize>, i64) {
    let mut v = Vec::with_capacity(n);
    let l = std::alloc::Layout::from_size_align(size, 8).unwrap();
    let before = pcpalloc::thread_stats();
    for _ in 0..n {
        // SAFETY: a non-zero size.
        v.push(unsafe { std::alloc::alloc(l) } as usize);
    }
    let after = pcpalloc::thread_stats();
    // SAFETY: each p is a live block of ours.
    let usable: usize = v
        .iter()
        .map(|&p| unsafe { pcpalloc::usable_size(p as *const u8) })
        .sum();
    assert!(usable >= n * size);
    assert_eq!(after.net() - before.net(), usable as i64);
    (v, usable as i64)
}

/// Frees blocks from `take`; returns by how much the thread's net bytes
/// dropped over the frees.
fn give(v: &[usize], size: usize) -> i64 {
    let l = std::alloc::Layout::from_size_align(size, 8).unwrap();
    let before = pcpalloc::thread_stats();
    for &p in v {
        // SAFETY: allocated by `take` with this layout.
        unsafe { std::alloc::dealloc(p as *mut u8, l) };
    }
    let after = pcpalloc::thread_stats();
    before.net() - after.net()
}

#[test]
fn thread_counters_are_exact_and_flush_empties_the_bins() {
    let _g = SERIAL.lock().unwrap();
    thread::spawn(|| {
        let t0 = pcpalloc::thread_stats();
        // 2000 objects of a size class of their own (64 B) and 20 large
        // blocks (64 KiB, a whole number of pages): net grows by exactly
        // their bytes, and drops by as much when they are freed.
        let (small, small_bytes) = take(2000, 64);
        assert_eq!(small_bytes, 2000 * 64);
        let (large, large_bytes) = take(20, 64 << 10);
        let t1 = pcpalloc::thread_stats();
        assert!(t1.allocated as i64 >= t0.allocated as i64 + small_bytes + large_bytes);
        assert_eq!(give(&small, 64), small_bytes);
        assert_eq!(give(&large, 64 << 10), large_bytes);
        let t2 = pcpalloc::thread_stats();
        assert!(t2.deallocated as i64 >= t1.deallocated as i64 + large_bytes);
        assert!(t2.allocated >= t1.allocated);
        drop((small, large));
        // The bins hold what was freed; the flush gives it back, which
        // changes what is cached, not the net.
        let t3 = pcpalloc::thread_stats();
        assert!(t3.cached > 0);
        pcpalloc::thread_flush();
        let t4 = pcpalloc::thread_stats();
        assert_eq!(t4.cached, 0);
        assert_eq!(t4.net(), t3.net());
        assert!(t4.deallocated >= t3.deallocated + t3.cached);
        pcpalloc::internals::check_invariants();
    })
    .join()
    .unwrap();
}

#[test]
fn a_consumer_thread_counts_what_it_frees() {
    let _g = SERIAL.lock().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<usize>>();
    let consumer = thread::spawn(move || {
        // A thread has a heap (and counters) from its first allocation.
        let warm = std::hint::black_box(Box::new([1u8; 32]));
        let v = rx.recv().unwrap();
        let freed = give(&v, 128);
        drop(warm);
        freed
    });
    let producer = thread::spawn(move || {
        let (v, _) = take(1000, 128);
        tx.send(v).unwrap();
    });
    producer.join().unwrap();
    // The consumer's net drops by exactly what it freed of the producer's.
    assert_eq!(consumer.join().unwrap(), 1000 * 128);
}

/// The free path's lookups agree with the arithmetic: for addresses all
/// over the blocks the process heap's first section holds (the primary
/// one, answered by one subtraction and compare), `lookup` is the page's
/// descriptor and `lookup_block(a, order)` that descriptor rounded down to
/// its aligned group of `1 << order` descriptors; an address outside every
/// section is none of ours. Fails if the folded mask or the window is off
/// by a page or a group.
#[test]
fn block_lookups_are_the_page_descriptor_rounded_to_its_group() {
    use pcpalloc::internals::{
        desc_of, lookup, lookup_block, MAX_ORDER_BYTES, PAGE_DESC_SIZE, SECTION_META_BYTES,
        SECTION_SIZE, SLAB_ORDER,
    };
    let _g = SERIAL.lock().unwrap();
    // Small blocks, and 48 MiB of 2 MiB ones: a dozen blocks of the
    // section in use.
    let keep: Vec<Box<[u8]>> = (0..64)
        .map(|i| vec![1u8; 16 << (i % 12)].into_boxed_slice())
        .chain((0..24).map(|_| vec![1u8; 2 << 20].into_boxed_slice()))
        .collect();
    let base = keep[0].as_ptr() as usize & !(SECTION_SIZE - 1);
    // The section maps its blocks as the heap grows: up to the first that
    // is not ours.
    let end = (base + SECTION_META_BYTES..base + SECTION_SIZE)
        .step_by(MAX_ORDER_BYTES)
        .find(|&b| lookup(b).is_none())
        .unwrap_or(base + SECTION_SIZE);
    let mut checked = 0;
    for a in (base + SECTION_META_BYTES..end).step_by(4096 * 7 + 48) {
        let d = desc_of(a) as usize;
        assert_eq!(lookup(a).map(|p| p as usize), Some(d), "page of {a:#x}");
        for order in [0, 1, SLAB_ORDER, 5, 9] {
            let group = PAGE_DESC_SIZE << order;
            assert_eq!(
                lookup_block(a, order).map(|p| p as usize),
                Some(d & !(group - 1)),
                "order {order} block of {a:#x}"
            );
        }
        checked += 1;
    }
    assert!(checked > 1500, "{checked} addresses");
    let stack = 0u8;
    let not_ours = &stack as *const u8 as usize;
    assert!(lookup(not_ours).is_none() && lookup_block(not_ours, SLAB_ORDER).is_none());
    drop(keep);
}
