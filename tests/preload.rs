//! libpcpalloc.so under LD_PRELOAD: C test programs for every API and its
//! edge cases, each bad input in a child process, and real programs whose
//! output must match a run on the system malloc.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use support::*;

fn c_test(name: &str, args: &[&str]) {
    c_test_with(name, args, &[]);
}

/// [`c_test`] with environment variables set.
fn c_test_with(name: &str, args: &[&str], env: &[(&str, &str)]) {
    let bin = c_program(name);
    let o = run_ok(preloaded(&bin).args(args).envs(env.iter().copied()));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("{name} ok")), "{}", text(&o));
}

#[test]
fn alignment_sweep() {
    c_test("align_sweep", &[]);
}

#[test]
fn realloc_keeps_data_across_ranges() {
    c_test("realloc_sizes", &[]);
}

#[test]
fn calloc_zeroes_reused_memory() {
    c_test("calloc_reuse", &[]);
}

#[test]
fn usable_size_covers_request() {
    c_test("usable", &[]);
}

#[test]
fn producer_consumer_cross_thread_frees() {
    c_test("prodcons", &[]);
}

#[test]
fn thousand_short_lived_threads() {
    c_test("thread_churn", &[]);
}

/// With per-thread pagesets no pageset takes another's large blocks, not
/// even the CPU pagesets that threads past their exit hook use.
#[test]
fn thread_pagesets_never_steal_large_blocks() {
    c_test_with("thread_mode_steal", &[], &[("PCPALLOC_PCP", "thread")]);
}

#[test]
fn fork_while_threads_allocate() {
    c_test("fork_busy", &["4", "50"]);
}

/// fork() while the maintenance tick runs (every 10 ms), with and without
/// the background thread: every child allocates through slow paths, sees a
/// tick of its own and exits within its deadline. (Before the tick lock
/// joined fork's list of locks, a child forked mid-tick hung forever.)
#[test]
fn fork_during_the_tick() {
    let bin = c_program("fork_tick");
    for background in ["0", "1"] {
        run_ok(
            preloaded(&bin)
                .args(["6", "40"])
                .env("PCPALLOC_BACKGROUND", background)
                .env("PCPALLOC_DECAY_MS", "10"),
        );
    }
}

/// fork() while other threads give memory back for the dirty limit: no
/// child finds blocks isolated by a release (they would never go back on
/// the free lists), and every child gives memory back for the limit
/// itself. (Before the zone's release gate joined fork's list of locks,
/// about one child in ten found 1-3 pageblocks isolated.) With the
/// background thread asked for: without it a free gives back what waits
/// long before the dirty limit is reached (`runtime/give_back.rs`); and a
/// low dirty ratio, so the limit is what the memory of the use's recent
/// peak makes it, not the ratio of what the parent's threads left in use.
#[test]
fn fork_while_threads_release_memory() {
    c_test_with(
        "fork_release",
        &["3", "20"],
        &[("PCPALLOC_BACKGROUND", "1"), ("PCPALLOC_DIRTY_RATIO", "20")],
    );
}

#[test]
fn thread_pcp_mode_cross_thread_and_churn() {
    for name in ["prodcons", "thread_churn"] {
        let bin = c_program(name);
        run_ok(preloaded(&bin).env("PCPALLOC_PCP", "thread"));
    }
}

#[test]
fn no_background_thread_mode() {
    let bin = c_program("prodcons");
    run_ok(
        preloaded(&bin)
            .env("PCPALLOC_BACKGROUND", "0")
            .env("PCPALLOC_DECAY_MS", "10"),
    );
}

#[test]
fn fork_in_thread_pcp_mode() {
    let bin = c_program("fork_busy");
    run_ok(
        preloaded(&bin)
            .args(["3", "20"])
            .env("PCPALLOC_PCP", "thread"),
    );
}

/// Cases that must succeed (exit 0).
#[test]
fn bad_input_gets_clean_errors() {
    let bin = c_program("bad_input");
    for case in [
        "absurd_size",
        "calloc_overflow",
        "reallocarray_overflow",
        "bad_alignment",
        "free_null_and_malloc0",
        "free_keeps_errno",
    ] {
        let o = run_ok(preloaded(&bin).arg(case));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("ok"),
            "{case}: {}",
            text(&o)
        );
        assert!(o.stderr.is_empty(), "{case} printed: {}", text(&o));
    }
    let o = run_ok(
        preloaded(&bin)
            .arg("memory_limit")
            .env("PCPALLOC_MEMORY_LIMIT", "64M"),
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("limit reached"),
        "{}",
        text(&o)
    );
}

/// Cases that must be caught: one line naming the problem and the address
/// on stderr, then abort (SIGABRT).
#[test]
fn bad_frees_abort_with_one_line() {
    let bin = c_program("bad_input");
    for (case, needle) in [
        ("double_free_small", "free(): double free detected 0x"),
        ("double_free_large", "free(): double free detected 0x"),
        (
            "double_free_large_remote",
            "free(): double free detected 0x",
        ),
        ("double_free_remote", "free(): double free detected 0x"),
        (
            "double_free_remote_pending",
            "free(): double free detected (pending remote free) 0x",
        ),
        ("invalid_free_stack", "free(): invalid pointer 0x"),
        ("invalid_free_static", "free(): invalid pointer 0x"),
        ("invalid_free_heap_unmapped", "free(): invalid pointer 0x"),
        ("invalid_free_heap_metadata", "free(): invalid pointer 0x"),
        ("invalid_free_wild", "free(): invalid pointer 0x"),
        (
            "invalid_free_uncarved",
            "free(): invalid pointer (not the start of a block) 0x",
        ),
        ("invalid_free_top_bit_first", "free(): invalid pointer 0x"),
        (
            "invalid_free_top_bit_small_as",
            "free(): invalid pointer 0x",
        ),
        (
            "interior_small",
            "free(): invalid pointer (not the start of a block) 0x",
        ),
        ("interior_large", "free(): invalid pointer 0x"),
        (
            "interior_large_head_page",
            "free(): invalid pointer (inside a block) 0x",
        ),
        ("realloc_freed", "realloc(): pointer already freed 0x"),
        ("realloc_freed_large", "realloc(): pointer already freed 0x"),
        ("realloc_invalid", "realloc(): invalid pointer 0x"),
    ] {
        let o = preloaded(&bin).arg(case).output().unwrap();
        assert_eq!(
            o.status.signal(),
            Some(libc::SIGABRT),
            "{case} did not abort: {}",
            text(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<_> = err.lines().filter(|l| l.starts_with("pcpalloc:")).collect();
        assert_eq!(lines.len(), 1, "{case}: {}", text(&o));
        assert!(
            lines[0].contains(needle),
            "{case}: expected {needle:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn bad_tunables_warn_and_use_defaults() {
    let o = run_ok(
        preloaded("sh")
            .args(["-c", "echo hi"])
            .env("PCPALLOC_BATCH_SCALE_MAX", "9")
            .env("PCPALLOC_PCP", "gpu")
            .env("PCPALLOC_MEMORY_LIMIT", "lots"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\n");
    for v in [
        "PCPALLOC_BATCH_SCALE_MAX=9",
        "PCPALLOC_PCP=gpu",
        "PCPALLOC_MEMORY_LIMIT=lots",
    ] {
        assert_eq!(err.matches(v).count(), 1, "{v}: {err}");
    }
}

#[test]
fn glibc_entry_points_share_our_heap_and_report_it() {
    let bin = c_program("glibc_abi");
    let o = run_ok(preloaded(&bin).env("PCPALLOC_STAT", "1"));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("glibc_abi ok"), "{}", text(&o));
    // The misspelt variable gets one line, naming it.
    assert_eq!(
        err.matches("pcpalloc: ignoring PCPALLOC_STAT: not a setting of pcpalloc")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn cxx_operators_reach_us_and_throw_bad_alloc() {
    if !require("c++") {
        return;
    }
    let bin = c_program("cxx_ops");
    let o = run_ok(preloaded(&bin).env("PCPALLOC_STATS", "1"));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("cxx_ops ok"),
        "{}",
        text(&o)
    );
}

#[test]
fn sizes_take_binary_suffixes_and_rejections_give_the_rule() {
    let o = run_ok(
        preloaded("ls")
            .arg("/")
            .env("PCPALLOC_MEMORY_LIMIT", "64MiB")
            .env("PCPALLOC_STATS", "1"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("ignoring"), "{err}");
    assert!(
        err.lines().any(|l| l == "PCPALLOC_MEMORY_LIMIT 67108864"),
        "{err}"
    );
    let o = run_ok(preloaded("ls").arg("/").env("PCPALLOC_MEMORY_LIMIT", "1M"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ignoring PCPALLOC_MEMORY_LIMIT=1M (below the minimum of 4 MiB)"),
        "{err}"
    );
    let o = run_ok(preloaded("ls").arg("/").env("PCPALLOC_DECAY_MS", "70000"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("above the maximum of 60000 ms"), "{err}");
}

#[test]
fn stats_file_gets_the_report_per_process() {
    let dir = tempdir("statsfile");
    let pattern = dir.join("report.%p");
    // Two processes, two reports, each named by its process id.
    let o = run_ok(
        preloaded("sh")
            .args(["-c", "ls / >/dev/null; ls / >/dev/null"])
            .env("PCPALLOC_STATS_FILE", &pattern),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("allocated_bytes"),
        "report went to stderr: {err}"
    );
    let mut reports = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let pid = name.strip_prefix("report.").expect("named by the pattern");
        assert!(pid.parse::<u32>().is_ok(), "%p not replaced: {name}");
        let report = std::fs::read_to_string(&path).unwrap();
        assert!(
            report.starts_with(&format!(
                "# pcpalloc {} report: pid {pid}, program ",
                env!("CARGO_PKG_VERSION")
            )),
            "{report}"
        );
        assert!(report.contains("\npcpalloc_version "), "{report}");
        assert!(report.contains("\nPCPALLOC_STATS_FILE "), "{report}");
        assert!(report.contains("\nallocated_bytes "), "{report}");
        reports += 1;
    }
    assert!(
        reports >= 2,
        "one report per process expected, found {reports}"
    );
}

#[test]
fn stats_report_at_exit() {
    let child = preloaded("ls")
        .arg("/")
        .env("PCPALLOC_STATS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    // A two-line summary first: the process, then the figures.
    let mut lines = err.lines();
    let first = lines.next().unwrap_or("");
    assert!(
        first.starts_with(&format!(
            "# pcpalloc {} report: pid {pid}, program ",
            env!("CARGO_PKG_VERSION")
        )) && first.ends_with("ls"),
        "{first}"
    );
    let second = lines.next().unwrap_or("");
    let summary = regex::Regex::new(
        r"^# live [0-9.]+ (B|KiB|MiB), resident [0-9.]+ (B|KiB|MiB), mapped [0-9.]+ (B|KiB|MiB), peak [0-9.]+ (B|KiB|MiB); pageset hit rate ([0-9]+\.[0-9]%|-)$",
    )
    .unwrap();
    assert!(summary.is_match(second), "{second}");
    for name in [
        "nr_managed_pages ",
        "nr_free_pages ",
        "alloc_zone ",
        "free_high ",
        "zone_lock_contended ",
        "pcp_batch ",
        "pcp_allocs ",
    ] {
        assert!(
            err.lines().any(|l| l.starts_with(name)),
            "missing {name}: {err}"
        );
    }
    // Then `name value` lines only.
    assert!(
        err.lines()
            .skip(2)
            .all(|l| l.split(' ').count() == 2 && !l.starts_with('#')),
        "not name value lines: {err}"
    );
    // The version and the process, then every setting in force, then the
    // counters.
    let rest: Vec<&str> = err.lines().skip(2).take(3).collect();
    assert_eq!(
        rest[0],
        concat!("pcpalloc_version ", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(rest[1], format!("pid {pid}"));
    assert!(
        rest[2].starts_with("program /") && rest[2].ends_with("/ls"),
        "{}",
        rest[2]
    );
    for name in [
        "PCPALLOC_PCP cpu",
        "PCPALLOC_STATS 1",
        "PCPALLOC_HEURISTICS all",
    ] {
        assert!(err.lines().any(|l| l == name), "missing {name}: {err}");
    }
    for name in [
        "allocated_bytes",
        "active_bytes",
        "resident_bytes",
        "mapped_bytes",
        "charged_bytes",
        "peak_charged_bytes",
        "pcp_allocs",
    ] {
        let v: u64 = err
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("missing {name}: {err}"));
        assert!(v > 0, "{name} is 0: {err}");
    }
}

/// The report's `name value` lines after the summary, as a map.
fn report_lines(report: &str) -> std::collections::BTreeMap<String, String> {
    report
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (n, v) = l.split_once(' ')?;
            Some((n.to_string(), v.to_string()))
        })
        .collect()
}

#[test]
fn json_report_at_exit_is_one_object_per_process() {
    // Two processes (the ls and the cat sh runs), each one JSON object on
    // a line of its own.
    let o = run_ok(
        preloaded("sh")
            .args(["-c", "ls / >/dev/null; cat /dev/null"])
            .env("PCPALLOC_STATS", "json"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let objects: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(objects.len() >= 2, "{err}");
    let programs: Vec<&str> = objects
        .iter()
        .map(|j| j["program"].as_str().unwrap())
        .collect();
    assert!(programs.iter().any(|p| p.ends_with("ls")), "{programs:?}");
    assert!(programs.iter().any(|p| p.ends_with("cat")), "{programs:?}");
    let mut pids: Vec<u64> = objects.iter().map(|j| j["pid"].as_u64().unwrap()).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), objects.len(), "{pids:?}");
    // The same names as the text report's, with numbers.
    let text = run_ok(preloaded("ls").arg("/").env("PCPALLOC_STATS", "1"));
    let lines = report_lines(&String::from_utf8_lossy(&text.stderr));
    for j in &objects {
        assert_eq!(j["pcpalloc_version"], env!("CARGO_PKG_VERSION"));
        assert!(j["pid"].as_u64().unwrap() > 0);
        let summary = j["summary"].as_object().unwrap();
        for k in ["live_bytes", "resident_bytes", "mapped_bytes", "peak_bytes"] {
            assert!(summary[k].as_u64().unwrap() > 0, "{k}: {j}");
        }
        let hit = summary["pageset_hit_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&hit), "{hit}");
        let settings = j["settings"].as_object().unwrap();
        assert_eq!(settings["PCPALLOC_STATS"], "json");
        assert_eq!(settings["PCPALLOC_PCP"], "cpu");
        // How the pagesets are entered: words, beside the summary's numbers.
        assert_eq!(
            summary["pcp_entry"].as_str(),
            lines.get("pcp_entry").map(|s| s.as_str())
        );
        assert_eq!(
            summary["pcp_index"].as_str(),
            lines.get("pcp_index").map(|s| s.as_str())
        );
        assert_eq!(
            settings.len(),
            lines.keys().filter(|k| k.starts_with("PCPALLOC_")).count()
        );
        let counters = j["counters"].as_object().unwrap();
        assert_eq!(
            counters["allocated_bytes"].as_u64(),
            summary["live_bytes"].as_u64()
        );
        for (name, v) in counters {
            assert!(v.is_number(), "{name}: {v}");
            assert!(
                lines.contains_key(name) || name.starts_with("pageset"),
                "{name} is not in the text report"
            );
        }
        for name in lines.keys() {
            let counter = !name.starts_with("PCPALLOC_")
                && ![
                    "pcpalloc_version",
                    "pid",
                    "program",
                    "pcp_entry",
                    "pcp_index",
                ]
                .contains(&name.as_str())
                && !name.starts_with("pageset");
            if counter {
                assert!(counters.contains_key(name), "{name} missing from JSON");
            }
        }
    }
}

#[test]
fn pcpalloc_set_mallopt_and_thread_counters_from_c() {
    let dir = tempdir("runtime-set");
    let o = run_ok(
        preloaded(c_program("runtime_set"))
            .arg(env!("CARGO_PKG_VERSION"))
            .env("PCPALLOC_STATS_FILE", dir.join("report")),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    for step in [
        "version",
        "set",
        "memory limit",
        "mallopt",
        "thread stats",
        "stats json",
    ] {
        assert!(out.contains(&format!("ok {step}\n")), "{}", text(&o));
    }
    // PCPALLOC_STATS=json, set at run time, made the report at exit JSON,
    // with every setting changed at run time in it.
    let report = std::fs::read_to_string(dir.join("report")).unwrap();
    let j: serde_json::Value = serde_json::from_str(report.trim_end()).unwrap();
    let s = &j["settings"];
    assert_eq!(s["PCPALLOC_STATS"], "json");
    // Whole numbers are JSON numbers.
    assert_eq!(s["PCPALLOC_DECAY_MS"], 500);
    assert_eq!(s["PCPALLOC_BATCH_SCALE_MAX"], 2);
    assert_eq!(
        s["PCPALLOC_HEURISTICS"],
        "prev_free_high_order,free_high_batch"
    );
    assert_eq!(s["PCPALLOC_FREE_COUNT"], "exact");
    assert_eq!(s["PCPALLOC_FREE_HIGH_THRESHOLD"], "5batch");
    assert_eq!(s["PCPALLOC_MEMORY_LIMIT"], "none");
    assert_eq!(s["PCPALLOC_PCP"], "cpu");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `sh -c script` with and without the preload; outputs must match.
fn same_output(script: &str) {
    let plain = run_ok(Command::new("sh").args(["-c", script]));
    let ours = run_ok(preloaded("sh").args(["-c", script]));
    assert_eq!(plain.stdout, ours.stdout, "output differs for {script}");
}

#[test]
fn python_threads_allocation_heavy() {
    if !have("python3") {
        return;
    }
    let script = r#"
import threading, hashlib, json
def work(seed, out):
    d = {}
    acc = hashlib.sha256()
    for i in range(60000):
        k = (i * 7919 + seed) % 4000
        d[k] = [str(i) * (i % 13), {"x": i, "y": [seed] * (i % 7)}]
        if i % 3 == 0:
            d.pop((k * 31) % 4000, None)
        if i % 1000 == 0:
            acc.update(json.dumps(sorted(d.keys())[:50]).encode())
    out[seed] = (len(d), acc.hexdigest())
out = {}
ts = [threading.Thread(target=work, args=(s, out)) for s in range(6)]
for t in ts: t.start()
for t in ts: t.join()
for s in sorted(out): print(s, *out[s])
"#;
    let plain = run_ok(Command::new("python3").args(["-c", script]));
    let ours = run_ok(preloaded("python3").args(["-c", script]));
    assert_eq!(plain.stdout, ours.stdout);
    assert_eq!(String::from_utf8_lossy(&ours.stdout).lines().count(), 6);
}

#[test]
fn sort_generated_file() {
    let dir = tempdir("sort");
    let input = dir.join("in.txt");
    let mut s = String::new();
    let mut x: u64 = 88172645463325252;
    for _ in 0..300_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:x} {}\n", x % 1_000_000_007, x % 97));
    }
    std::fs::write(&input, s).unwrap();
    same_output(&format!("sort -k2,2n -k1,1 {}", input.display()));
    same_output(&format!("sort -u {} | wc -l", input.display()));
}

#[test]
fn gcc_compiles_identical_object() {
    if !have("gcc") {
        return;
    }
    let dir = tempdir("gcc");
    let src = dir.join("gen.c");
    let mut s = String::from("#include <string.h>\n#include <stdlib.h>\n");
    for i in 0..400 {
        s.push_str(&format!(
            "struct s{i} {{ int a[{n}]; double d; char *p; }};\n\
             int f{i}(struct s{i} *x, int k) {{ int t = 0; for (int j = 0; j < {n}; j++) t += x->a[j] * (k ^ j); \
             if (t % 3) x->p = malloc(t & 255); return t + (int)x->d; }}\n",
            n = 1 + i % 17
        ));
    }
    std::fs::write(&src, s).unwrap();
    let a = dir.join("plain.o");
    let b = dir.join("ours.o");
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&a),
    );
    run_ok(
        preloaded("gcc")
            .args(["-O2", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&b),
    );
    assert_eq!(
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        "object files differ"
    );
}

#[test]
fn shell_pipelines() {
    same_output("seq 1 200000 | awk '{ s += $1 * 2 } END { print s }'");
    same_output(
        "seq 1 50000 | sed 's/1/one/g' | tr 'a-z' 'A-Z' | sort | uniq -c | sort -rn | head -5",
    );
    same_output("for i in $(seq 1 200); do echo $i; done | xargs -n 7 echo | wc -c");
}
