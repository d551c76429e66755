//! Sampled small objects stay in their slabs (`src/slab/marks.rs`): at a
//! rate that samples one object in a dozen, objects freed by their owner,
//! by other threads, by Rust's sized free and through realloc all leave
//! the profile with their free; no object is overwritten; and the heap's
//! invariants — the marks' among them — hold while slabs hold samples
//! and after.

use std::sync::mpsc;

use pcpalloc::PcpAlloc;

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc;

/// Sizes of every small class band, up to 8 KiB.
fn size_of(i: usize) -> usize {
    const SIZES: [usize; 12] = [1, 16, 24, 40, 64, 100, 256, 700, 1024, 2000, 4096, 8192];
    SIZES[i % SIZES.len()]
}

fn filled(i: usize) -> Vec<u8> {
    vec![(i % 251) as u8; size_of(i)]
}

fn check(v: &[u8], i: usize) {
    assert!(
        v.iter().all(|&b| b == (i % 251) as u8),
        "object {i} overwritten"
    );
}

fn live_samples() -> u64 {
    pcpalloc::profile::summary().live_samples
}

/// Runs [`sampling_run`] in a child process of this test binary, whose
/// profile at exit goes to a temporary directory rather than the
/// working directory (the file's path is read once, at start).
#[test]
fn sampled_small_objects_leave_the_profile_by_every_free() {
    let dir = std::env::temp_dir().join(format!("pcpalloc-profile-slabs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sampling_run",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("PROFILE_SLABS_CHILD", "1")
        .env("PCPALLOC_PROFILE_FILE", dir.join("exit.%p.pb"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "the child run failed:\n{text}"
    );
    assert!(
        text.contains("still live at exit: 0 sampled blocks"),
        "sampled blocks left at exit:\n{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sampling_run() {
    if std::env::var_os("PROFILE_SLABS_CHILD").is_none() {
        return;
    }
    // One sample per 4 KiB allocated (the least mean there is): thousands
    // of small samples, several in many slabs at once.
    pcpalloc::set("PCPALLOC_PROFILE", "4K").unwrap();
    let before = live_samples();
    let taken = pcpalloc::profile::summary().samples;

    // The owner's own frees (sized, as Rust frees), half after a realloc.
    let mut mine: Vec<Vec<u8>> = (0..20_000).map(filled).collect();
    assert!(
        live_samples() > before + 500,
        "no small samples live: {} then {}",
        before,
        live_samples()
    );
    pcpalloc::internals::check_invariants_quiescent();
    for (i, v) in mine.iter_mut().enumerate() {
        check(v, i);
        if i % 2 == 0 {
            v.resize(size_of(i + 5).max(1), (i % 251) as u8);
            v.truncate(size_of(i).min(v.len()));
            v.shrink_to_fit();
        }
    }
    for (i, v) in mine.iter().enumerate() {
        check(&v[..v.len().min(size_of(i))], i);
    }
    drop(mine);
    pcpalloc::internals::check_invariants_quiescent();
    let after_own = live_samples();

    // Another thread's frees: a producer hands its objects to a consumer.
    let (tx, rx) = mpsc::sync_channel::<(usize, Vec<u8>)>(256);
    let consumer = std::thread::spawn(move || {
        let mut n = 0;
        for (i, v) in rx {
            check(&v, i);
            if i % 3 == 0 {
                // Freed through realloc, by the thread that does not own it.
                let mut v = v;
                v.reserve_exact(size_of(i + 1) + 1);
                check(&v, i);
            }
            n += 1;
        }
        n
    });
    let producer = std::thread::spawn(move || {
        for i in 0..30_000 {
            tx.send((i, filled(i))).unwrap();
        }
    });
    producer.join().unwrap();
    assert_eq!(consumer.join().unwrap(), 30_000);
    pcpalloc::internals::check_invariants_quiescent();
    let after_handed = live_samples();
    let taken_now = pcpalloc::profile::summary().samples - taken;
    pcpalloc::set("PCPALLOC_PROFILE", "0").unwrap();

    assert!(taken_now > 2_000, "only {taken_now} samples taken");
    // What the test thread itself keeps (its harness) may hold a sample
    // or two; every object of ours is gone.
    assert!(
        after_own <= before + 2 && after_handed <= before + 2,
        "sampled objects freed but still in the profile: {before} live before, \
         {after_own} after the owner's frees, {after_handed} after the handed-off ones"
    );
}
