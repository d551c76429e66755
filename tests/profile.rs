//! Issue 46, the heap profile (`PCPALLOC_PROFILE`): a program with known
//! allocation sites is profiled and the profile, symbolised as
//! `pcpalloc-prof` does it, must say what each site holds — within 10% of
//! the truth, and nothing for the site that frees everything — from a C
//! program under LD_PRELOAD (tests/c/prof_sites.c) and from this Rust
//! test as a program with pcpalloc as its global allocator. Sampling in
//! threads, across fork and switched at run time must not deadlock
//! (tests/c/prof_threads.c), and with the profile off nothing is written.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use pcpalloc_prof::{bytes_in, Measure, Profile, Stack};
use support::*;

#[global_allocator]
static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;

/// One sample per 32 KiB: about 2,000 samples of the 64 MiB site, whose
/// estimate then spreads by about 2% (one standard deviation).
const MEAN: &str = "32K";
const MIB: f64 = (1 << 20) as f64;

fn stacks_of(path: &Path) -> Vec<Stack> {
    Profile::read(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .symbolise(true)
}

/// Asserts that the sites hold what they should, given the stacks of a
/// profile taken while all of them were live.
fn assert_sites(stacks: &[Stack], small: &str, large: &str, churn: &str) {
    let live = |site| bytes_in(stacks, Measure::Live, site) as f64 / MIB;
    let allocated = |site| bytes_in(stacks, Measure::Allocated, site) as f64 / MIB;
    let report = pcpalloc_prof::top(stacks, Measure::Live, 10, 8);
    let (s, l, c) = (live(small), live(large), live(churn));
    assert!(
        (s - 64.0).abs() <= 6.4,
        "{small}: {s:.1} MiB live, not 64 ± 10%\n{report}"
    );
    assert!(
        (l - 16.0).abs() <= 1.6,
        "{large}: {l:.1} MiB live, not 16 ± 10%\n{report}"
    );
    assert_eq!(
        c, 0.0,
        "{churn} holds nothing, yet the profile says {c:.1} MiB\n{report}"
    );
    // It allocated 128 MiB of 1 KiB blocks and 64 MiB of 64 KiB ones.
    let a = allocated(churn);
    assert!(
        (a - 192.0).abs() <= 19.2,
        "{churn}: {a:.1} MiB allocated, not 192 ± 10%"
    );
}

fn profile_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    v.sort();
    v
}

/// The C program: its profile on demand (all three sites live) and the
/// one at exit, the leak report, hold the same; the exit says so on
/// stderr. (Before: no profile; glibc has none.)
#[test]
fn c_sites_are_estimated_within_ten_percent() {
    let dir = tempdir("profile-c-sites");
    let demand = dir.join("demand.pb");
    let file = dir.join("exit.%p.pb");
    let glibc = on_glibc("prof_sites", &[demand.to_str().unwrap()]);
    glibc.assert_says("prof_sites ok");
    assert!(!demand.exists(), "glibc wrote a profile?");
    let run = on_pcpalloc(
        "prof_sites",
        &[demand.to_str().unwrap()],
        &[
            ("PCPALLOC_PROFILE", MEAN),
            ("PCPALLOC_PROFILE_FILE", file.to_str().unwrap()),
        ],
        QUICK,
    );
    run.assert_says("dump 0").assert_says("prof_sites ok");
    assert!(
        run.stderr().contains("pcpalloc: heap profile:")
            && run.stderr().contains("still live at exit"),
        "no leak summary at exit: {}",
        run.describe()
    );
    assert_sites(&stacks_of(&demand), "hold_small", "hold_large", "churn");
    let at_exit = profile_files(&dir, "exit.");
    assert_eq!(at_exit.len(), 1, "{at_exit:?}");
    assert_sites(&stacks_of(&at_exit[0]), "hold_small", "hold_large", "churn");
}

const SMALL: usize = 1024;
const NSMALL: usize = 64 << 10;
const LARGE: usize = 1 << 20;
const NLARGE: usize = 16;

#[inline(never)]
fn rust_hold_small() -> Vec<u8> {
    let mut v = std::hint::black_box(Vec::with_capacity(SMALL));
    v.push(1u8);
    v
}

#[inline(never)]
fn rust_hold_large() -> Vec<u8> {
    let mut v = std::hint::black_box(Vec::with_capacity(LARGE));
    v.push(1u8);
    v
}

#[inline(never)]
fn rust_churn(n: usize) {
    let mut v: Vec<u8> = std::hint::black_box(Vec::with_capacity(n));
    v.push(1);
    drop(std::hint::black_box(v));
}

/// The sites of prof_sites.c in Rust, then the profile to the path in
/// PCPTEST_PROFILE_OUT (run by the next test in a child process).
#[test]
#[ignore = "run by rust_sites_are_estimated_within_ten_percent"]
fn rust_sites_child() {
    let mut small = Vec::with_capacity(NSMALL);
    let mut large = Vec::with_capacity(NLARGE);
    for i in 0..NSMALL {
        small.push(rust_hold_small());
        rust_churn(SMALL);
        rust_churn(SMALL);
        if i % 64 == 0 {
            rust_churn(64 << 10);
        }
        if i % (NSMALL / NLARGE) == 0 {
            large.push(rust_hold_large());
        }
    }
    let out = std::env::var("PCPTEST_PROFILE_OUT").unwrap();
    pcpalloc::profile::dump(Some(&out)).unwrap();
    let s = pcpalloc::profile::summary();
    assert!(s.live_samples > 0 && s.stacks >= 3, "{s:?}");
    std::hint::black_box((small, large));
}

/// The same from Rust, pcpalloc the global allocator.
#[test]
fn rust_sites_are_estimated_within_ten_percent() {
    let dir = tempdir("profile-rust-sites");
    let out = dir.join("rust.pb");
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "rust_sites_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PCPALLOC_PROFILE", MEAN)
        .env("PCPALLOC_PROFILE_FILE", dir.join("exit.%p.pb"))
        .env("PCPTEST_PROFILE_OUT", &out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_sites(
        &stacks_of(&out),
        "rust_hold_small",
        "rust_hold_large",
        "rust_churn",
    );
}

/// Four threads sampling one allocation per 8 KiB, two forks whose
/// children write their own profiles, sampling switched off and on at run
/// time: no deadlock, every profile written.
#[test]
fn threads_fork_and_switching_do_not_deadlock() {
    let dir = tempdir("profile-threads");
    let child = dir.join("child.%p.pb");
    let run = on_pcpalloc(
        "prof_threads",
        &[child.to_str().unwrap()],
        &[
            ("PCPALLOC_PROFILE", "8K"),
            (
                "PCPALLOC_PROFILE_FILE",
                dir.join("exit.%p.pb").to_str().unwrap(),
            ),
        ],
        QUICK,
    );
    run.assert_ok().assert_says("prof_threads ok");
    let children = profile_files(&dir, "child.");
    assert_eq!(children.len(), 2, "{children:?}\n{}", run.describe());
    for c in &children {
        let p = Profile::read(c).unwrap();
        assert!(!p.mapping.is_empty(), "{}: no mappings", c.display());
    }
    let exit = profile_files(&dir, "exit.");
    assert_eq!(exit.len(), 1, "{exit:?}");
    let stacks = stacks_of(&exit[0]);
    assert!(
        bytes_in(&stacks, Measure::Allocated, "worker") > 0,
        "no sample in the threads\n{}",
        pcpalloc_prof::top(&stacks, Measure::Allocated, 10, 8)
    );
}

/// Without PCPALLOC_PROFILE nothing is sampled and nothing written.
#[test]
fn off_by_default() {
    let dir = tempdir("profile-off");
    let file = dir.join("exit.%p.pb");
    let run = on_pcpalloc(
        "prof_sites",
        &[],
        &[("PCPALLOC_PROFILE_FILE", file.to_str().unwrap())],
        QUICK,
    );
    run.assert_ok().assert_says("prof_sites ok");
    assert!(profile_files(&dir, "exit.").is_empty());
    assert!(!run.stderr().contains("heap profile"), "{}", run.describe());
}

/// Sampling at one allocation per 4 KiB on a 16 KiB thread stack and in
/// signal handlers on an 8 KiB alternate stack (tests/c/inv_stack_calls.c,
/// every call of the malloc family): no overflow — a sample is not taken
/// on the alternate stack. (Before this was handled: SIGSEGV in the
/// signal run.)
#[test]
fn sampling_fits_small_stacks() {
    let dir = tempdir("profile-stacks");
    for mode in ["thread", "signal"] {
        let run = on_pcpalloc(
            "inv_stack_calls",
            &[mode],
            &[
                ("LD_BIND_NOW", "1"),
                ("PCPALLOC_PROFILE", "4K"),
                (
                    "PCPALLOC_PROFILE_FILE",
                    dir.join("p.%p.pb").to_str().unwrap(),
                ),
            ],
            QUICK,
        );
        run.assert_ok().assert_says("inv_stack_calls ok");
    }
}

/// Sampled small objects handed to another thread (tests/c/prof_handoff.c:
/// 64 MiB of 64 B objects at one site, one sample per 4 KiB, about 16,000
/// samples): the consumer's frees take their samples out of the live
/// profile — 16 MiB live after it freed three in four, within 10%, nothing
/// after it freed the rest — and a second free of an object, sampled or
/// not, aborts with one line naming it (a double free; an invalid pointer
/// for a sampled object whose page went back to the zone and merged).
#[test]
fn handed_off_samples_leave_the_profile() {
    let dir = tempdir("profile-handoff");
    let d = dir.to_str().unwrap();
    // Its own files and the exit's both in the test's directory.
    let exit = dir.join("exit.%p.pb");
    let env = [
        ("PCPALLOC_PROFILE", "4K"),
        ("PCPALLOC_PROFILE_FILE", exit.to_str().unwrap()),
    ];
    let on = on_pcpalloc("prof_handoff", &[d], &env, QUICK);
    on.assert_says("prof_handoff ok");
    let live =
        |name: &str| bytes_in(&stacks_of(&dir.join(name)), Measure::Live, "produce") as f64 / MIB;
    let held = live("held.pb");
    assert!(
        (held - 16.0).abs() <= 1.6,
        "{held:.1} MiB live, not 16 ± 10%"
    );
    assert_eq!(live("none.pb"), 0.0, "freed objects still in the profile");
    for i in [0, 1, 4097, 777_777] {
        let n = i.to_string();
        let run = on_pcpalloc("prof_handoff", &[d, "double", &n], &env, QUICK);
        let err = run.stderr();
        assert!(
            run.out.status.signal() == Some(libc::SIGABRT)
                && (err.contains("pcpalloc: free(): double free")
                    || err.contains("pcpalloc: free(): invalid pointer")),
            "{}",
            run.describe()
        );
    }
}

/// A sample runs on a stack of its own and asks the kernel nothing: in
/// 1 GiB of allocations at one sample per 64 KiB (some 12,000 samples),
/// the program's own `sigaltstack` (tests/c/prof_sigaltstack.c, which
/// takes the place of libc's) is called a handful of times at most —
/// glibc's thread start and the unwinder's first use — where asking at
/// every sample whether the thread was on an alternate signal stack made
/// one call a sample (1.6% of kbuild's time).
#[test]
fn samples_make_no_sigaltstack_call() {
    let dir = tempdir("profile-sigaltstack");
    let exit = dir.join("exit.%p.pb");
    let run = on_pcpalloc(
        "prof_sigaltstack",
        &[],
        &[
            ("PCPALLOC_PROFILE", "64K"),
            ("PCPALLOC_PROFILE_FILE", exit.to_str().unwrap()),
        ],
        QUICK,
    );
    run.assert_ok();
    let out = run.stdout();
    let calls: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("sigaltstack calls ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", run.describe()));
    let samples = profile_samples(&run.stderr());
    assert!(samples > 5_000, "{samples} samples: {}", run.describe());
    assert!(
        calls <= 4,
        "{calls} sigaltstack calls for {samples} samples"
    );
}
