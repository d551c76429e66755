//! What a run was made of and on: the commit, the machine, the time — the
//! name of the run's folder and its machine.txt.

use std::ffi::CStr;
use std::process::Command;

/// The run's commit and machine.
pub struct Machine {
    /// UTC, as 2026-12-04T21:30:05Z.
    pub utc: String,
    /// The same, for a folder name: 20261204T213005Z.
    pub utc_compact: String,
    /// Short hash of HEAD ("unknown" outside git).
    pub commit: String,
    /// Whether tracked files differ from HEAD.
    pub dirty: bool,
    pub cpu_model: String,
    /// CPUs online, and those this process may run on.
    pub cpus_online: usize,
    pub cpus_usable: usize,
    pub mem_gib: f64,
    /// uname's release and version.
    pub kernel: String,
    pub glibc: String,
    pub thp: String,
    pub load: String,
}

impl Machine {
    pub fn read() -> Machine {
        let (utc, utc_compact) = now_utc();
        let ws = pcpalloc_bench::preload::workspace();
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(&ws)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("?")
            .trim()
            .to_string();
        // SAFETY: sysconf has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib = mem
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        // SAFETY: utsname is plain data; all zeroes is a valid value.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: u is a valid out-parameter; the fields come back
        // NUL-terminated.
        let kernel = unsafe {
            libc::uname(&mut u);
            format!(
                "{} {} {}",
                CStr::from_ptr(u.sysname.as_ptr()).to_string_lossy(),
                CStr::from_ptr(u.release.as_ptr()).to_string_lossy(),
                CStr::from_ptr(u.version.as_ptr()).to_string_lossy()
            )
        };
        // SAFETY: glibc returns a static NUL-terminated string.
        let glibc = unsafe { CStr::from_ptr(libc::gnu_get_libc_version()) }
            .to_string_lossy()
            .into_owned();
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_else(|_| "missing".into())
            .trim()
            .to_string();
        Machine {
            utc,
            utc_compact,
            commit,
            dirty,
            cpu_model,
            cpus_online: online,
            cpus_usable: crate::sections::cpus(),
            mem_gib: mem_kib as f64 / (1 << 20) as f64,
            kernel,
            glibc,
            thp,
            load: load_average(),
        }
    }

    /// The run's folder name: `<UTC date-time>-<short commit>`.
    pub fn run_name(&self) -> String {
        format!("{}-{}", self.utc_compact, self.commit)
    }

    /// machine.txt: one `key: value` a line.
    pub fn text(&self) -> String {
        format!(
            "started: {}\ncommit: {}{}\ncpu: {}\ncpus: {} online, {} usable by the benchmark\n\
             memory: {:.1} GiB\nkernel: {}\nglibc: {}\ntransparent huge pages: {}\n\
             load average at the start (1, 5, 15 min): {}\n",
            self.utc,
            self.commit,
            if self.dirty {
                " (with uncommitted changes)"
            } else {
                ""
            },
            self.cpu_model,
            self.cpus_online,
            self.cpus_usable,
            self.mem_gib,
            self.kernel,
            self.glibc,
            self.thp,
            self.load
        )
    }
}

/// The 1, 5 and 15-minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Now in UTC: ISO 8601, and the same without separators.
fn now_utc() -> (String, String) {
    // SAFETY: time with a null argument only returns the time.
    let t = unsafe { libc::time(std::ptr::null_mut()) };
    // SAFETY: tm is plain data; all zeroes is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    unsafe { libc::gmtime_r(&t, &mut tm) };
    let (y, mo, d, h, mi, s) = (
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
    );
    (
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z"),
    )
}
