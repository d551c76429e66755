//! A `Config` can set every `PCPALLOC_*` setting, through the same
//! parsers: a global allocator configured with a value other than the
//! default for each one starts with all of them (the environment is
//! cleared of `PCPALLOC_*` in the child that checks).

use std::process::Command;

use pcpalloc::{
    Config, FreeCount, FreeHighThreshold, Grouping, Heuristics, HugePages, PageStealing, Pagesets,
    PcpAlloc, PcpEntry, StatsAtExit,
};

const STATS_FILE: &str = "/tmp/pcpalloc-config-every-setting.%p.json";
const TRACE: &str = "/tmp/pcpalloc-config-every-setting-trace";
const PROFILE_FILE: &str = "/tmp/pcpalloc-config-every-setting.%p.pb";

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc::with_config(
    Config::new()
        .memory_limit(3 << 30)
        .pagesets(Pagesets::PerThread)
        .pcp_entry(PcpEntry::Auto)
        .batch_scale_max(3)
        .high_fraction(16)
        .heuristics(Heuristics::upto(7))
        .free_count(FreeCount::Exact)
        .free_high_threshold(FreeHighThreshold::FiveBatch)
        .decay_ms(123)
        .dirty_ratio(40)
        .background_thread(true)
        .stats(StatsAtExit::Json)
        .stats_file(STATS_FILE)
        .trace(TRACE)
        .steal(PageStealing::Linux3_19)
        .grouping(Grouping::Mobility)
        .huge_pages(HugePages::Never)
        .cgroup("none")
        .profile(64 << 10)
        .profile_file(PROFILE_FILE),
);

/// What the report says of every setting, with the config above.
const EXPECTED: [(&str, &str); 20] = [
    ("PCPALLOC_MEMORY_LIMIT", "3221225472"),
    ("PCPALLOC_PCP", "thread"),
    ("PCPALLOC_PCP_ENTRY", "auto"),
    ("PCPALLOC_BATCH_SCALE_MAX", "3"),
    ("PCPALLOC_HIGH_FRACTION", "16"),
    (
        "PCPALLOC_HEURISTICS",
        "prev_free_high_order,free_high_batch,alloc_factor,auto_tune",
    ),
    ("PCPALLOC_FREE_COUNT", "exact"),
    ("PCPALLOC_FREE_HIGH_THRESHOLD", "5batch"),
    ("PCPALLOC_DECAY_MS", "123"),
    ("PCPALLOC_DIRTY_RATIO", "40"),
    ("PCPALLOC_BACKGROUND", "1"),
    ("PCPALLOC_STATS", "json"),
    ("PCPALLOC_STATS_FILE", STATS_FILE),
    ("PCPALLOC_TRACE", TRACE),
    ("PCPALLOC_STEAL", "baseline"),
    ("PCPALLOC_GROUPING", "mobility"),
    ("PCPALLOC_THP", "never"),
    ("PCPALLOC_CGROUP", "none"),
    ("PCPALLOC_PROFILE", "65536"),
    ("PCPALLOC_PROFILE_FILE", PROFILE_FILE),
];

/// Prints the report (run by the next test in a child process).
#[test]
#[ignore = "run by every_setting_comes_from_the_config"]
fn print_report() {
    // 4 MiB allocated: the profile (one sample per 64 KiB on average) has
    // samples to write at exit (without, a run that took none wrote no
    // file: P = e^-64 now).
    for _ in 0..4096 {
        std::hint::black_box(vec![1u8; 1024]);
    }
    let mut text = String::new();
    pcpalloc::write_report(&mut text).unwrap();
    print!("{text}");
}

#[test]
fn every_setting_comes_from_the_config() {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "print_report",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, _) in std::env::vars() {
        if k.starts_with("PCPALLOC_") {
            c.env_remove(k);
        }
    }
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("pcpalloc: ignoring"), "{err}");
    let r = String::from_utf8_lossy(&o.stdout);
    // One expected value per setting, none the default.
    let names: Vec<&str> = pcpalloc::internals::TUNABLES
        .iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, EXPECTED.map(|e| e.0));
    for (t, (name, want)) in pcpalloc::internals::TUNABLES.iter().zip(EXPECTED) {
        let got = r
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in\n{r}"));
        assert_eq!(got, want, "{name}");
        assert!(
            !t.default.starts_with(want),
            "{name}: {want} is the default"
        );
    }
    // The report at exit: JSON, in the configured file.
    let path = STATS_FILE.replace("%p", &pid.to_string());
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let _ = std::fs::remove_file(&path);
    let j: serde_json::Value = serde_json::from_str(json.trim_end()).unwrap();
    assert_eq!(j["pid"].as_u64(), Some(u64::from(pid)));
    for (name, want) in EXPECTED {
        // Whole numbers are JSON numbers, the rest strings.
        match want.parse::<u64>() {
            Ok(n) => assert_eq!(j["settings"][name].as_u64(), Some(n), "{name}"),
            Err(_) => assert_eq!(j["settings"][name], want, "{name}"),
        }
    }
    // And the trace the configured prefix names.
    let trace = format!("{TRACE}.{pid}");
    let bytes = std::fs::read(&trace).unwrap_or_else(|e| panic!("{trace}: {e}"));
    let _ = std::fs::remove_file(&trace);
    assert_eq!(&bytes[..8], b"PCPTRACE");
    // And the heap profile at exit, where the configured path says.
    let profile = PROFILE_FILE.replace("%p", &pid.to_string());
    let meta = std::fs::metadata(&profile).unwrap_or_else(|e| panic!("{profile}: {e}"));
    let _ = std::fs::remove_file(&profile);
    assert!(meta.len() > 0, "{profile} is empty");
}
