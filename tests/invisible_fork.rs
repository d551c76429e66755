//! Issue 42, "invisible as a drop-in": fork with other libraries' fork
//! handlers, and C++ operators that a program replaced.
//!
//! - A: a library the program links, whose constructor registers fork
//!   handlers that allocate (tests/c/inv_fork_lib.c): forks single- and
//!   multi-threaded. (Before: the first fork hung — its prepare handler ran
//!   after ours had taken every allocator lock.)
//! - B: a library whose prepare handler takes its own lock, under which
//!   other threads allocate (tests/c/inv_fork_lock_lib.c): 200 forks.
//!   (Before: deadlock, the other thread waiting in malloc for the forking
//!   one, which waited for the library's lock.)
//! - The same handlers registered where no preloaded library sees it, and
//!   in a Rust program (this one, on pcpalloc) by a constructor that comes
//!   before the allocator's: the forking thread's own allocations go
//!   through the locks it holds for the fork.
//! - C: C++ programs that replace only `operator new`/`operator delete`
//!   (or their aligned pair) with a header before each block: sized,
//!   array and nothrow variants reach the replacement, as libstdc++'s do.
//!
//! Programs run on glibc too, as the reference, each with a time limit: a
//! hang fails.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use pcpalloc::PcpAlloc;
use support::*;

/// This binary runs on pcpalloc: its Rust case forks a Rust program.
#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc;

/// Builds tests/c/`lib`.c (or .cpp, with the C++ compiler) as
/// lib`tag`.so and tests/c/`prog`.c (or .cpp) linked against it
/// (`-Wl,-rpath`), both with `defines`, once per test binary; returns the
/// program.
fn program_with_library(prog: &str, lib: &str, tag: &str, defines: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let dir = target_dir().join("ctests").join(format!("inv-{tag}"));
    let bin = dir.join(prog);
    let mut built = BUILT.lock().unwrap();
    if built.iter().any(|b| b == tag) {
        return bin;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let source = |name: &str| {
        let c = root().join("tests/c").join(format!("{name}.c"));
        if c.exists() {
            (c, "cc")
        } else {
            (root().join("tests/c").join(format!("{name}.cpp")), "c++")
        }
    };
    let compile = |args: &mut Command, what: &str| {
        let status = args
            .status()
            .unwrap_or_else(|e| panic!("run {args:?}: {e}"));
        assert!(status.success(), "compiling {what} failed");
    };
    let (lib_src, lib_cc) = source(lib);
    compile(
        Command::new(lib_cc)
            .args(["-O2", "-g", "-shared", "-fPIC", "-pthread", "-Wall"])
            .args(defines)
            .arg("-o")
            .arg(dir.join(format!("lib{tag}.so")))
            .arg(lib_src)
            .arg("-ldl"),
        lib,
    );
    let (prog_src, prog_cc) = source(prog);
    let tmp = dir.join(format!("{prog}.tmp{}", std::process::id()));
    compile(
        Command::new(prog_cc)
            .args(["-O2", "-g", "-pthread", "-Wall", "-Wno-unused-result"])
            .args(defines)
            .arg("-o")
            .arg(&tmp)
            .arg(prog_src)
            .arg("-L")
            .arg(&dir)
            .arg(format!("-l{tag}"))
            .arg(format!("-Wl,-rpath,{}", dir.display())),
        prog,
    );
    std::fs::rename(&tmp, &bin).unwrap();
    built.push(tag.to_string());
    bin
}

fn glibc(bin: &PathBuf, args: &[&str]) -> Run {
    let mut c = Command::new(bin);
    c.args(args).env_remove("LD_PRELOAD");
    run_for(&mut c, QUICK)
}

fn pcpalloc(bin: &PathBuf, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = preloaded(bin);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_for(&mut c, QUICK)
}

/// A, single-threaded: 100 forks, the library's handlers allocating in
/// prepare, parent and child (and a block kept from prepare to either
/// side), in both pageset modes.
#[test]
fn fork_with_a_librarys_allocating_handlers() {
    let bin = program_with_library("inv_fork_handlers", "inv_fork_lib", "invfork", &[]);
    let ok = "inv_fork_handlers ok (100 forks, 0 threads)";
    glibc(&bin, &["0", "100"]).assert_says(ok);
    pcpalloc(&bin, &["0", "100"], &[]).assert_says(ok);
    pcpalloc(&bin, &["0", "100"], &[("PCPALLOC_PCP", "thread")]).assert_says(ok);
}

/// A, multi-threaded: 100 forks while 4 threads allocate (small, large
/// and huge blocks).
#[test]
fn fork_with_a_librarys_allocating_handlers_and_busy_threads() {
    let bin = program_with_library("inv_fork_handlers", "inv_fork_lib", "invfork", &[]);
    let ok = "inv_fork_handlers ok (100 forks, 4 threads)";
    glibc(&bin, &["4", "100"]).assert_says(ok);
    pcpalloc(&bin, &["4", "100"], &[]).assert_says(ok);
    pcpalloc(&bin, &["4", "100"], &[("PCPALLOC_PCP", "thread")]).assert_says(ok);
}

/// B: 200 forks while 3 threads allocate (16 bytes to 4 MiB) under a
/// library's lock that its prepare handler takes.
#[test]
fn fork_with_a_librarys_lock_held_across_fork() {
    let bin = program_with_library("inv_fork_lock", "inv_fork_lock_lib", "invforklock", &[]);
    let ok = "inv_fork_lock ok (200 forks, 3 threads)";
    glibc(&bin, &["3", "200"]).assert_says(ok);
    pcpalloc(&bin, &["3", "200"], &[]).assert_says(ok);
}

/// A's library registering its handlers through libc's own
/// `pthread_atfork@GLIBC_2.2.5`, which no preloaded library sees (an old
/// binary's way): ours come after, so its prepare handler allocates while
/// the forking thread holds every allocator lock, single- and
/// multi-threaded, in both pageset modes, and with the tick run inline
/// (no background thread) every 10 ms.
#[test]
fn fork_with_allocating_handlers_registered_before_ours() {
    let bin = program_with_library(
        "inv_fork_handlers",
        "inv_fork_lib",
        "invforkunseen",
        &["-DINV_FORK_UNSEEN"],
    );
    let r = glibc(&bin, &["0", "20"]);
    if r.out.status.code() == Some(77) {
        return skip("this libc has no pthread_atfork@GLIBC_2.2.5");
    }
    r.assert_says("inv_fork_handlers ok (20 forks, 0 threads)");
    for threads in ["0", "4"] {
        let ok = format!("inv_fork_handlers ok (100 forks, {threads} threads)");
        for env in [
            &[][..],
            &[("PCPALLOC_PCP", "thread")],
            &[("PCPALLOC_BACKGROUND", "0"), ("PCPALLOC_DECAY_MS", "10")],
        ] {
            pcpalloc(&bin, &[threads, "100"], env).assert_says(&ok);
        }
    }
}

// The Rust case: a constructor of this program that runs before the
// allocator's (a prioritised `.init_array` entry comes before the plain
// ones, the allocator's among them) registers fork handlers that allocate
// through the global allocator — only in the process the test starts, which
// sets INV_FORK_RUST.

const RUST_CASE_ENV: &str = "PCPTEST_INV_FORK_RUST";
static HANDLER_RUNS: AtomicUsize = AtomicUsize::new(0);

fn allocate_in_handler() {
    let v: Vec<u64> = (0..500).collect();
    let big = vec![7u8; 300_000].into_boxed_slice();
    let s = format!("{}-{}", v.iter().sum::<u64>(), big.len());
    assert_eq!(s, "124750-300000");
    HANDLER_RUNS.fetch_add(1, Relaxed);
}

extern "C" fn rust_prepare() {
    allocate_in_handler();
}

extern "C" fn rust_after() {
    allocate_in_handler();
}

extern "C" fn register_rust_handlers() {
    // SAFETY: getenv and pthread_atfork before main, single-threaded.
    unsafe {
        let name = c"PCPTEST_INV_FORK_RUST";
        if !libc::getenv(name.as_ptr()).is_null() {
            libc::pthread_atfork(Some(rust_prepare), Some(rust_after), Some(rust_after));
        }
    }
}

#[used]
#[link_section = ".init_array.00100"]
static REGISTER_RUST_HANDLERS: extern "C" fn() = register_rust_handlers;

/// The forks of the Rust case, in the process that registered the
/// handlers: 50 forks while 3 threads allocate; each child allocates and
/// exits.
fn rust_case() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut keep: Vec<Vec<u8>> = Vec::new();
                let mut x = t + 1;
                while !stop.load(Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    let n = if x >> 60 == 0 {
                        (x >> 20) % 400_000
                    } else {
                        (x >> 20) % 900
                    };
                    keep.push(vec![1; n as usize + 1]);
                    if keep.len() > 64 {
                        keep.swap_remove((x >> 8) as usize % 64);
                    }
                }
            })
        })
        .collect();
    for f in 0..50 {
        std::thread::sleep(std::time::Duration::from_micros(300));
        let before = HANDLER_RUNS.load(Relaxed);
        // SAFETY: the child only allocates, frees and calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let v = vec![3u8; 50_000];
            let code = if HANDLER_RUNS.load(Relaxed) == before + 2 && v[49_999] == 3 {
                0
            } else {
                3
            };
            drop(v);
            // SAFETY: leaving the child without running anything else.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "fork {f}: child status {status:#x}"
        );
        assert_eq!(HANDLER_RUNS.load(Relaxed), before + 2, "fork {f}");
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    println!("rust fork case ok");
}

/// A Rust program on pcpalloc whose own fork handlers, registered before
/// the allocator's, allocate: 50 forks with 3 threads allocating.
#[test]
fn rust_program_with_allocating_handlers_registered_before_ours() {
    if std::env::var_os(RUST_CASE_ENV).is_some() {
        return rust_case();
    }
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "rust_program_with_allocating_handlers_registered_before_ours",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(RUST_CASE_ENV, "1")
    .env_remove("LD_PRELOAD");
    run_for(&mut c, QUICK).assert_says("rust fork case ok");
}

/// C (1): a program that replaces only `operator new(size_t)` and
/// `operator delete(void*)`, a header before each block: vector, string,
/// map, unordered_map, shared_ptr, new[]/delete[], nothrow new, explicit
/// sized delete all run clean, and the replacement's delete sees every
/// block its new handed out (> 1000). The same linked against a library
/// whose static constructor uses containers before libpcpalloc.so's
/// constructor has run. With `PCPALLOC_STATS=1`, pcpalloc's counters see
/// no `new` and no sized delete (every form went to the replacement). (Before: abort in the first
/// container, "free(): invalid pointer" — our sized delete freed the
/// replacement's block.)
#[test]
fn cxx_program_replacing_new_and_delete() {
    let bin = c_program("inv_cxx_replace");
    let ok = "inv_cxx_replace ok";
    glibc(&bin, &[]).assert_says(ok);
    let r = pcpalloc(&bin, &[], &[("PCPALLOC_STATS", "1")]);
    r.assert_says(ok);
    for counter in ["cxx_new 0", "cxx_delete_sized 0"] {
        assert!(
            r.stderr().lines().any(|l| l.trim() == counter),
            "expected {counter}: the replaced operators' blocks reached pcpalloc\n{}",
            r.describe()
        );
    }
    let early = program_with_library(
        "inv_cxx_replace",
        "inv_cxx_early_lib",
        "invcxxearly",
        &["-DINV_CXX_EARLY"],
    );
    glibc(&early, &[]).assert_says(ok);
    pcpalloc(&early, &[], &[]).assert_says(ok);
}

/// C (2): a program that replaces only the aligned pair, `operator
/// new(size_t, align_val_t)` and `operator delete(void*, align_val_t)`:
/// containers of 64- and 256-byte-aligned types, shared_ptr, unique_ptr,
/// aligned new[]/delete[], nothrow and sized aligned forms run clean, and
/// the replacement sees every block. (Before: abort, "free(): invalid
/// pointer".)
#[test]
fn cxx_program_replacing_aligned_new_and_delete() {
    let bin = c_program("inv_cxx_aligned");
    glibc(&bin, &[]).assert_says("inv_cxx_aligned ok");
    pcpalloc(&bin, &[], &[]).assert_says("inv_cxx_aligned ok");
}
