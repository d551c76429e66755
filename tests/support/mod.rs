//! Helpers for tests that run programs under LD_PRELOAD=libpcpalloc.so.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Builds libpcpalloc.so (release) into its own target directory — cargo
/// holds the lock on the main one while tests run — and returns its path.
pub fn preload_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = target_dir().join("preload");
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "--quiet",
                "-p",
                "pcpalloc-preload",
                "--target-dir",
            ])
            .arg(&dir)
            .current_dir(root())
            .status()
            .expect("run cargo to build libpcpalloc.so");
        assert!(status.success(), "building libpcpalloc.so failed");
        let lib = dir.join("release").join("libpcpalloc.so");
        assert!(lib.exists(), "{} missing", lib.display());
        lib
    })
}

/// Compiles tests/c/<name>.c, or <name>.cpp with the C++ compiler (once
/// per test binary, even when several tests ask at once) and returns the
/// binary.
pub fn c_program(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let out_dir = target_dir().join("ctests");
    let bin = out_dir.join(name);
    let mut built = BUILT.lock().unwrap();
    if built.iter().any(|b| b == name) {
        return bin;
    }
    std::fs::create_dir_all(&out_dir).unwrap();
    let c = root().join("tests/c").join(format!("{name}.c"));
    let (src, compiler) = if c.exists() {
        (c, "cc")
    } else {
        (root().join("tests/c").join(format!("{name}.cpp")), "c++")
    };
    let tmp = out_dir.join(format!("{name}.tmp{}", std::process::id()));
    let status = Command::new(compiler)
        .args(["-O2", "-g", "-pthread", "-Wall", "-Wno-unused-result", "-o"])
        .arg(&tmp)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(status.success(), "compiling {name}.c failed");
    std::fs::rename(&tmp, &bin).unwrap();
    built.push(name.to_string());
    bin
}

/// A command with libpcpalloc.so preloaded.
pub fn preloaded(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env("LD_PRELOAD", preload_lib());
    c
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs and asserts success; returns the output.
pub fn run_ok(c: &mut Command) -> Output {
    let o = c.output().expect("spawn");
    assert!(o.status.success(), "command failed: {c:?}\n{}", text(&o));
    o
}

pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `program` is available; when it is not, the test is skipped —
/// unless PCPTEST_REQUIRE_PROGRAMS=1 (set by .ci/run, which installs
/// them), in which case missing it is a failure.
pub fn require(program: &str) -> bool {
    if have(program) {
        return true;
    }
    if std::env::var("PCPTEST_REQUIRE_PROGRAMS").as_deref() == Ok("1") {
        panic!("{program} is required (PCPTEST_REQUIRE_PROGRAMS=1) but not installed");
    }
    skip(&format!("{program} is not installed"));
    false
}

/// Says that the running test skips its work, and why. Written straight to
/// the process's stderr, past the test harness's capture, so the skip shows
/// in the CI log even though the test passes.
pub fn skip(why: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {}: {why}",
        std::thread::current().name().unwrap_or("a test")
    );
}

/// A fresh temporary directory for one test.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pcpalloc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
