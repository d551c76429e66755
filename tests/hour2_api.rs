//! Issue 47, item 4: an honest API. A refused setting is a
//! `std::error::Error` that names it; a setting's value can be read
//! (`pcpalloc::get`); the JSON report gives numbers as numbers; a failure
//! the program handles (`try_reserve`) prints nothing; `trim` reports the
//! resident bytes it gave back, no more.

mod support;

use std::process::Command;
use std::time::Duration;

use pcpalloc::{PcpAlloc, SetErrorKind};
use support::*;

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc;

/// One test at a time: they read and change process-wide state.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What the child test below does when this variable names it.
const CHILD: &str = "PCPTEST_API_CHILD";

#[test]
fn a_refused_setting_is_an_error_that_names_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let e = pcpalloc::set("decay_ms", "5").unwrap_err();
    assert_eq!(e.name(), "PCPALLOC_DECAY_MS");
    assert_eq!(
        e.kind(),
        SetErrorKind::Invalid("below the minimum of 10 ms")
    );
    assert_eq!(
        e.to_string(),
        "PCPALLOC_DECAY_MS: below the minimum of 10 ms"
    );
    // Usable with `?` where errors are boxed.
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().starts_with("PCPALLOC_DECAY_MS: "));
    let e = pcpalloc::set("PCPALLOC_NOPE", "1").unwrap_err();
    assert_eq!(e.to_string(), "PCPALLOC_NOPE: not a setting of pcpalloc");
    let e = pcpalloc::set("PCPALLOC_PCP", "thread").unwrap_err();
    assert_eq!(
        e.to_string(),
        "PCPALLOC_PCP: read once at start, not changeable at run time"
    );
    assert_eq!(e, SetErrorKind::NotAtRunTime);
}

#[test]
fn get_reads_a_setting_as_the_report_shows_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let get = |name: &str| {
        let mut v = String::new();
        pcpalloc::get(name, &mut v).map(|()| v)
    };
    pcpalloc::set("decay_ms", "250").unwrap();
    assert_eq!(get("decay_ms").unwrap(), "250");
    assert_eq!(get("PCPALLOC_DECAY_MS").unwrap(), "250");
    pcpalloc::set("decay_ms", "1000").unwrap();
    assert_eq!(get("decay_ms").unwrap(), "1000");
    assert_eq!(get("memory_limit").unwrap(), "none");
    let e = get("nope").unwrap_err();
    assert_eq!((e.kind(), e.name()), (SetErrorKind::Unknown, "nope"));
    // Every setting, as the report's header has it.
    let mut report = String::new();
    pcpalloc::write_report(&mut report).unwrap();
    for t in pcpalloc::internals::TUNABLES {
        let line = format!("{} {}\n", t.name, get(t.name).unwrap());
        assert!(report.contains(&line), "{line:?} not in the report");
    }
}

#[test]
fn the_json_report_gives_numbers_as_numbers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut j = String::new();
    pcpalloc::write_report_json(&mut j).unwrap();
    let v: serde_json::Value = serde_json::from_str(j.trim_end()).unwrap();
    let s = &v["settings"];
    assert_eq!(s["PCPALLOC_DECAY_MS"].as_u64(), Some(1000), "{s}");
    assert_eq!(s["PCPALLOC_DIRTY_RATIO"].as_u64(), Some(80), "{s}");
    assert_eq!(s["PCPALLOC_MEMORY_LIMIT"], "none");
    assert_eq!(s["PCPALLOC_PCP"], "cpu");
    for (name, value) in s.as_object().unwrap() {
        if let Some(t) = value.as_str() {
            assert!(t.parse::<u64>().is_err(), "{name}: {t:?} is a number");
        }
    }
    for (name, value) in v["counters"].as_object().unwrap() {
        assert!(value.is_number(), "counter {name}: {value}");
    }
    assert!(v["summary"]["live_bytes"].is_number());
}

/// A `try_reserve` the program handles prints nothing; the child below
/// asks for 64 TiB and, under a memory limit, for 64 MiB, gets `Err` and
/// says so on stdout. (Before: "pcpalloc: cannot allocate 67108864
/// bytes: the memory limit … is reached" on stderr.)
#[test]
fn a_handled_try_reserve_failure_prints_nothing() {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "child_try_reserve",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "try_reserve")
    .env("PCPALLOC_MEMORY_LIMIT", "32M");
    let r = run_for(&mut c, Duration::from_secs(30));
    r.assert_says("try_reserve: Err");
    r.assert_says("try_reserve at the limit: Err");
    let noise: Vec<&str> = r
        .out
        .stderr
        .split(|&b| b == b'\n')
        .filter_map(|l| std::str::from_utf8(l).ok())
        .filter(|l| l.contains("pcpalloc"))
        .collect();
    assert!(noise.is_empty(), "{}", r.describe());
}

#[test]
fn child_try_reserve() {
    if std::env::var(CHILD).as_deref() != Ok("try_reserve") {
        return;
    }
    let mut v: Vec<u8> = Vec::new();
    let r = v.try_reserve(64 << 40);
    println!("try_reserve: {}", if r.is_err() { "Err" } else { "Ok" });
    let mut w: Vec<u64> = vec![1; 10];
    let r = w.try_reserve_exact(1 << 44);
    println!(
        "try_reserve_exact: {}",
        if r.is_err() { "Err" } else { "Ok" }
    );
    let mut x: Vec<u8> = Vec::new();
    let r = x.try_reserve(64 << 20);
    println!(
        "try_reserve at the limit: {}",
        if r.is_err() { "Err" } else { "Ok" }
    );
    let r = w.try_reserve(64 << 20);
    println!(
        "try_reserve (grow) at the limit: {}",
        if r.is_err() { "Err" } else { "Ok" }
    );
}

/// `trim` gives back no more than was resident: 32 blocks of 1 MiB (the
/// page allocator's, not mappings of their own), of which one page each
/// was touched, freed: trim reports at most what the heap held resident
/// and at most how far its resident bytes fell. (Before: the length of
/// the ranges it released, untouched pages included — more than the
/// whole heap held.)
#[test]
fn trim_reports_no_more_than_it_gave_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    pcpalloc::trim();
    let blocks: Vec<Vec<u8>> = (0..32)
        .map(|_| {
            let mut v = Vec::with_capacity(1 << 20);
            v.push(1u8);
            v
        })
        .collect();
    drop(blocks);
    let held = pcpalloc::stats().bytes.resident;
    let given = pcpalloc::trim();
    let after = pcpalloc::stats().bytes.resident;
    println!("trim: {given} bytes given back; resident {held} -> {after}");
    assert!(
        given as u64 <= held,
        "trim reported {given} bytes given back; {held} were resident"
    );
    assert!(
        given as u64 <= held.saturating_sub(after) + (256 << 10),
        "trim reported {given}; resident went from {held} to {after}"
    );
}

/// C's `pcpalloc_get`, preloaded: values, errors, a value cut to fit.
#[test]
fn c_pcpalloc_get_reads_a_setting() {
    if !have_preload_lib() {
        return skip("libpcpalloc.so is built by the workspace (this is the packaged crate)");
    }
    on_pcpalloc("api_get", &[], &[], QUICK).assert_says("api_get ok");
}

/// `internals::free_pages` gives a block back the way
/// `internals::alloc_pages` took it, through this CPU's pageset at its
/// order, so a thousand rounds do not grow the heap. (Before: free_pages was malloc's free, whose block went to the
/// thread's block bins; every alloc_pages refilled from the zone.)
#[test]
fn free_pages_pairs_with_alloc_pages() {
    use pcpalloc::internals::{alloc_pages, free_pages, MigrateType};
    // The thread's first allocation gives it its heap.
    std::hint::black_box(Box::new(0u64));
    let first = alloc_pages(1, MigrateType::Movable);
    assert!(!first.is_null());
    // SAFETY: first came from alloc_pages and is not used again.
    unsafe { free_pages(first) };
    let mapped = pcpalloc::stats().bytes.mapped;
    for _ in 0..1000 {
        let p = alloc_pages(1, MigrateType::Movable);
        assert!(!p.is_null());
        // SAFETY: as above.
        unsafe { free_pages(p) };
    }
    let again = alloc_pages(1, MigrateType::Movable);
    assert!(!again.is_null());
    // SAFETY: as above.
    unsafe { free_pages(again) };
    assert_eq!(pcpalloc::stats().bytes.mapped, mapped);
}
