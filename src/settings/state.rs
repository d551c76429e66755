//! The settings' state: what each `PCPALLOC_*` variable set (read where
//! it is used), the knobs the environment asked for, and the types of
//! the table ([`Tunable`]). A leaf: the runtime and the report read it;
//! it reads neither.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

use crate::page_alloc::knobs::Knobs;
use crate::page_alloc::zone::{ThpPolicy, DEFAULT_DIRTY_RATIO};
use crate::sys::rseq::{PcpEntry, WantEntry};

/// Where pagesets live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcpMode {
    /// One pageset per CPU, chosen by the CPU the thread runs on.
    Cpu = 0,
    /// One pageset per thread, drained when the thread exits.
    Thread = 1,
}

/// Default maintenance tick.
pub(crate) const DEFAULT_DECAY_MS: u32 = 1000;
/// Largest `PCPALLOC_DIRTY_RATIO`, in percent.
pub(crate) const DIRTY_RATIO_MAX: usize = 1000;

/// The knobs the environment asked for (read at init).
static KNOBS: AtomicU32 = AtomicU32::new(Knobs::DEFAULT.to_bits());

/// The knobs the environment asked for.
pub(crate) fn env_knobs() -> Knobs {
    Knobs::from_bits(KNOBS.load(Relaxed))
}

/// Makes `k` (the knobs the page allocator runs with) the base a
/// setting changed at run time starts from.
pub(crate) fn sync_knobs(k: Knobs) {
    KNOBS.store(k.to_bits(), Relaxed);
}

pub(super) fn update_knobs(f: impl FnOnce(&mut Knobs)) {
    let mut k = env_knobs();
    f(&mut k);
    KNOBS.store(k.to_bits(), Relaxed);
}

pub use super::path::{PathSetting, STATS_FILE_MAX};

/// Settings read once at init (not changeable afterwards).
pub struct Settings {
    /// Memory limit in bytes (0 = none).
    pub memory_limit: AtomicUsize,
    /// PcpMode as u32.
    pub pcp_mode: AtomicU32,
    /// How the CPU pagesets are entered (`PCPALLOC_PCP_ENTRY`): 0 auto,
    /// else `rseq::PcpEntry` + 1 (the default, 1: getcpu).
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
    pcp_entry: AtomicU32::new(1),
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
pub(crate) enum ConfigValue {
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
pub(crate) type ConfigValues = [ConfigValue; NR_TUNABLES];

/// Shortest maintenance tick.
pub(crate) const DECAY_MS_MIN: u32 = 10;
/// Longest maintenance tick.
pub(crate) const DECAY_MS_MAX: u32 = 60_000;
/// Smallest memory limit (one MAX_ORDER block of zone plus room to grow).
pub(crate) const MEMORY_LIMIT_MIN: u64 = 4 << 20;

/// Why a value was refused.
pub(crate) type Verdict = Result<(), &'static str>;

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
    /// Accepted values (the README's table, which a test checks against
    /// this one, says them; the library itself only shows the value).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub values: &'static str,
    /// The default, as text.
    pub default: &'static str,
    /// What it does (as `values`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub doc: &'static str,
    pub(crate) apply: fn(&[u8]) -> Verdict,
    /// Writes the value in force (the report's header), given the knobs
    /// the page allocator runs with.
    pub(crate) show: fn(&mut dyn Write, &Knobs) -> fmt::Result,
}

/// How many settings there are.
pub(crate) const NR_TUNABLES: usize = 20;

pub(super) fn show_bool(w: &mut dyn Write, cell: &AtomicBool) -> fmt::Result {
    w.write_str(if cell.load(Relaxed) { "1" } else { "0" })
}

pub(super) fn apply_bool(v: &[u8], cell: &AtomicBool) -> Verdict {
    match v {
        b"0" | b"false" | b"off" | b"no" => cell.store(false, Relaxed),
        b"1" | b"true" | b"on" | b"yes" => cell.store(true, Relaxed),
        _ => return Err("neither 0 nor 1"),
    }
    Ok(())
}
