//! The runtime's settings: one table of `PCPALLOC_*` variables, read once
//! at init with `getenv` (no allocation), each with a type, default, range
//! and doc. The README's table is checked against [`TUNABLES`] by a test.
//!
//! A bad value never crashes: it gets one line on stderr naming the
//! variable, the value and the default used instead.
//!
//! The heuristics and the free_count policy are knobs of a page allocator
//! (`page_alloc/knobs.rs`); these variables set the runtime's at init, and
//! the benchmark changes them to reproduce the seeds' ablation rows inside
//! one process.

use core::cell::UnsafeCell;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

use crate::page_alloc::knobs::{
    parse_heuristics, write_heuristics, FreeCountMode, FreeHighThreshold, Heuristics, Knobs,
    MAX_BATCH_SCALE_MAX,
};
use crate::page_alloc::zone::ThpPolicy;
use crate::sys;
use crate::util::{buf::FixedBuf, parse_size, parse_u64};

/// Where pagesets live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcpMode {
    /// One pageset per CPU, chosen by the CPU the thread runs on.
    Cpu = 0,
    /// One pageset per thread, drained when the thread exits.
    Thread = 1,
}

/// Default maintenance tick.
pub const DEFAULT_DECAY_MS: u32 = 1000;

/// The knobs the environment asked for (read at init).
static KNOBS: AtomicU32 = AtomicU32::new(Knobs::DEFAULT.to_bits());

/// The knobs the environment asked for.
pub fn env_knobs() -> Knobs {
    Knobs::from_bits(KNOBS.load(Relaxed))
}

fn update_knobs(f: impl FnOnce(&mut Knobs)) {
    let mut k = env_knobs();
    f(&mut k);
    KNOBS.store(k.to_bits(), Relaxed);
}

/// Longest path a setting keeps (`PCPALLOC_STATS_FILE`, `PCPALLOC_TRACE`).
pub const STATS_FILE_MAX: usize = 256;

/// A path setting: NUL-terminated, empty when unset. Written once at init,
/// before any thread reads it (the init state's Release/Acquire orders
/// that).
pub struct PathSetting {
    bytes: UnsafeCell<[u8; STATS_FILE_MAX]>,
}

// SAFETY: written only by `load_from_env` during init, before anything
// reads it (see the type's docs).
unsafe impl Sync for PathSetting {}

impl PathSetting {
    const fn new() -> PathSetting {
        PathSetting {
            bytes: UnsafeCell::new([0; STATS_FILE_MAX]),
        }
    }

    /// The path, if one was set.
    pub fn get(&self) -> Option<&core::ffi::CStr> {
        // SAFETY: written only during init (see the Sync impl).
        let buf = unsafe { &*self.bytes.get() };
        let c = core::ffi::CStr::from_bytes_until_nul(buf).ok()?;
        (!c.is_empty()).then_some(c)
    }

    /// Sets the path (init only).
    fn set(&self, v: &[u8]) -> Verdict {
        if v.is_empty() || v.contains(&0) {
            return Err("empty");
        }
        if v.len() >= STATS_FILE_MAX {
            return Err("longer than 255 bytes");
        }
        // SAFETY: init is single-threaded for the settings (see the Sync
        // impl).
        let buf = unsafe { &mut *self.bytes.get() };
        buf[..v.len()].copy_from_slice(v);
        buf[v.len()] = 0;
        Ok(())
    }

    fn show(&self, w: &mut dyn Write, unset: &str) -> fmt::Result {
        match self.get() {
            Some(c) => w.write_str(c.to_str().unwrap_or("(not UTF-8)")),
            None => w.write_str(unset),
        }
    }
}

/// Settings read once at init (not changeable afterwards).
pub struct Settings {
    /// Memory limit in bytes (0 = none).
    pub memory_limit: AtomicUsize,
    /// PcpMode as u32.
    pub pcp_mode: AtomicU32,
    /// Manual high fraction (0 = auto-tune).
    pub high_fraction: AtomicUsize,
    /// Maintenance tick in ms.
    pub decay_ms: AtomicU32,
    /// Run the maintenance thread.
    pub background: AtomicBool,
    /// Print stats at exit.
    pub stats_at_exit: AtomicBool,
    /// Seed 004 stealing rules on.
    pub steal_seed_004: AtomicBool,
    /// Transparent huge pages for the heap: ThpPolicy as u32.
    pub thp: AtomicU32,
    /// Where the report at exit goes (`PCPALLOC_STATS_FILE`; unset:
    /// stderr).
    pub stats_file: PathSetting,
    /// Where the trace goes (`PCPALLOC_TRACE`: PREFIX.<pid>; unset: no
    /// trace).
    pub trace_prefix: PathSetting,
}

/// The init-time settings.
pub static SETTINGS: Settings = Settings {
    memory_limit: AtomicUsize::new(0),
    pcp_mode: AtomicU32::new(PcpMode::Cpu as u32),
    high_fraction: AtomicUsize::new(0),
    decay_ms: AtomicU32::new(DEFAULT_DECAY_MS),
    background: AtomicBool::new(true),
    stats_at_exit: AtomicBool::new(false),
    steal_seed_004: AtomicBool::new(true),
    thp: AtomicU32::new(ThpPolicy::DEFAULT as u32),
    stats_file: PathSetting::new(),
    trace_prefix: PathSetting::new(),
};

impl Settings {
    /// Where pagesets live.
    #[inline]
    pub fn pcp_mode(&self) -> PcpMode {
        if self.pcp_mode.load(Relaxed) == PcpMode::Thread as u32 {
            PcpMode::Thread
        } else {
            PcpMode::Cpu
        }
    }
}

/// The configuration a Rust program's global allocator carries (see the
/// crate's `Config`), applied before the environment is read — so the
/// environment overrides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// Memory limit in bytes, 0 for the default.
    pub memory_limit: usize,
    /// Maintenance tick in ms.
    pub decay_ms: u32,
    /// Where pagesets live.
    pub pcp_mode: PcpMode,
    /// The heuristics in force.
    pub heuristics: Heuristics,
    /// Print the report at exit.
    pub stats_at_exit: bool,
    /// Run the tick on a background thread.
    pub background: bool,
}

impl Preset {
    /// The defaults, as the environment's.
    pub const DEFAULT: Preset = Preset {
        memory_limit: 0,
        decay_ms: DEFAULT_DECAY_MS,
        pcp_mode: PcpMode::Cpu,
        heuristics: Heuristics::ALL,
        stats_at_exit: false,
        background: true,
    };
}

/// Applies `p` to the settings (before the environment, at init).
pub fn apply_preset(p: &Preset) {
    SETTINGS.memory_limit.store(p.memory_limit, Relaxed);
    SETTINGS
        .decay_ms
        .store(p.decay_ms.clamp(DECAY_MS_MIN, DECAY_MS_MAX), Relaxed);
    SETTINGS.pcp_mode.store(p.pcp_mode as u32, Relaxed);
    SETTINGS.stats_at_exit.store(p.stats_at_exit, Relaxed);
    SETTINGS.background.store(p.background, Relaxed);
    update_knobs(|k| k.heuristics = p.heuristics);
}

/// Shortest maintenance tick.
pub const DECAY_MS_MIN: u32 = 10;
/// Longest maintenance tick.
pub const DECAY_MS_MAX: u32 = 60_000;
/// Smallest memory limit (one MAX_ORDER block of zone plus room to grow).
pub const MEMORY_LIMIT_MIN: u64 = 4 << 20;

/// Why a value was refused.
type Verdict = Result<(), &'static str>;

/// One environment variable: name, accepted values, default, meaning.
pub struct Tunable {
    /// The variable's name.
    pub name: &'static str,
    /// Accepted values.
    pub values: &'static str,
    /// The default, as text.
    pub default: &'static str,
    /// What it does.
    pub doc: &'static str,
    apply: fn(&[u8]) -> Verdict,
    /// Writes the value in force (the report's header), given the knobs
    /// the page allocator runs with.
    show: fn(&mut dyn Write, &Knobs) -> fmt::Result,
}

/// Every `PCPALLOC_*` variable.
pub static TUNABLES: &[Tunable] = &[
    Tunable {
        name: "PCPALLOC_MEMORY_LIMIT",
        values: "`none`, or bytes with K/KiB, M/MiB, G/GiB or T/TiB; at least 4 MiB",
        default: "none",
        doc: "A wall on the memory the heap may hold resident (pages handed out and not yet given back, page descriptors, huge blocks); past it, after reclaiming, malloc returns NULL with ENOMEM. Without it only the OS and the cgroup limit the heap, as for glibc.",
        apply: |v| match parse_size(v) {
            _ if v.eq_ignore_ascii_case(b"none") => {
                SETTINGS.memory_limit.store(0, Relaxed);
                Ok(())
            }
            None => Err("not a size (a number with K/KiB, M/MiB, G/GiB or T/TiB, or none)"),
            Some(n) if n < MEMORY_LIMIT_MIN => Err("below the minimum of 4 MiB"),
            Some(n) => {
                SETTINGS.memory_limit.store(n as usize, Relaxed);
                Ok(())
            }
        },
        show: |w, _| match SETTINGS.memory_limit.load(Relaxed) {
            0 => w.write_str("none"),
            n => write!(w, "{n}"),
        },
    },
    Tunable {
        name: "PCPALLOC_PCP",
        values: "cpu | thread",
        default: "cpu",
        doc: "Pagesets per CPU (chosen by sched_getcpu) or per thread.",
        apply: |v| {
            let m = match v {
                b"cpu" => PcpMode::Cpu,
                b"thread" => PcpMode::Thread,
                _ => return Err("neither cpu nor thread"),
            };
            SETTINGS.pcp_mode.store(m as u32, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(match SETTINGS.pcp_mode() { PcpMode::Cpu => "cpu", PcpMode::Thread => "thread" }),
    },
    Tunable {
        name: "PCPALLOC_BATCH_SCALE_MAX",
        values: "0..=6",
        default: "5",
        doc: "Largest batch scale factor (seed 000 patch 4); bounds refill/drain latency.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number"),
            Some(n) if n > u64::from(MAX_BATCH_SCALE_MAX) => Err("above the maximum of 6"),
            Some(n) => {
                update_knobs(|k| k.batch_scale_max = n as u32);
                Ok(())
            }
        },
        show: |w, k| write!(w, "{}", k.batch_scale_max),
    },
    Tunable {
        name: "PCPALLOC_HIGH_FRACTION",
        values: "0, or >= 8",
        default: "0 (auto-tune)",
        doc: "Fixed pageset high = managed / fraction / CPUs; turns auto-tuning off.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number"),
            Some(0) => Ok(()),
            Some(n) if n < 8 => Err("between 1 and 7 (the kernel's minimum fraction is 8)"),
            Some(n) => {
                SETTINGS.high_fraction.store(n as usize, Relaxed);
                Ok(())
            }
        },
        show: |w, _| write!(w, "{}", SETTINGS.high_fraction.load(Relaxed)),
    },
    Tunable {
        name: "PCPALLOC_HEURISTICS",
        values: "all | base | list of 1,3,5,7,8,9 or names, '-' to remove",
        default: "all",
        doc: "Which seed 000 heuristics run (ablation): e.g. `base`, `1,3`, `all,-8`.",
        apply: |v| match parse_heuristics(v) {
            Some(h) => {
                update_knobs(|k| k.heuristics = h);
                Ok(())
            }
            None => Err("an item is not all, base, a patch number 1,3,5,7,8,9 or a heuristic's name"),
        },
        show: |w, k| write_heuristics(w, k.heuristics),
    },
    Tunable {
        name: "PCPALLOC_FREE_COUNT",
        values: "halve | exact",
        default: "halve",
        doc: "What an allocation does to free_count (seed 002).",
        apply: |v| {
            let m = match v {
                b"halve" => FreeCountMode::Halve,
                b"exact" => FreeCountMode::Exact,
                _ => return Err("neither halve nor exact"),
            };
            update_knobs(|k| k.free_count_mode = m);
            Ok(())
        },
        show: |w, k| w.write_str(match k.free_count_mode { FreeCountMode::Halve => "halve", FreeCountMode::Exact => "exact" }),
    },
    Tunable {
        name: "PCPALLOC_FREE_HIGH_THRESHOLD",
        values: "batch | 5batch | batch+high_min/2",
        default: "batch+high_min/2",
        doc: "free_count needed before consecutive high-order frees drain (seed 002).",
        apply: |v| {
            let t = match v {
                b"batch" => FreeHighThreshold::Batch,
                b"5batch" => FreeHighThreshold::FiveBatch,
                b"batch+high_min/2" => FreeHighThreshold::BatchPlusHalfHighMin,
                _ => return Err("not one of batch, 5batch, batch+high_min/2"),
            };
            update_knobs(|k| k.free_high_threshold = t);
            Ok(())
        },
        show: |w, k| w.write_str(match k.free_high_threshold { FreeHighThreshold::Batch => "batch", FreeHighThreshold::FiveBatch => "5batch", FreeHighThreshold::BatchPlusHalfHighMin => "batch+high_min/2" }),
    },
    Tunable {
        name: "PCPALLOC_DECAY_MS",
        values: "10..=60000",
        default: "1000",
        doc: "Maintenance tick: pageset high decay and release of idle memory.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number of milliseconds"),
            Some(n) if n < u64::from(DECAY_MS_MIN) => Err("below the minimum of 10 ms"),
            Some(n) if n > u64::from(DECAY_MS_MAX) => Err("above the maximum of 60000 ms"),
            Some(n) => {
                SETTINGS.decay_ms.store(n as u32, Relaxed);
                Ok(())
            }
        },
        show: |w, _| write!(w, "{}", SETTINGS.decay_ms.load(Relaxed)),
    },
    Tunable {
        name: "PCPALLOC_BACKGROUND",
        values: "0 | 1",
        default: "1",
        doc: "Run the tick on a background thread; 0 runs it from allocation slow paths.",
        apply: |v| apply_bool(v, &SETTINGS.background),
        show: |w, _| show_bool(w, &SETTINGS.background),
    },
    Tunable {
        name: "PCPALLOC_STATS",
        values: "0 | 1",
        default: "0",
        doc: "Print the stats report (`name value` lines) at exit, to stderr or PCPALLOC_STATS_FILE.",
        apply: |v| apply_bool(v, &SETTINGS.stats_at_exit),
        show: |w, _| show_bool(w, &SETTINGS.stats_at_exit),
    },
    Tunable {
        name: "PCPALLOC_STATS_FILE",
        values: "a path; %p becomes the process id",
        default: "(stderr)",
        doc: "Write the report at exit to this file instead of stderr (implies PCPALLOC_STATS=1).",
        apply: |v| {
            SETTINGS.stats_file.set(v)?;
            SETTINGS.stats_at_exit.store(true, Relaxed);
            Ok(())
        },
        show: |w, _| SETTINGS.stats_file.show(w, "(stderr)"),
    },
    Tunable {
        name: "PCPALLOC_TRACE",
        values: "a path prefix",
        default: "(none)",
        doc: "Record every allocation event to PREFIX.<pid> for pcpalloc-replay (see the README's Replay section).",
        apply: |v| SETTINGS.trace_prefix.set(v),
        show: |w, _| SETTINGS.trace_prefix.show(w, "(none)"),
    },
    Tunable {
        name: "PCPALLOC_STEAL",
        values: "seed004 | baseline",
        default: "seed004",
        doc: "Page stealing rules: seed 004 as merged, or the 3.19-rc4 baseline.",
        apply: |v| {
            let on = match v {
                b"seed004" => true,
                b"baseline" => false,
                _ => return Err("neither seed004 nor baseline"),
            };
            SETTINGS.steal_seed_004.store(on, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(if SETTINGS.steal_seed_004.load(Relaxed) { "seed004" } else { "baseline" }),
    },
    Tunable {
        name: "PCPALLOC_THP",
        values: "never | always | dense",
        default: "dense",
        doc: "Transparent huge pages for the heap's pageblocks: never (madvise NOHUGEPAGE), always (MADV_HUGEPAGE on every block), or dense: once the heap passes 64 MiB, where a 2 MiB page is mostly used anyway.",
        apply: |v| {
            let p = match v {
                b"never" => ThpPolicy::Never,
                b"always" => ThpPolicy::Always,
                b"dense" => ThpPolicy::Dense,
                _ => return Err("neither never, always nor dense"),
            };
            SETTINGS.thp.store(p as u32, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(ThpPolicy::from_u32(SETTINGS.thp.load(Relaxed)).name()),
    },
];

fn show_bool(w: &mut dyn Write, cell: &AtomicBool) -> fmt::Result {
    w.write_str(if cell.load(Relaxed) { "1" } else { "0" })
}

/// Writes every setting in force as `NAME value` lines (the report's
/// header), with `knobs` the page allocator's.
pub fn write_settings(w: &mut dyn Write, knobs: &Knobs) -> fmt::Result {
    for t in TUNABLES {
        w.write_str(t.name)?;
        w.write_str(" ")?;
        (t.show)(w, knobs)?;
        w.write_str("\n")?;
    }
    Ok(())
}

fn apply_bool(v: &[u8], cell: &AtomicBool) -> Verdict {
    match v {
        b"0" | b"false" | b"off" | b"no" => cell.store(false, Relaxed),
        b"1" | b"true" | b"on" | b"yes" => cell.store(true, Relaxed),
        _ => return Err("neither 0 nor 1"),
    }
    Ok(())
}

/// One warning line: `pcpalloc: ignoring NAME=VALUE (REASON); using ...`.
fn warn(name: &[u8], value: &[u8], reason: &str, default: &str) {
    let mut line = FixedBuf::<320>::new();
    line.push_bytes(b"pcpalloc: ignoring ");
    line.push_bytes(&name[..name.len().min(64)]);
    line.push_bytes(b"=");
    line.push_bytes(&value[..value.len().min(64)]);
    let _ = writeln!(line, " ({reason}); using the default, {default}");
    sys::write_stderr(line.as_bytes());
}

/// Reads every variable from the environment, once, at init. Bad values
/// get one stderr line each and keep the default; so does a `PCPALLOC_`
/// name that is not one of ours (a misspelling). Nothing is read in a
/// setuid or setgid program.
pub fn load_from_env() {
    // As glibc does for MALLOC_*: a setuid or setgid program ignores us.
    if sys::secure_mode() {
        return;
    }
    for t in TUNABLES {
        let mut name = FixedBuf::<64>::new();
        name.push_bytes(t.name.as_bytes());
        name.push_bytes(b"\0");
        let Some(raw) = sys::getenv(name.as_bytes()) else {
            continue;
        };
        let v = raw.trim_ascii();
        if let Err(reason) = (t.apply)(v) {
            warn(t.name.as_bytes(), v, reason, t.default);
        }
    }
    sys::for_each_env(|entry| {
        let Some(rest) = entry.strip_prefix(b"PCPALLOC_") else {
            return;
        };
        let name_len =
            b"PCPALLOC_".len() + rest.iter().position(|&c| c == b'=').unwrap_or(rest.len());
        let name = &entry[..name_len];
        let known = TUNABLES.iter().any(|t| t.name.as_bytes() == name);
        if !known {
            let mut line = FixedBuf::<160>::new();
            line.push_bytes(b"pcpalloc: ignoring ");
            line.push_bytes(&name[..name.len().min(64)]);
            line.push_bytes(b": not a setting of pcpalloc\n");
            sys::write_stderr(line.as_bytes());
        }
    });
}
