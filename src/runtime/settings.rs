//! The runtime's settings: one table of `PCPALLOC_*` variables, read once
//! at init with `getenv` (no allocation), each with a type, default, range
//! and doc. The README's table is checked against [`TUNABLES`] by a test.
//!
//! A bad value never crashes: it gets one line on stderr naming the
//! variable, the value and what is used instead.
//!
//! A Rust program's `Config` goes through the same table: each value it
//! carries is written as the text the environment would give
//! ([`ConfigValue`]) and parsed by the same `apply`, with the same line on
//! stderr when it is refused ([`apply_config`]). The settings marked
//! [`AtRunTime`] can also change while the program runs (`pcpalloc_set`,
//! `pcpalloc::set`; see `control.rs`).
//!
//! The heuristics and the free_count policy are knobs of a page allocator
//! (`page_alloc/knobs.rs`); these variables set the runtime's at init, and
//! the benchmark changes them to reproduce the seeds' ablation rows inside
//! one process.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

use crate::page_alloc::knobs::{
    parse_heuristics, write_heuristics, FreeCountMode, FreeHighThreshold, Heuristics, Knobs,
    MAX_BATCH_SCALE_MAX,
};
use crate::page_alloc::zone::{ThpPolicy, DEFAULT_DIRTY_RATIO};
use crate::sys;
use crate::sys::rseq::{PcpEntry, WantEntry};
use crate::util::{buf::FixedBuf, parse_size, parse_u64, write_json_string};

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
/// Largest `PCPALLOC_DIRTY_RATIO`, in percent.
pub const DIRTY_RATIO_MAX: usize = 1000;

/// The knobs the environment asked for (read at init).
static KNOBS: AtomicU32 = AtomicU32::new(Knobs::DEFAULT.to_bits());

/// The knobs the environment asked for.
pub fn env_knobs() -> Knobs {
    Knobs::from_bits(KNOBS.load(Relaxed))
}

/// Makes `k` (the knobs the page allocator runs with) the base a
/// setting changed at run time starts from.
pub fn sync_knobs(k: Knobs) {
    KNOBS.store(k.to_bits(), Relaxed);
}

fn update_knobs(f: impl FnOnce(&mut Knobs)) {
    let mut k = env_knobs();
    f(&mut k);
    KNOBS.store(k.to_bits(), Relaxed);
}

pub use super::path_setting::{PathSetting, STATS_FILE_MAX};

/// Settings read once at init (not changeable afterwards).
pub struct Settings {
    /// Memory limit in bytes (0 = none).
    pub memory_limit: AtomicUsize,
    /// PcpMode as u32.
    pub pcp_mode: AtomicU32,
    /// How the CPU pagesets are entered (`PCPALLOC_PCP_ENTRY`): 0 auto,
    /// else `rseq::PcpEntry` + 1.
    pub pcp_entry: AtomicU32,
    /// Manual high fraction (0 = auto-tune).
    pub high_fraction: AtomicUsize,
    /// Maintenance tick in ms.
    pub decay_ms: AtomicU32,
    /// The zone's dirty limit, percent of the pages in use (0: off).
    pub dirty_ratio: AtomicUsize,
    /// Run the maintenance thread.
    pub background: AtomicBool,
    /// Print stats at exit.
    pub stats_at_exit: AtomicBool,
    /// ... as one JSON object (`PCPALLOC_STATS=json`) rather than text.
    pub stats_json: AtomicBool,
    /// Seed 004 stealing rules on.
    pub steal_seed_004: AtomicBool,
    /// Transparent huge pages for the heap: ThpPolicy as u32.
    pub thp: AtomicU32,
    /// Small objects grouped by lifetime (`PCPALLOC_GROUPING`).
    pub group_by_lifetime: AtomicBool,
    /// Where the report at exit goes (`PCPALLOC_STATS_FILE`; unset:
    /// stderr).
    pub stats_file: PathSetting,
    /// Where the trace goes (`PCPALLOC_TRACE`: PREFIX.<pid>; unset: no
    /// trace).
    pub trace_prefix: PathSetting,
    /// The memory cgroup directory followed (`PCPALLOC_CGROUP`; unset:
    /// the process's own; `none`: none).
    pub cgroup: PathSetting,
    /// Where heap profiles go (`PCPALLOC_PROFILE_FILE`; unset:
    /// `heap_profile::DEFAULT_FILE`).
    pub profile_file: PathSetting,
}

/// The init-time settings.
pub static SETTINGS: Settings = Settings {
    memory_limit: AtomicUsize::new(0),
    pcp_mode: AtomicU32::new(PcpMode::Cpu as u32),
    pcp_entry: AtomicU32::new(0),
    high_fraction: AtomicUsize::new(0),
    decay_ms: AtomicU32::new(DEFAULT_DECAY_MS),
    dirty_ratio: AtomicUsize::new(DEFAULT_DIRTY_RATIO),
    background: AtomicBool::new(false),
    stats_at_exit: AtomicBool::new(false),
    stats_json: AtomicBool::new(false),
    steal_seed_004: AtomicBool::new(true),
    group_by_lifetime: AtomicBool::new(true),
    thp: AtomicU32::new(ThpPolicy::DEFAULT as u32),
    stats_file: PathSetting::new(),
    trace_prefix: PathSetting::new(),
    cgroup: PathSetting::new(),
    profile_file: PathSetting::new(),
};

impl Settings {
    /// How the CPU pagesets are to be entered (`PCPALLOC_PCP_ENTRY`).
    pub fn pcp_entry(&self) -> WantEntry {
        match self.pcp_entry.load(Relaxed) {
            1 => WantEntry::Only(PcpEntry::Getcpu),
            2 => WantEntry::Only(PcpEntry::RseqGlibc),
            3 => WantEntry::Only(PcpEntry::RseqOwn),
            _ => WantEntry::Auto,
        }
    }

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

/// A value a Rust program's `Config` gives one setting. It is written as
/// the text the environment would give and parsed by the setting's own
/// `apply`, so code and environment take exactly the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigValue {
    /// Not set: the default (or the environment's value) stays.
    Unset,
    /// A number, written in decimal.
    Num(u64),
    /// A word or a path, as is.
    Text(&'static str),
    /// A set of heuristics, written as `PCPALLOC_HEURISTICS` takes it.
    Heuristics(u32),
    /// The heap profile's mean bytes between samples and whether to dump
    /// at peaks, written as `PCPALLOC_PROFILE` takes them.
    Profile(u64, bool),
}

/// One value per entry of [`TUNABLES`], in its order.
pub type ConfigValues = [ConfigValue; NR_TUNABLES];

/// No value set.
pub const CONFIG_UNSET: ConfigValues = [ConfigValue::Unset; NR_TUNABLES];

/// Which settings a `Config` set (bit i for `TUNABLES[i]`), so a bad
/// environment value says it keeps the `Config`'s.
static CONFIG_SET: AtomicU32 = AtomicU32::new(0);

/// Applies a `Config`'s values (at init, before the environment, which
/// overrides them). Each goes through its setting's parser; a refused one
/// gets one line on stderr, as a bad environment value does, and the
/// default stays.
pub fn apply_config(values: &ConfigValues) {
    for (i, (t, v)) in TABLE.iter().zip(values).enumerate() {
        let mut text = FixedBuf::<{ STATS_FILE_MAX + 16 }>::new();
        if !write_value(&mut text, v) {
            continue;
        }
        match (t.apply)(text.as_bytes()) {
            Ok(()) => {
                CONFIG_SET.fetch_or(1 << i, Relaxed);
            }
            Err(reason) => {
                let mut line = FixedBuf::<400>::new();
                line.push_bytes(b"pcpalloc: ignoring Config::");
                line.push_bytes(t.config.as_bytes());
                line.push_bytes(b"(");
                if matches!(v, ConfigValue::Text(_)) {
                    line.push_bytes(b"\"");
                    line.push_bytes(&text.as_bytes()[..text.len().min(64)]);
                    line.push_bytes(b"\"");
                } else {
                    line.push_bytes(&text.as_bytes()[..text.len().min(64)]);
                }
                let _ = writeln!(line, ") ({reason}); using the default, {}", t.default);
                sys::write_stderr(line.as_bytes());
            }
        }
    }
}

/// Writes `v` as the environment's text; false for [`ConfigValue::Unset`].
fn write_value(w: &mut dyn Write, v: &ConfigValue) -> bool {
    let _ = match *v {
        ConfigValue::Unset => return false,
        ConfigValue::Num(n) => write!(w, "{n}"),
        ConfigValue::Text(s) => w.write_str(s),
        ConfigValue::Heuristics(bits) => write_heuristics(w, Heuristics(bits)),
        ConfigValue::Profile(mean, peaks) => {
            write!(w, "{mean}{}", if peaks { ",peak" } else { "" })
        }
    };
    true
}

/// Shortest maintenance tick.
pub const DECAY_MS_MIN: u32 = 10;
/// Longest maintenance tick.
pub const DECAY_MS_MAX: u32 = 60_000;
/// Smallest memory limit (one MAX_ORDER block of zone plus room to grow).
pub const MEMORY_LIMIT_MIN: u64 = 4 << 20;

/// Why a value was refused.
pub type Verdict = Result<(), &'static str>;

/// Whether, and how, a setting can change while the program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtRunTime {
    /// Read once at init (what it sets up is not rebuilt).
    Never,
    /// Read where it is used, every time: a new value takes effect at once.
    Now,
    /// A knob of the page allocator: the new knobs are handed to it.
    Knobs,
    /// The memory limit: the budget's wall moves (lowered below what is
    /// charged, it only makes later charges fail).
    MemoryLimit,
}

/// One environment variable: name, accepted values, default, meaning.
pub struct Tunable {
    /// The variable's name.
    pub name: &'static str,
    /// The `Config` method that sets it (and the short name
    /// `pcpalloc::set` also takes).
    pub config: &'static str,
    /// Whether it can change at run time.
    pub at_run_time: AtRunTime,
    /// Accepted values.
    pub values: &'static str,
    /// The default, as text.
    pub default: &'static str,
    /// What it does.
    pub doc: &'static str,
    pub(crate) apply: fn(&[u8]) -> Verdict,
    /// Writes the value in force (the report's header), given the knobs
    /// the page allocator runs with.
    pub(crate) show: fn(&mut dyn Write, &Knobs) -> fmt::Result,
}

/// Every `PCPALLOC_*` variable.
pub static TUNABLES: &[Tunable] = &TABLE;

/// How many settings there are.
pub const NR_TUNABLES: usize = 20;

/// The index of the setting `name` in [`TUNABLES`] (a compile-time error
/// in a constant when there is none).
pub const fn index_of(name: &str) -> usize {
    let mut i = 0;
    while i < NR_TUNABLES {
        if bytes_eq(TABLE[i].name.as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("no such setting");
}

const fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The setting named `name`: its variable (`PCPALLOC_DECAY_MS`) or its
/// `Config` method's name (`decay_ms`).
pub fn find(name: &[u8]) -> Option<&'static Tunable> {
    TUNABLES
        .iter()
        .find(|t| t.name.as_bytes() == name || t.config.as_bytes() == name)
}

const TABLE: [Tunable; NR_TUNABLES] = [
    Tunable {
        name: "PCPALLOC_MEMORY_LIMIT",
        config: "memory_limit",
        at_run_time: AtRunTime::MemoryLimit,
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
        config: "pagesets",
        at_run_time: AtRunTime::Never,
        values: "cpu | thread",
        default: "cpu",
        doc: "Pagesets per CPU (entered as PCPALLOC_PCP_ENTRY says) or per thread.",
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
        name: "PCPALLOC_PCP_ENTRY",
        config: "pcp_entry",
        at_run_time: AtRunTime::Never,
        values: "auto | rseq-glibc | rseq-own | getcpu",
        default: "auto",
        doc: "How a thread enters its CPU's pageset: a restartable sequence on glibc's rseq area or on one of its own (no atomic instruction), or sched_getcpu and a try-lock; auto takes the first that works (getcpu under valgrind). The report's pcp_entry says which is live.",
        apply: |v| {
            let e = match v {
                b"auto" => 0,
                b"getcpu" => 1,
                b"rseq-glibc" => 2,
                b"rseq-own" => 3,
                _ => return Err("not auto, rseq-glibc, rseq-own or getcpu"),
            };
            SETTINGS.pcp_entry.store(e, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(match SETTINGS.pcp_entry() {
            WantEntry::Auto => "auto",
            WantEntry::Only(e) => e.name(),
        }),
    },
    Tunable {
        name: "PCPALLOC_BATCH_SCALE_MAX",
        config: "batch_scale_max",
        at_run_time: AtRunTime::Knobs,
        values: "0..=6",
        default: "5",
        doc: "Largest batch scale factor (\"mm: restrict the pcp batch scale factor to avoid too long latency\", Linux 6.7); bounds refill/drain latency.",
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
        config: "high_fraction",
        at_run_time: AtRunTime::Never,
        values: "0, or >= 8",
        default: "0 (auto-tune)",
        doc: "Fixed pageset high = managed / fraction / CPUs; turns auto-tuning off.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number"),
            Some(0) => {
                SETTINGS.high_fraction.store(0, Relaxed);
                Ok(())
            }
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
        config: "heuristics",
        at_run_time: AtRunTime::Knobs,
        values: "all | base | list of 1,3,5,7,8,9 or names, '-' to remove",
        default: "all",
        doc: "Which heuristics of the PCP auto-tuning series (Linux 6.7) run, by patch number or name: e.g. `base`, `1,3`, `all,-8`.",
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
        config: "free_count",
        at_run_time: AtRunTime::Knobs,
        values: "halve | exact",
        default: "halve",
        doc: "What an allocation does to free_count: halve it (Linux 6.7) or subtract the pages taken (Nikhil Dhama's first fix).",
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
        config: "free_high_threshold",
        at_run_time: AtRunTime::Knobs,
        values: "batch | 5batch | batch+high_min/2",
        default: "batch+high_min/2",
        doc: "free_count needed before consecutive high-order frees drain: batch (Linux 6.7), 5 batch (Dhama's second fix), batch + high_min/2 (Linux 6.16).",
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
        config: "decay_ms",
        at_run_time: AtRunTime::Now,
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
        name: "PCPALLOC_DIRTY_RATIO",
        config: "dirty_ratio",
        at_run_time: AtRunTime::Never,
        values: "0..=1000",
        default: "90",
        doc: "Percent of the pages in use the heap's resident free memory may reach: past it, a free gives whole free 2 MiB pageblocks back to the OS at once (the rest waits for the tick); 0 leaves it all to the tick.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number (percent)"),
            Some(n) if n > DIRTY_RATIO_MAX as u64 => Err("above the maximum of 1000 percent"),
            Some(n) => {
                SETTINGS.dirty_ratio.store(n as usize, Relaxed);
                Ok(())
            }
        },
        show: |w, _| write!(w, "{}", SETTINGS.dirty_ratio.load(Relaxed)),
    },
    Tunable {
        name: "PCPALLOC_BACKGROUND",
        config: "background_thread",
        at_run_time: AtRunTime::Never,
        values: "0 | 1",
        default: "0",
        doc: "Run the tick on a background thread (started once the heap passes 16 MiB or a second thread allocates); 0 runs it from the allocator's own calls and gives memory back as it is freed.",
        apply: |v| apply_bool(v, &SETTINGS.background),
        show: |w, _| show_bool(w, &SETTINGS.background),
    },
    Tunable {
        name: "PCPALLOC_STATS",
        config: "stats",
        at_run_time: AtRunTime::Now,
        values: "0 | 1 | json",
        default: "0",
        doc: "Print the stats report at exit, to stderr or PCPALLOC_STATS_FILE: a summary then `name value` lines, or one JSON object.",
        apply: |v| {
            let json = v.eq_ignore_ascii_case(b"json");
            if json {
                SETTINGS.stats_at_exit.store(true, Relaxed);
            } else {
                apply_bool(v, &SETTINGS.stats_at_exit).map_err(|_| "neither 0, 1 nor json")?;
            }
            SETTINGS.stats_json.store(json, Relaxed);
            Ok(())
        },
        show: |w, _| {
            if SETTINGS.stats_at_exit.load(Relaxed) && SETTINGS.stats_json.load(Relaxed) {
                w.write_str("json")
            } else {
                show_bool(w, &SETTINGS.stats_at_exit)
            }
        },
    },
    Tunable {
        name: "PCPALLOC_STATS_FILE",
        config: "stats_file",
        at_run_time: AtRunTime::Never,
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
        config: "trace",
        at_run_time: AtRunTime::Never,
        values: "a path prefix",
        default: "(none)",
        doc: "Record every allocation event to PREFIX.<pid> for pcpalloc-replay (see the README's Replay section).",
        apply: |v| SETTINGS.trace_prefix.set(v),
        show: |w, _| SETTINGS.trace_prefix.show(w, "(none)"),
    },
    Tunable {
        name: "PCPALLOC_STEAL",
        config: "steal",
        at_run_time: AtRunTime::Never,
        values: "seed004 | baseline",
        default: "seed004",
        doc: "Page stealing rules: Vlastimil Babka's \"page stealing tweaks\" (Linux 4.0; seed 004), or the rules of Linux 3.19 before them.",
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
        name: "PCPALLOC_GROUPING",
        config: "grouping",
        at_run_time: AtRunTime::Never,
        values: "lifetime | mobility",
        default: "lifetime",
        doc: "How small objects' slabs are grouped in pageblocks: by lifetime (a size class whose slabs keep coming back empty takes reclaimable pageblocks, the rest unmovable ones; under THP dense only the unmovable ones are huge pages), or by mobility alone (every slab unmovable, as the kernel's slabs).",
        apply: |v| {
            let on = match v {
                b"lifetime" => true,
                b"mobility" => false,
                _ => return Err("neither lifetime nor mobility"),
            };
            SETTINGS.group_by_lifetime.store(on, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(if SETTINGS.group_by_lifetime.load(Relaxed) { "lifetime" } else { "mobility" }),
    },
    Tunable {
        name: "PCPALLOC_THP",
        config: "huge_pages",
        at_run_time: AtRunTime::Never,
        values: "never | always | dense",
        default: "dense",
        doc: "Transparent huge pages for the heap's pageblocks: never (madvise NOHUGEPAGE), always (MADV_HUGEPAGE on every block), or dense: once the heap passes 64 MiB, the pageblocks of long-lived small objects, where a 2 MiB page is used and stays so.",
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
    Tunable {
        name: "PCPALLOC_CGROUP",
        config: "cgroup",
        at_run_time: AtRunTime::Never,
        values: "a cgroup directory, or `none`",
        default: "(own)",
        doc: "The memory cgroup whose limit the heap keeps clear of (v2 memory.max and memory.high, v1 memory.limit_in_bytes, with the usage beside them): by default the level of least limit from the process's own cgroup up; a directory to follow that one (a hierarchy mounted elsewhere); none for no cgroup.",
        apply: |v| SETTINGS.cgroup.set(v),
        show: |w, _| SETTINGS.cgroup.show(w, "(own)"),
    },
    Tunable {
        name: "PCPALLOC_PROFILE",
        config: "profile",
        at_run_time: AtRunTime::Now,
        values: "0, 1, or the mean bytes between samples (at least 4 KiB), each optionally followed by `,peak`",
        default: "0",
        doc: "Sample allocations for a heap profile: one per 512 KiB allocated on average with 1, or per the size given; written at exit (the sampled blocks still live are the leak report), on demand, and with `,peak` at each new peak of live bytes. See the README's heap profile section.",
        apply: |v| {
            crate::slab::set_profile(crate::heap_profile::parse(v)?);
            Ok(())
        },
        show: |w, _| crate::heap_profile::show(w),
    },
    Tunable {
        name: "PCPALLOC_PROFILE_FILE",
        config: "profile_file",
        at_run_time: AtRunTime::Never,
        values: "a path; %p becomes the process id",
        default: "pcpalloc.%p.pb",
        doc: "Where heap profiles go: the one at exit to the path, on-demand ones to the path with .1, .2... appended, the one at each new peak to the path with .peak.",
        apply: |v| SETTINGS.profile_file.set(v),
        show: |w, _| SETTINGS.profile_file.show(w, crate::heap_profile::DEFAULT_FILE),
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

/// Writes every setting in force as the members of a JSON object
/// (`"NAME":value`, comma-separated; the braces are the caller's): a
/// value that is a whole number (`1000`) as a JSON number, any other
/// (`none`, `64M`, `cpu`) as a string.
pub fn write_settings_json(w: &mut dyn Write, knobs: &Knobs) -> fmt::Result {
    for (i, t) in TUNABLES.iter().enumerate() {
        let mut v = FixedBuf::<{ STATS_FILE_MAX + 16 }>::new();
        (t.show)(&mut v, knobs)?;
        write!(w, "{}\"{}\":", if i == 0 { "" } else { "," }, t.name)?;
        if is_json_integer(v.as_bytes()) {
            write_digits(w, v.as_bytes())?;
        } else {
            write_json_string(w, v.as_bytes())?;
        }
    }
    Ok(())
}

/// Whether `v` is a whole number as JSON writes one: digits, no leading
/// zero (`0` itself aside), at most 18 of them (a reader's 64 bits).
fn is_json_integer(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= 18
        && v.iter().all(u8::is_ascii_digit)
        && (v[0] != b'0' || v.len() == 1)
}

/// Writes `v` (ASCII digits) as it is.
fn write_digits(w: &mut dyn Write, v: &[u8]) -> fmt::Result {
    w.write_str(core::str::from_utf8(v).map_err(|_| fmt::Error)?)
}

fn apply_bool(v: &[u8], cell: &AtomicBool) -> Verdict {
    match v {
        b"0" | b"false" | b"off" | b"no" => cell.store(false, Relaxed),
        b"1" | b"true" | b"on" | b"yes" => cell.store(true, Relaxed),
        _ => return Err("neither 0 nor 1"),
    }
    Ok(())
}

/// One warning line: `pcpalloc: ignoring NAME=VALUE (REASON); using the
/// default, DEFAULT` — or `keeping the Config's value, VALUE` when the
/// program's `Config` set this one (`TUNABLES[i]`).
fn warn(i: usize, value: &[u8], reason: &str) {
    let t = &TABLE[i];
    let mut line = FixedBuf::<400>::new();
    line.push_bytes(b"pcpalloc: ignoring ");
    line.push_bytes(t.name.as_bytes());
    line.push_bytes(b"=");
    line.push_bytes(&value[..value.len().min(64)]);
    let _ = write!(line, " ({reason}); ");
    if CONFIG_SET.load(Relaxed) & (1 << i) != 0 {
        line.push_bytes(b"keeping the Config's value, ");
        let _ = (t.show)(&mut line, &env_knobs());
    } else {
        let _ = write!(line, "using the default, {}", t.default);
    }
    line.push_bytes(b"\n");
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
    for (i, t) in TABLE.iter().enumerate() {
        let mut name = FixedBuf::<64>::new();
        name.push_bytes(t.name.as_bytes());
        name.push_bytes(b"\0");
        let Some(raw) = sys::getenv(name.as_bytes()) else {
            continue;
        };
        let v = raw.trim_ascii();
        if let Err(reason) = (t.apply)(v) {
            warn(i, v, reason);
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
