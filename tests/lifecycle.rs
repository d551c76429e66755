//! Issue 17, "a drop-in library survives every way a process can start,
//! load, thread and end": each row of the issue's table as a C (or C++)
//! program (tests/c/lc_*) run under LD_PRELOAD=libpcpalloc.so — or, for
//! dlopen, loading it — asserting what glibc does or what the issue asks
//! for. Programs that make sense without pcpalloc run on glibc too, as the
//! reference. Every run has a time limit: a hang fails the test.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use support::*;

/// Row 1: 60 pthread_atfork registrations before the first malloc (glibc
/// then mallocs under its atfork lock), then malloc, fork, wait. (Before:
/// hang — the first malloc started the allocator, which registered its own
/// fork handlers and waited on the lock its caller held.)
#[test]
fn atfork_registrations_before_the_first_malloc() {
    on_glibc("lc_atfork", &[]).assert_says("lc_atfork ok");
    on_pcpalloc("lc_atfork", &[], &[], QUICK).assert_says("lc_atfork ok");
}

/// Row 2: 40 atexit registrations before the first malloc, with
/// PCPALLOC_STATS=1 (the report must appear on stderr) and with
/// PCPALLOC_TRACE (a trace file must be written): both exit normally, every
/// handler run. (Before: hang on __exit_funcs_lock.)
#[test]
fn atexit_registrations_before_the_first_malloc() {
    on_glibc("lc_atexit", &[]).assert_says("lc_atexit ok");
    let dir = tempdir("lc-atexit-trace");
    let prefix = dir.join("trace");
    let prefix_s = prefix.to_str().unwrap().to_string();
    // Both at once: a hang costs the time limit once.
    let stats =
        std::thread::spawn(|| on_pcpalloc("lc_atexit", &[], &[("PCPALLOC_STATS", "1")], QUICK));
    let trace = on_pcpalloc("lc_atexit", &[], &[("PCPALLOC_TRACE", &prefix_s)], QUICK);
    let stats = stats.join().unwrap();
    let mut failures = Vec::new();
    if stats.timed_out || !stats.out.status.success() || !stats.stdout().contains("lc_atexit ok") {
        failures.push(format!("with PCPALLOC_STATS=1: {}", stats.describe()));
    } else if !stats.stderr().contains("allocated_bytes ") {
        failures.push(format!(
            "PCPALLOC_STATS=1 printed no report: {}",
            stats.describe()
        ));
    }
    if trace.timed_out || !trace.out.status.success() || !trace.stdout().contains("lc_atexit ok") {
        failures.push(format!("with PCPALLOC_TRACE: {}", trace.describe()));
    } else {
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("trace."))
            .collect();
        if files.is_empty() {
            failures.push(format!("PCPALLOC_TRACE={prefix_s} wrote no trace file"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Row 3: 40 pthread keys created before the first malloc, then malloc in
/// main and in 8 threads. (Before: SIGSEGV, attach_thread ->
/// pthread_setspecific -> calloc -> attach_thread ... until the stack ran
/// out.)
#[test]
fn many_pthread_keys_before_the_first_malloc() {
    on_glibc("lc_keys", &[]).assert_says("lc_keys ok");
    on_pcpalloc("lc_keys", &[], &[], QUICK).assert_says("lc_keys ok");
}

/// Row 4: 2,000 threads whose key destructors allocate in every destructor
/// round: at most 64 thread heaps afterwards and VmRSS grown by at most 16
/// MiB (glibc: well under 1 MiB). (Before: 2,001 heaps never reclaimed.)
#[test]
fn thread_heaps_are_reclaimed_after_late_destructors() {
    on_glibc("lc_key_dtors", &["2000"]).assert_says("lc_key_dtors ok");
    on_pcpalloc("lc_key_dtors", &["2000"], &[], QUICK).assert_says("lc_key_dtors ok");
}

/// Whether the run aborted with SIGABRT after exactly one line on stderr,
/// naming the address it printed; if not, why.
fn aborts_naming_address(r: &Run) -> Result<(), String> {
    if r.timed_out || r.out.status.signal() != Some(libc::SIGABRT) {
        return Err(format!("did not abort: {}", r.describe()));
    }
    let Some(addr) = r
        .stdout()
        .lines()
        .find_map(|l| l.strip_prefix("bad ").map(|a| a.trim().to_lowercase()))
    else {
        return Err(format!("no address printed: {}", r.describe()));
    };
    let err = r.stderr().to_lowercase();
    let lines: Vec<_> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() != 1 {
        return Err(format!("expected one line on stderr: {}", r.describe()));
    }
    if !lines[0].contains(&addr) {
        return Err(format!("the line does not name {addr}: {}", r.describe()));
    }
    Ok(())
}

/// Row 5: free_sized(p + 16, 16) for p = malloc(64), and C++ sized delete
/// of an interior pointer, abort with one line naming the address (glibc
/// 2.36 has no free_sized; its sized delete calls free, which aborts).
/// (Before: both returned as if the block had been freed.)
#[test]
fn sized_free_of_an_interior_pointer_aborts() {
    let c_ref = on_glibc("lc_free_sized", &[]);
    if c_ref.out.status.code() != Some(77) {
        // A libc with free_sized: it must abort too.
        assert_eq!(
            c_ref.out.status.signal(),
            Some(libc::SIGABRT),
            "{}",
            c_ref.describe()
        );
    }
    let cxx_ref = on_glibc("lc_sized_delete", &[]);
    assert_eq!(
        cxx_ref.out.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        cxx_ref.describe()
    );

    let c = on_pcpalloc("lc_free_sized", &[], &[], QUICK);
    let cxx = on_pcpalloc("lc_sized_delete", &[], &[], QUICK);
    let failures: Vec<_> = [("free_sized", &c), ("C++ sized delete", &cxx)]
        .into_iter()
        .filter_map(|(what, r)| {
            aborts_naming_address(r)
                .err()
                .map(|e| format!("{what}: {e}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Row 6: a program not run under LD_PRELOAD dlopen()s libpcpalloc.so,
/// uses it from two threads (32 MiB: its background thread starts, asked
/// for with PCPALLOC_BACKGROUND=1), dlclose()s it, sleeps 1.5 s with
/// PCPALLOC_DECAY_MS=100, dlopen()s and uses it again, exits 0. (Before:
/// SIGSEGV in the background thread, its code unmapped.)
#[test]
fn dlopen_dlclose_dlopen_cycle() {
    let mut c = Command::new(c_program("lc_dlopen"));
    c.arg(preload_lib())
        .env_remove("LD_PRELOAD")
        .env("PCPALLOC_BACKGROUND", "1")
        .env("PCPALLOC_DECAY_MS", "100");
    run_for(&mut c, QUICK).assert_says("lc_dlopen ok");
}

/// Row 7: errno set to 12345 before the process's first malloc is still
/// 12345 after it, and after every other successful call (a huge realloc
/// that moves or grows, free, calloc, posix_memalign, aligned_alloc, a new
/// thread's first malloc). (Before: ENOENT after the first malloc, ENOMEM
/// after the huge realloc.)
#[test]
fn errno_untouched_by_successful_calls() {
    on_glibc("lc_errno", &[]).assert_says("lc_errno ok");
    on_pcpalloc("lc_errno", &[], &[], QUICK).assert_says("lc_errno ok");
}

/// Row 8: posix_memalign / aligned_alloc / memalign with alignments 2^28,
/// 2^30, 2^33 for 1 KiB and 5 MiB succeed, aligned, writable, freeable.
/// (Before: ENOMEM for every alignment >= 2^28.)
#[test]
fn alignments_up_to_the_address_space() {
    on_glibc("lc_big_align", &[]).assert_says("lc_big_align ok");
    on_pcpalloc("lc_big_align", &[], &[], QUICK).assert_says("lc_big_align ok");
}

/// Row 9: 5,000 short threads, 20 alive at once (mixed sizes, some blocks
/// freed by later threads) with PCPALLOC_BACKGROUND=0 and
/// PCPALLOC_DECAY_MS=100, then 2 s idle: VmRSS within 16 MiB of its value
/// before the storm. (Before: the memory was kept for good — no slow path
/// ever ran the tick.) No glibc reference: its arenas keep 17-27 MiB of
/// this workload too.
#[test]
fn thread_storm_memory_goes_back_without_background_thread() {
    on_pcpalloc(
        "lc_thread_storm",
        &["5000", "20", "16"],
        &[("PCPALLOC_BACKGROUND", "0"), ("PCPALLOC_DECAY_MS", "100")],
        LONG,
    )
    .assert_says("lc_thread_storm ok");
}

/// Row 10: resident_bytes agrees with VmRSS growth (within 25% or 8 MiB)
/// after a 300 MiB burst from 4 threads is freed and the program idles 1 s
/// with PCPALLOC_DECAY_MS=100, and at the burst's peak. (Before: counted
/// every mapped page, touched or not: 345 MiB against 175 MiB of RSS.)
#[test]
fn resident_bytes_matches_rss() {
    on_pcpalloc("lc_resident", &[], &[("PCPALLOC_DECAY_MS", "100")], QUICK)
        .assert_says("lc_resident ok");
}
