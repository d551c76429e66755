//! Configuration from code: a `#[global_allocator]` carrying a `Config`
//! starts with it, and the environment overrides it.

use pcpalloc::{Config, Heuristics, Pagesets, PcpAlloc};
use std::process::Command;

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc::with_config(
    Config::new()
        .memory_limit(3 << 30)
        .decay_ms(250)
        .pagesets(Pagesets::PerThread)
        .heuristics(Heuristics::upto(5)),
);

fn report() -> String {
    let mut text = String::new();
    pcpalloc::write_report(&mut text).unwrap();
    text
}

fn setting<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in\n{report}"))
}

#[test]
fn the_allocator_starts_with_its_config() {
    if std::env::var_os("PCPALLOC_DECAY_MS").is_some() {
        return; // the run below, with the environment's value
    }
    let r = report();
    assert_eq!(setting(&r, "PCPALLOC_DECAY_MS"), "250");
    assert_eq!(setting(&r, "PCPALLOC_PCP"), "thread");
    assert_eq!(
        setting(&r, "PCPALLOC_MEMORY_LIMIT"),
        (3u64 << 30).to_string()
    );
    assert_eq!(
        setting(&r, "PCPALLOC_HEURISTICS"),
        "prev_free_high_order,free_high_batch,alloc_factor"
    );
    assert_eq!(setting(&r, "memory_limit_bytes"), (3u64 << 30).to_string());
}

/// Prints the report (run by the next test in a child process).
#[test]
#[ignore = "run by the_environment_overrides_the_config"]
fn print_report() {
    print!("{}", report());
}

#[test]
fn the_environment_overrides_the_config() {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "print_report",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PCPALLOC_DECAY_MS", "500")
        .env("PCPALLOC_HEURISTICS", "all")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let r = String::from_utf8_lossy(&o.stdout);
    assert_eq!(setting(&r, "PCPALLOC_DECAY_MS"), "500");
    assert_eq!(setting(&r, "PCPALLOC_HEURISTICS"), "all");
    // What the environment does not name keeps the config's value.
    assert_eq!(setting(&r, "PCPALLOC_PCP"), "thread");
}

#[test]
fn a_bad_environment_value_keeps_the_configs() {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "print_report",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PCPALLOC_DECAY_MS", "5")
        .env("PCPALLOC_BATCH_SCALE_MAX", "9")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    let r = String::from_utf8_lossy(&o.stdout);
    // The config set the tick: the line says it is kept.
    assert!(
        err.contains(
            "pcpalloc: ignoring PCPALLOC_DECAY_MS=5 (below the minimum of 10 ms); keeping the Config's value, 250\n"
        ),
        "{err}"
    );
    assert_eq!(setting(&r, "PCPALLOC_DECAY_MS"), "250");
    // It did not set the batch scale: the default stays.
    assert!(
        err.contains(
            "pcpalloc: ignoring PCPALLOC_BATCH_SCALE_MAX=9 (above the maximum of 6); using the default, 5\n"
        ),
        "{err}"
    );
}
