//! Settings changed while the program runs (`pcpalloc::set`), with
//! pcpalloc as this test binary's global allocator: each takes effect, bad
//! values get the environment's reasons, settings read once at start are
//! refused, and a memory limit lowered below what the heap holds breaks
//! nothing — only later requests fail, until enough is freed.

use std::sync::Mutex;

use pcpalloc::{PcpAlloc, SetErrorKind};

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc;

/// One test at a time: they change process-wide settings.
static SERIAL: Mutex<()> = Mutex::new(());

fn setting(name: &str) -> String {
    let mut text = String::new();
    pcpalloc::write_report(&mut text).unwrap();
    text.lines()
        .find_map(|l| Some(l.strip_prefix(name)?.strip_prefix(' ')?.to_string()))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
fn run_time_settings_take_effect_and_refuse_what_the_environment_refuses() {
    let _g = SERIAL.lock().unwrap();
    pcpalloc::set("PCPALLOC_DECAY_MS", "250").unwrap();
    assert_eq!(setting("PCPALLOC_DECAY_MS"), "250");
    pcpalloc::set("decay_ms", " 300 ").unwrap();
    assert_eq!(setting("PCPALLOC_DECAY_MS"), "300");
    assert_eq!(
        pcpalloc::set("decay_ms", "5").map_err(|e| e.kind()),
        Err(SetErrorKind::Invalid("below the minimum of 10 ms"))
    );
    assert_eq!(setting("PCPALLOC_DECAY_MS"), "300");

    let before = pcpalloc::internals::knobs();
    pcpalloc::set("heuristics", "base").unwrap();
    pcpalloc::set("free_count", "exact").unwrap();
    pcpalloc::set("free_high_threshold", "batch").unwrap();
    pcpalloc::set("batch_scale_max", "3").unwrap();
    let k = pcpalloc::internals::knobs();
    assert_eq!(k.heuristics, pcpalloc::internals::Heuristics::BASE);
    assert_eq!(k.free_count_mode, pcpalloc::internals::FreeCountMode::Exact);
    assert_eq!(
        k.free_high_threshold,
        pcpalloc::internals::FreeHighThreshold::Batch
    );
    assert_eq!(k.batch_scale_max, 3);
    assert_eq!(setting("PCPALLOC_HEURISTICS"), "base");
    // A knob set directly (the benchmark's ablation) is the base the next
    // change starts from.
    pcpalloc::internals::set_knobs(before);
    pcpalloc::set("batch_scale_max", "4").unwrap();
    let k = pcpalloc::internals::knobs();
    assert_eq!((k.heuristics, k.batch_scale_max), (before.heuristics, 4));
    pcpalloc::internals::set_knobs(before);

    assert_eq!(
        pcpalloc::set("batch_scale_max", "7").map_err(|e| e.kind()),
        Err(SetErrorKind::Invalid("above the maximum of 6"))
    );
    assert_eq!(
        pcpalloc::set("PCPALLOC_PCP", "thread").map_err(|e| e.kind()),
        Err(SetErrorKind::NotAtRunTime)
    );
    assert_eq!(
        pcpalloc::set("high_fraction", "8").map_err(|e| e.kind()),
        Err(SetErrorKind::NotAtRunTime)
    );
    assert_eq!(
        pcpalloc::set("PCPALLOC_NOPE", "1").map_err(|e| e.kind()),
        Err(SetErrorKind::Unknown)
    );

    pcpalloc::set("stats", "json").unwrap();
    assert_eq!(setting("PCPALLOC_STATS"), "json");
    pcpalloc::set("stats", "0").unwrap();
    assert_eq!(setting("PCPALLOC_STATS"), "0");
    assert_eq!(
        pcpalloc::set("stats", "yes please").map_err(|e| e.kind()),
        Err(SetErrorKind::Invalid("neither 0, 1 nor json"))
    );
    pcpalloc::set("decay_ms", "1000").unwrap();
}

#[test]
fn a_memory_limit_lowered_below_the_heap_only_stops_new_requests() {
    let _g = SERIAL.lock().unwrap();
    const MIB: usize = 1 << 20;
    let held: Vec<Vec<u8>> = (0..32).map(|i| vec![i as u8; MIB]).collect();
    let charged = pcpalloc::stats().bytes.charged;
    assert!(charged > 32 * MIB as u64);
    let mut more: Vec<u8> = Vec::new();
    pcpalloc::set("memory_limit", "8M").unwrap();
    // The heap holds four times the limit: nothing is taken back, the
    // invariants hold, and a new request fails cleanly. (Nothing here
    // allocates until enough is freed: any request for new pages fails.)
    assert_eq!(pcpalloc::stats().zone.memory_limit, 8 * MIB);
    pcpalloc::internals::check_invariants();
    let refused = more.try_reserve_exact(2 * MIB).is_err();
    for (i, v) in held.iter().enumerate() {
        assert!(v.iter().all(|&b| b == i as u8));
    }
    drop(held);
    assert!(refused);
    pcpalloc::trim();
    assert!(pcpalloc::stats().bytes.charged <= 8 * MIB as u64);
    more.try_reserve_exact(2 * MIB).unwrap();
    more.resize(2 * MIB, 7);
    pcpalloc::internals::check_invariants();
    drop(more);
    pcpalloc::set("memory_limit", "none").unwrap();
    assert_eq!(setting("memory_limit_bytes"), "0");
    let big = vec![1u8; 64 * MIB];
    assert_eq!(big[64 * MIB - 1], 1);
}
