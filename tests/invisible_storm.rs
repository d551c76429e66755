//! Issue 42, item 2, the thread storm without the background thread: not
//! slower than glibc, and its memory still goes back (that half is
//! tests/lifecycle.rs's `thread_storm_memory_goes_back_without_background_thread`).
//! A storm's memory goes back at each wave's end — the last exit looks
//! like any other — so what the next wave reuses has to be what is kept:
//! large blocks stay whole on the pagesets' lists, counted by what they
//! hold resident. The C program runs under LD_PRELOAD and on glibc;
//! the pageset cases drive a pageset in front of a test zone.

mod support;

use pcpalloc::internals::large_class_of as class_of;
use pcpalloc::internals::page_addr;
use pcpalloc::internals::Pageset;
use pcpalloc::internals::PAGE_SIZE;
use pcpalloc::internals::{Grow, Zone, ZoneConfig};
use pcpalloc::internals::{Knobs, MigrateType, Page};
use support::*;

/// The storm's costs as `inv_storm_cost` prints them.
#[derive(Debug, Clone, Copy)]
struct Cost {
    cpu: f64,
    faults: u64,
}

fn storm_cost(run: &Run) -> Cost {
    run.assert_says("storm: ");
    let out = run.stdout();
    let line = out.lines().find(|l| l.starts_with("storm: ")).unwrap();
    let field = |name: &str| {
        let mut it = line.split_whitespace();
        while let Some(w) = it.next() {
            if w == name {
                return it.next().unwrap().to_string();
            }
        }
        panic!("no {name} in {line:?}")
    };
    Cost {
        cpu: field("cpu").parse().unwrap(),
        faults: field("faults").parse().unwrap(),
    }
}

/// The least of each cost over `runs` runs (a shared machine only ever
/// adds time).
fn least(runs: &[Cost]) -> Cost {
    Cost {
        cpu: runs.iter().map(|c| c.cpu).fold(f64::MAX, f64::min),
        faults: runs.iter().map(|c| c.faults).min().unwrap(),
    }
}

/// The storm of lc_thread_storm (5000 threads in waves of 20, blocks of
/// 64 B – 1 MiB written in their first 16 KiB and last byte), with the
/// default settings (no background thread): fewer page faults than
/// glibc's by far, and CPU time no more than glibc's (a quarter of slack
/// for a shared machine). (Before: 1.3 times glibc's faults and 1.6 to 1.9
/// times its CPU time — each wave's memory given back and faulted in
/// again.) The faults are about half glibc's alone, 62% at worst under
/// the whole suite: the zone's free pages count against the one `keep`
/// with the lists' (see `thread_storm_last_wave_leaves_one_keep`).
#[test]
fn thread_storm_faults_less_than_glibc_in_no_more_time() {
    let args = ["5000", "20", "16"];
    let mut glibc = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..2 {
        glibc.push(storm_cost(&on_glibc("inv_storm_cost", &args)));
        ours.push(storm_cost(&on_pcpalloc(
            "inv_storm_cost",
            &args,
            &[("PCPALLOC_BACKGROUND", "0")],
            LONG,
        )));
    }
    let (g, p) = (least(&glibc), least(&ours));
    println!("glibc {glibc:?}\npcpalloc {ours:?}");
    assert!(
        p.faults * 10 <= g.faults * 7,
        "page faults: pcpalloc {} against glibc's {} (at most 70%)",
        p.faults,
        g.faults
    );
    assert!(
        p.cpu <= g.cpu * 1.25,
        "CPU time: pcpalloc {:.3} s against glibc's {:.3} s",
        p.cpu,
        g.cpu
    );
}

/// VmRSS after the storm of lc_thread_storm, less its value before, in
/// MiB, as the program prints them.
fn storm_leftover_mib(run: &Run) -> f64 {
    let out = run.stdout();
    let line = out
        .lines()
        .find(|l| l.contains("threads in"))
        .unwrap_or_else(|| panic!("no storm line in\n{}", run.describe()));
    let mib = |after: &str| -> f64 {
        let head = &line[..line.find(after).unwrap()];
        head.split_whitespace().last().unwrap().parse().unwrap()
    };
    mib(" MiB after 2 s idle") - mib(" MiB before")
}

/// The storm's last wave leaves what any wave's end leaves — one `keep`
/// (8 MiB) and a step for the pagesets' lists and the zone together,
/// besides the page descriptors of what the storm mapped (2.5 MiB) and
/// the slabs of the objects still live — in every run, however the last
/// threads' exits interleave. (Before: the zone's free pages of small
/// objects were kept on top of the lists' 8 MiB — the lists' 110 MiB of
/// blocks, resident in their first pages, made the heap look dense, so
/// only whole pageblocks went back — and the last exit's give-back was
/// skipped when another thread's held the lock: 11.8-17.1 MiB left,
/// 20 MiB under strace; now 9.9-12.4.)
#[test]
fn thread_storm_last_wave_leaves_one_keep() {
    for _ in 0..4 {
        let run = on_pcpalloc(
            "lc_thread_storm",
            &["5000", "20", "16"],
            &[("PCPALLOC_BACKGROUND", "0"), ("PCPALLOC_DECAY_MS", "100")],
            LONG,
        );
        run.assert_says("lc_thread_storm ok");
        let left = storm_leftover_mib(&run);
        println!("left resident after the storm: {left:.1} MiB");
        assert!(
            left <= 14.0,
            "the storm left {left:.1} MiB resident (at most 14)\n{}",
            run.describe()
        );
    }
}

struct TestZone(Box<Zone>);

impl TestZone {
    fn new() -> TestZone {
        TestZone(Box::new(Zone::with_config(&ZoneConfig::with_limit(
            1 << 30,
        ))))
    }
}

impl Drop for TestZone {
    fn drop(&mut self) {
        // SAFETY: the test is over; nothing uses the zone any more.
        unsafe { self.0.destroy() }
    }
}

const K: Knobs = Knobs::DEFAULT;
/// A 1 MiB block: the storm's largest.
const PAGES: usize = 256;

/// Writes a byte in each page of `pages` of the block at `p`.
///
/// # Safety
/// The block is the caller's, of at least `PAGES` pages.
unsafe fn write(p: *mut Page, pages: impl Iterator<Item = usize>) {
    let a = page_addr(p) as *mut u8;
    for i in pages {
        // SAFETY: inside the caller's block (contract).
        unsafe { a.add(i * PAGE_SIZE).write_volatile(1) };
    }
}

/// Which of the block's pages are resident.
fn resident(p: *mut Page) -> Vec<bool> {
    let mut v = vec![0u8; PAGES];
    // SAFETY: mincore only reads the page tables of a range of ours.
    let r = unsafe { libc::mincore(page_addr(p) as *mut _, PAGES * PAGE_SIZE, v.as_mut_ptr()) };
    assert_eq!(r, 0);
    v.iter().map(|b| b & 1 != 0).collect()
}

/// Takes `n` blocks of 1 MiB through the pageset (from a zone given the
/// memory first: a pageset's refill never grows it).
fn take(z: &Zone, ps: &Pageset, n: usize) -> Vec<*mut Page> {
    let class = class_of(PAGES);
    let warm: Vec<_> = (0..n)
        .map(|_| z.alloc_exact(PAGES, 0, MigrateType::Reclaimable, Grow::Yes))
        .collect();
    for &p in &warm {
        assert!(!p.is_null());
        // SAFETY: just taken, unused.
        unsafe { z.free_exact(p, PAGES) };
    }
    (0..n)
        .map(|_| {
            let (p, c) = ps.alloc_large(z, class, || K, false);
            assert!(!p.is_null());
            assert_eq!(c, class);
            p
        })
        .collect()
}

/// A CPU that frees a burst of blocks written in part — a thread pool's
/// wave ending — is not taken for one that only frees (free_high, which
/// drains its lists down to `high_min` and cuts `high`): once it has
/// freed twice its `high`, its lists look at what the blocks hold
/// resident (5 pages of each 1 MiB block here), and what they hold is
/// what counts as freed. The same burst written whole is a consumer's.
/// (Before: both were, and a pool's lists never grew to hold a wave.)
#[test]
fn a_burst_of_blocks_written_in_part_is_kept() {
    let z = TestZone::new();
    let class = class_of(PAGES);
    let burst = |whole: bool| {
        let ps = Pageset::new();
        let blocks = take(&z.0, &ps, 32);
        for &p in &blocks {
            // SAFETY: ours; then freed whole.
            unsafe {
                if whole {
                    write(p, 0..PAGES);
                } else {
                    write(p, (0..4).chain([PAGES - 1]));
                }
                (*p).flags = 0;
                ps.free_large(&z.0, &[p], class, || K, false);
            }
        }
        ps.check();
        let (_, c) = ps.snapshot();
        ps.drain(&z.0);
        c
    };
    let part = burst(false);
    assert_eq!(part.large_free_high, 0, "not taken for a consumer");
    assert!(part.large_measured > 0, "what they hold was looked at");
    let whole = burst(true);
    assert!(whole.large_free_high > 0, "written whole, the burst drains");
    z.0.check_invariants();
}

/// The give-back at a thread's exit keeps the pages a block's next user
/// writes again — its first ones — and gives the others back: 2 blocks
/// written in their first 4 pages, one in the middle and the last,
/// brought to 2 × 4 pages keep their first 4 pages resident and nothing
/// else, and stay on the lists; brought to nothing, they go back to the
/// zone whole.
#[test]
fn the_give_back_keeps_what_the_next_user_writes() {
    let z = TestZone::new();
    let ps = Pageset::new();
    let class = class_of(PAGES);
    let blocks = take(&z.0, &ps, 2);
    for &p in &blocks {
        // SAFETY: ours; then freed whole.
        unsafe {
            write(p, (0..4).chain([PAGES / 2, PAGES - 1]));
            (*p).flags = 0;
            ps.free_large(&z.0, &[p], class, || K, false);
        }
    }
    let (kept, given) = ps.release_large(&z.0, 2 * 4);
    assert_eq!((kept, given), (2 * 4, 2 * 2));
    for &p in &blocks {
        let r = resident(p);
        assert!(r[..4].iter().all(|&x| x), "the first pages stay");
        assert!(!r[4..].iter().any(|&x| x), "nothing else stays");
    }
    let (_, c) = ps.snapshot();
    assert_eq!(c.large_count as usize, 2 * PAGES, "the blocks stay cached");
    ps.check();
    let (kept, given) = ps.release_large(&z.0, 0);
    assert_eq!((kept, given), (0, 2 * 4));
    let (_, c) = ps.snapshot();
    assert_eq!(c.large_count, 0, "given back whole, to the zone");
    for &p in &blocks {
        assert!(!resident(p).iter().any(|&x| x));
    }
    z.0.check_invariants();
}
