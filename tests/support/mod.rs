//! Helpers for tests that run programs under LD_PRELOAD=libpcpalloc.so.
#![allow(dead_code)]

pub mod zone;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The target directory: `$CARGO_TARGET_DIR` when set, else the
/// workspace's `target/`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Whether libpcpalloc.so can be had: the workspace's preload crate is
/// here (not so in the packaged crate, `cargo package`), or PCPTEST_LIB
/// names a library. A test that needs it and finds none says so
/// ([`skip`]) and passes.
pub fn have_preload_lib() -> bool {
    std::env::var_os("PCPTEST_LIB").is_some_and(|v| !v.is_empty())
        || root().join("cdylib/Cargo.toml").exists()
}

/// Builds libpcpalloc.so (release) into its own target directory — cargo
/// holds the lock on the main one while tests run — and returns its path.
/// With PCPTEST_LIB=/path/to/libpcpalloc.so set, uses that library
/// instead and builds nothing (e.g. to run the tests against an older
/// build).
pub fn preload_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(lib) = std::env::var_os("PCPTEST_LIB").filter(|v| !v.is_empty()) {
            let lib = PathBuf::from(lib);
            assert!(lib.exists(), "PCPTEST_LIB={} does not exist", lib.display());
            return std::fs::canonicalize(&lib).unwrap_or(lib);
        }
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

/// Whether the kernel gives huge pages to a range that asks for them
/// (without, advice changes nothing and the huge-page cases are moot);
/// says so with [`skip`] when it does not.
pub fn thp_available() -> bool {
    match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        Ok(s) if !s.contains("[never]") => true,
        _ => {
            skip("transparent huge pages are off or missing in this kernel");
            false
        }
    }
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

// Runs with a time limit, for the tests of issues 16 and 17.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A finished (or killed) run of a test program.
pub struct Run {
    pub out: std::process::Output,
    pub timed_out: bool,
    pub secs: f64,
    pub what: String,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    /// What happened, for a failure message: hang, signal or exit status,
    /// then the output.
    pub fn describe(&self) -> String {
        let how = if self.timed_out {
            format!("HANG: killed after {:.0} s", self.secs)
        } else if let Some(sig) = self.out.status.signal() {
            let name = match sig {
                libc::SIGSEGV => "SIGSEGV".to_string(),
                libc::SIGABRT => "SIGABRT".to_string(),
                libc::SIGBUS => "SIGBUS".to_string(),
                libc::SIGKILL => "SIGKILL".to_string(),
                s => format!("signal {s}"),
            };
            format!("killed by {name} after {:.1} s", self.secs)
        } else {
            format!("exit {:?} after {:.1} s", self.out.status.code(), self.secs)
        };
        format!("{}: {how}\n{}", self.what, text(&self.out))
    }
    /// Asserts a normal exit with status 0 within the time limit.
    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        assert!(
            !self.timed_out && self.out.status.success(),
            "{}",
            self.describe()
        );
        self
    }
    /// Asserts success and that stdout holds `needle`.
    #[track_caller]
    pub fn assert_says(&self, needle: &str) -> &Self {
        self.assert_ok();
        assert!(self.stdout().contains(needle), "{}", self.describe());
        self
    }
}

/// Runs `cmd` (its own process group, stdin closed, output captured) for
/// at most `limit`; past it the whole group is killed with SIGKILL and the
/// run counts as a hang.
pub fn run_for(cmd: &mut Command, limit: Duration) -> Run {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let what = format!("{cmd:?}");
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let pid = child.id() as i32;
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ro = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let re = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            timed_out = true;
            // SAFETY: kill(2) on the process group this function created.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // Children of the program may still hold the pipes: kill the group.
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let secs = start.elapsed().as_secs_f64();
    Run {
        out: std::process::Output {
            status,
            stdout: ro.join().unwrap(),
            stderr: re.join().unwrap(),
        },
        timed_out,
        secs,
        what,
    }
}

/// The time limit of a program that takes well under a second on glibc.
pub const QUICK: Duration = Duration::from_secs(30);
/// The time limit of a program that runs for seconds by design.
pub const LONG: Duration = Duration::from_secs(60);

/// The program on glibc (no LD_PRELOAD), as the reference.
pub fn on_glibc(name: &str, args: &[&str]) -> Run {
    let mut c = Command::new(c_program(name));
    c.args(args).env_remove("LD_PRELOAD");
    run_for(&mut c, QUICK)
}

/// The samples a heap profile's summary line at exit counts
/// (`pcpalloc: heap profile: N samples; ...` on stderr).
pub fn profile_samples(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("pcpalloc: heap profile: "))
        .unwrap_or_else(|| panic!("no heap profile summary:\n{stderr}"));
    line["pcpalloc: heap profile: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

/// The program under LD_PRELOAD=libpcpalloc.so with `env` set.
pub fn on_pcpalloc(name: &str, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    let mut c = preloaded(c_program(name));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_for(&mut c, limit)
}
