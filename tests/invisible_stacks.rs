//! Issue 42, "invisible as a drop-in", items 4-6: the malloc family runs
//! on any stack glibc's runs on, mallinfo costs what glibc's does, and a
//! small program's memory is a small program's — so mlockall works as
//! under glibc. Each case a C program (tests/c/inv_stack_*,
//! tests/c/inv_mlock_*) under LD_PRELOAD=libpcpalloc.so, and on glibc as
//! the reference; every run has a time limit.
//!
//! The stack programs run with LD_BIND_NOW=1: a program's first call of a
//! function through its PLT runs the dynamic linker's resolver, which
//! saves the vector registers on the stack (2.7 KiB with AVX-512) — the
//! program's cost, on glibc as on pcpalloc, not the allocator's
//! (libpcpalloc.so itself is linked with BIND_NOW).

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use support::*;

/// `STACK <context> <call> <bytes>` lines: bytes by (context, call).
fn stack_figures(out: &str) -> BTreeMap<(String, String), u64> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "STACK").then_some(())?;
            let (ctx, call, bytes) = (w.next()?, w.next()?, w.next()?.parse().ok()?);
            Some(((ctx.to_string(), call.to_string()), bytes))
        })
        .collect()
}

/// The calls `inv_stack_calls` makes under the library in force (pcpalloc's
/// own API only when it is there).
fn calls(pcpalloc: bool) -> Vec<String> {
    let mut c = if pcpalloc {
        preloaded(c_program("inv_stack_calls"))
    } else {
        let mut c = Command::new(c_program("inv_stack_calls"));
        c.env_remove("LD_PRELOAD");
        c
    };
    let o = run_ok(c.arg("list"));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn stack_run(mode: &[&str], pcpalloc: bool) -> Run {
    let env = [("LD_BIND_NOW", "1")];
    if pcpalloc {
        on_pcpalloc("inv_stack_calls", mode, &env, QUICK)
    } else {
        let mut c = Command::new(c_program("inv_stack_calls"));
        c.args(mode)
            .env_remove("LD_PRELOAD")
            .env("LD_BIND_NOW", "1");
        run_for(&mut c, QUICK)
    }
}

/// Prints the figures of `contexts` side by side, glibc's and pcpalloc's,
/// and returns the calls of `want` missing from pcpalloc's run.
fn table(
    title: &str,
    contexts: &[&str],
    want: &[String],
    glibc: &BTreeMap<(String, String), u64>,
    ours: &BTreeMap<(String, String), u64>,
) -> Vec<String> {
    let mut missing = Vec::new();
    eprintln!("{title}: stack bytes a call used (glibc / pcpalloc)");
    for call in want {
        let mut row = format!("  {call:<24}");
        for ctx in contexts {
            let key = (ctx.to_string(), call.clone());
            let g = glibc.get(&key).map_or("-".to_string(), |v| v.to_string());
            match ours.get(&key) {
                Some(v) => row += &format!(" {ctx}: {g:>5} / {v:>5}"),
                None => {
                    row += &format!(" {ctx}: {g:>5} / MISSING");
                    missing.push(format!("{ctx} {call}"));
                }
            }
        }
        eprintln!("{row}");
    }
    missing
}

/// Item 4: every call of the malloc family and of pcpalloc's C API on a
/// thread whose stack is PTHREAD_STACK_MIN (16 KiB, with glibc's thread
/// descriptor and TLS at its top, an inaccessible page below), with a heap
/// of some 75 MiB over four threads' blocks and three huge blocks: first
/// on a thread that has allocated, then each call as a fresh thread's
/// first (its heap attach). (Before: SIGSEGV in mallinfo — the statistics
/// snapshot took 37 KiB of stack, malloc_info 53 KiB.)
#[test]
fn every_call_fits_a_16k_thread_stack() {
    every_call_fits("thread", "16 KiB thread", &["thread16k", "thread16k-first"]);
}

/// Runs inv_stack_calls `mode` on glibc and on pcpalloc and asserts that
/// pcpalloc made every call in each of `places` (the table printed is
/// titled `title`).
fn every_call_fits(mode: &str, title: &str, places: &[&str]) {
    let glibc = stack_run(&[mode], false);
    glibc.assert_says("inv_stack_calls ok");
    let ours = stack_run(&[mode], true);
    ours.assert_says("inv_stack_calls ok");
    let missing = table(
        title,
        places,
        &calls(true),
        &stack_figures(&glibc.stdout()),
        &stack_figures(&ours.stdout()),
    );
    assert!(
        missing.is_empty(),
        "calls not made: {missing:?}\n{}",
        ours.describe()
    );
}

/// Item 4: every call from a signal handler (SA_ONSTACK) on an 8 KiB
/// alternate stack (an inaccessible page below it), same heap: the signal
/// raised by the main thread, which has allocated, and then, for each
/// call, by a fresh thread that has not, whose handler makes that call
/// its first. glibc's own malloc_info needs 6.3 KiB of stack and does not
/// fit past the signal frame of an AVX-512 machine (3.3 KiB): its run
/// skips it. (Before: SIGSEGV in mallinfo.)
#[test]
fn every_call_fits_an_8k_signal_stack() {
    every_call_fits(
        "signal",
        "8 KiB alternate signal stack",
        &["altstack8k", "altstack8k-first"],
    );
}

/// Item 4: the process's first call, from a signal handler on an 8 KiB
/// alternate stack before anything allocated — the allocator starts up
/// there (reads its settings, the CPUs, the cgroup's limit, maps its
/// first memory, makes the first heap) — for each call of the list, then
/// every call. (Before: 29 KiB of stack for the start-up: SIGSEGV.)
#[test]
fn the_process_first_call_fits_an_8k_signal_stack() {
    let want = calls(true);
    let on_glibc_too = calls(false);
    let mut glibc = BTreeMap::new();
    let mut ours = BTreeMap::new();
    let mut failures = Vec::new();
    for call in &want {
        if on_glibc_too.contains(call) {
            let r = stack_run(&["first", call], false);
            r.assert_says("inv_stack_calls ok");
            glibc.extend(stack_figures(&r.stdout()));
        }
        let r = stack_run(&["first", call], true);
        if r.timed_out || !r.out.status.success() || !r.stdout().contains("inv_stack_calls ok") {
            failures.push(r.describe());
        }
        ours.extend(stack_figures(&r.stdout()));
    }
    let missing = table(
        "process's first call, 8 KiB alternate signal stack",
        &["process-first"],
        &want,
        &glibc,
        &ours,
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(missing.is_empty(), "calls not made: {missing:?}");
}

/// A `KEY value` field of a line that starts with `tag`.
fn field(out: &str, tag: &str, key: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.starts_with(&format!("{tag} ")))?;
    let mut w = line.split_whitespace();
    while let Some(k) = w.next() {
        if k == key {
            return w.next()?.parse().ok();
        }
    }
    None
}

/// Item 5: mallinfo2 and mallinfo with a heap of 100 MB (60 MB of written
/// blocks of 16 B - 128 KiB, four huge blocks of 10 MB) read counters
/// only: over 1000 calls of each, no open (of /proc/self/smaps), no
/// mincore (the program defines both, so libpcpalloc.so's calls bind to
/// its counting ones), and no more read system calls (/proc/self/io's
/// syscr) than the program's own two reads of that file. The cost per
/// call is printed, not asserted (machines are noisy). (Before: 1 open,
/// 33 mincore and 15 reads per call, 1 ms each; glibc 0.06 µs.)
#[test]
fn mallinfo_reads_counters_only() {
    let glibc = on_glibc("inv_stack_mallinfo", &[]);
    glibc.assert_says("inv_stack_mallinfo ok");
    let r = on_pcpalloc("inv_stack_mallinfo", &[], &[], LONG);
    r.assert_says("inv_stack_mallinfo ok");
    let (g, o) = (glibc.stdout(), r.stdout());
    let heap = field(&o, "HEAP", "bytes").unwrap_or(0.0);
    assert!(heap >= 90e6, "the heap is not 100 MB: {}", r.describe());
    for tag in ["MALLINFO2", "MALLINFO"] {
        let ns = |out: &str| field(out, tag, "ns_per_call").unwrap_or(f64::NAN);
        eprintln!(
            "{tag}: {:.2} us per call on glibc, {:.2} us on pcpalloc ({heap:.0} bytes in use)",
            ns(&g) / 1e3,
            ns(&o) / 1e3
        );
        let opens = field(&o, tag, "opens");
        let mincores = field(&o, tag, "mincores");
        let syscr = field(&o, tag, "syscr");
        assert_eq!(opens, Some(0.0), "{tag} opened files: {}", r.describe());
        assert_eq!(
            mincores,
            Some(0.0),
            "{tag} called mincore: {}",
            r.describe()
        );
        let syscr = syscr.expect("syscr printed");
        if syscr < 0.0 {
            skip("/proc/self/io is not readable: read system calls not counted");
        } else {
            assert!(syscr <= 3.0, "{tag} read files: {}", r.describe());
        }
    }
}

/// The `TAG vmsize <k> vmrss <k> vmlck <k>` figures of `inv_mlock_small`,
/// in KiB.
fn vm(out: &str, tag: &str) -> Option<(f64, f64, f64)> {
    Some((
        field(out, tag, "vmsize")?,
        field(out, tag, "vmrss")?,
        field(out, tag, "vmlck")?,
    ))
}

fn mlock_table(what: &str, runs: &[(&str, &Run)]) {
    eprintln!("{what}: VmSize / VmRSS / VmLck in KiB");
    for (name, r) in runs {
        let out = r.stdout();
        let mut row = format!("  {name:<8}");
        for tag in ["START", "SMALL", "LOCKED", "MIB"] {
            match vm(&out, tag) {
                Some((s, r, l)) => row += &format!(" {tag} {s:.0}/{r:.0}/{l:.0}"),
                None => row += &format!(" {tag} -"),
            }
        }
        let ml = out
            .lines()
            .find(|l| l.starts_with("MLOCKALL"))
            .unwrap_or("MLOCKALL -");
        let failed = out
            .lines()
            .find_map(|l| l.strip_prefix("MIB_FAILED "))
            .unwrap_or("-");
        row += &format!("; {ml}; mallocs failed after it: {failed}");
        eprintln!("{row}");
    }
}

/// Item 6: a small program (a few small blocks and one of 20 KiB) under
/// pcpalloc takes address space and memory within a few MiB of glibc's —
/// its VmSize and VmRSS after the first mallocs at most 8 MiB over
/// glibc's — and `mlockall(MCL_CURRENT | MCL_FUTURE)` locks no more than
/// that: VmRSS once locked at most 8 MiB over glibc's; as root (no
/// locked-memory limit) 4 MiB of mallocs and frees after it all succeed;
/// as another user mlockall succeeds if it does on glibc. (Before: 298 MiB of VmSize — a 256
/// MiB section reserved whole, a 32 MiB chunk map in .bss — and 44 MiB
/// of VmRSS once locked, the chunk map faulted in; glibc 2.4 MiB.)
#[test]
fn a_small_program_stays_small_and_locks_little() {
    let glibc = on_glibc("inv_mlock_small", &[]);
    glibc.assert_says("inv_mlock_small ok");
    let ours = on_pcpalloc("inv_mlock_small", &[], &[], QUICK);
    ours.assert_says("inv_mlock_small ok");
    mlock_table("small program", &[("glibc", &glibc), ("pcpalloc", &ours)]);
    let (g, o) = (glibc.stdout(), ours.stdout());
    let mib = 1024.0;
    for tag in ["SMALL", "LOCKED"] {
        let (gs, gr, _) = vm(&g, tag).expect("glibc's figures");
        let (os, or, _) = vm(&o, tag).unwrap_or_else(|| panic!("no {tag}: {}", ours.describe()));
        assert!(
            os <= gs + 8.0 * mib,
            "{tag}: VmSize {os} KiB against glibc's {gs}: {}",
            ours.describe()
        );
        assert!(
            or <= gr + 8.0 * mib,
            "{tag}: VmRSS {or} KiB against glibc's {gr}: {}",
            ours.describe()
        );
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        // No locked-memory limit: everything succeeds.
        assert!(o.contains("MLOCKALL ok"), "{}", ours.describe());
        assert!(o.contains("MIB_FAILED 0\n"), "{}", ours.describe());
    } else if g.contains("MLOCKALL ok") {
        assert!(
            o.contains("MLOCKALL ok"),
            "mlockall fails where it works on glibc: {}",
            ours.describe()
        );
    }
}

/// Copies `from` into `dir` (readable and executable by everyone) and
/// returns the copy.
fn copy_for_all(from: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let to = dir.join(from.file_name().unwrap());
    std::fs::copy(from, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

/// Item 6: `mlockall(MCL_CURRENT | MCL_FUTURE)` by an unprivileged user
/// with the default 8 MiB RLIMIT_MEMLOCK succeeds under pcpalloc as under
/// glibc — for MCL_CURRENT the kernel weighs every mapping of the process
/// (inaccessible reservations too) against the limit. Running as root,
/// the program forks, sets the limit, drops to nobody (65534) and execs
/// itself; otherwise skipped. The mallocs after it are reported, not
/// asserted: under MCL_FUTURE each new mapping counts against the limit,
/// and the zone grows in 4 MiB blocks where glibc's heap grows by 132 KiB.
/// (Before: ENOMEM, 298 MiB of VmSize.)
#[test]
fn mlockall_as_an_unprivileged_user_with_the_default_limit() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        skip("not root: cannot run the program as another user");
        return;
    }
    let dir = tempdir("inv-mlock");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = copy_for_all(&c_program("inv_mlock_small"), &dir);
    let lib = copy_for_all(preload_lib(), &dir);
    let args = ["exec-as", "65534", "65534", "8388608"];
    let mut g = Command::new(&prog);
    g.args(args).env_remove("LD_PRELOAD");
    let glibc = run_for(&mut g, QUICK);
    let mut o = Command::new(&prog);
    o.args(args).env("LD_PRELOAD", &lib);
    let ours = run_for(&mut o, QUICK);
    let _ = std::fs::remove_dir_all(&dir);
    if glibc.out.status.code() == Some(3) {
        skip("cannot drop privileges here");
        return;
    }
    glibc.assert_says("inv_mlock_small ok");
    ours.assert_says("inv_mlock_small ok");
    mlock_table(
        "unprivileged, RLIMIT_MEMLOCK 8 MiB",
        &[("glibc", &glibc), ("pcpalloc", &ours)],
    );
    assert!(
        glibc.stdout().contains("MLOCKALL ok"),
        "mlockall fails on glibc: {}",
        glibc.describe()
    );
    assert!(
        ours.stdout().contains("MLOCKALL ok"),
        "mlockall fails under pcpalloc: {}",
        ours.describe()
    );
}
