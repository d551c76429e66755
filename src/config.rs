//! Configuration a Rust program gives its global allocator in code.
//!
//! ```
//! use pcpalloc::{Config, PcpAlloc, Pagesets};
//!
//! #[global_allocator]
//! static GLOBAL: PcpAlloc = PcpAlloc::with_config(
//!     Config::new()
//!         .memory_limit(2 << 30)
//!         .decay_ms(500)
//!         .pagesets(Pagesets::PerThread)
//!         .stats_at_exit(true),
//! );
//! # fn main() {}
//! ```
//!
//! Every `PCPALLOC_*` variable has a method here, and every value goes
//! through the variable's own parser at the allocator's first allocation:
//! a value the environment would refuse is refused the same way — one line
//! on stderr (`pcpalloc: ignoring Config::decay_ms(1) (below the minimum
//! of 10 ms); using the default, 1000`) and the default stays. The
//! environment (`PCPALLOC_*`, see the README's table) overrides the
//! `Config`, so a program built with one configuration can still be tuned
//! without a rebuild; a setuid or setgid program reads no environment.

use crate::page_alloc::knobs::Heuristics as Bits;
use crate::settings::{self, index_of, ConfigValue, ConfigValues, CONFIG_UNSET};

/// Where the per-CPU page caches (pagesets) live (`PCPALLOC_PCP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pagesets {
    /// One per CPU, as the kernel's (the default).
    PerCpu,
    /// One per thread, drained when the thread exits.
    PerThread,
}

/// How a thread enters its CPU's pageset (`PCPALLOC_PCP_ENTRY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PcpEntry {
    /// The first of the others that works (the default).
    Auto,
    /// A restartable sequence on glibc's rseq area.
    RseqGlibc,
    /// A restartable sequence on an rseq area of pcpalloc's own.
    RseqOwn,
    /// `sched_getcpu` and a try-lock.
    Getcpu,
}

/// Which of the kernel's pageset heuristics run (`PCPALLOC_HEURISTICS`):
/// the nine patches of Huang Ying's PCP auto-tuning series ("mm: PCP high
/// auto-tuning", merged in Linux 6.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Heuristics(u32);

impl Heuristics {
    /// Every heuristic (the default).
    pub const ALL: Heuristics = Heuristics(Bits::ALL.0);
    /// None: the pageset of Linux 6.6, before the series.
    pub const BASE: Heuristics = Heuristics(Bits::BASE.0);

    /// The cumulative rows of the series' cover letter: `upto(0)` is the
    /// base, `upto(3)` patches 1–3, `upto(9)` all of them.
    pub const fn upto(patch: u32) -> Heuristics {
        Heuristics(Bits::row(patch).0)
    }
}

/// What an allocation from a pageset does to its count of consecutively
/// freed pages, `free_count` (`PCPALLOC_FREE_COUNT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FreeCount {
    /// Halve it, as Linux 6.7 does (the default).
    Halve,
    /// Subtract the pages taken: Nikhil Dhama's first fix ("mm: pcp: fix
    /// pcp->free_count reduction on page allocation", 2025).
    Exact,
}

/// The `free_count` from which consecutive high-order frees drain a
/// pageset, `free_high` (`PCPALLOC_FREE_HIGH_THRESHOLD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FreeHighThreshold {
    /// `batch`, as Linux 6.7.
    Batch,
    /// `5 × batch`: Nikhil Dhama's second version of the fix.
    FiveBatch,
    /// `batch + high_min / 2`, as merged in Linux 6.16 ("mm: pcp: increase
    /// pcp->free_count threshold to trigger free_high"); the default.
    BatchPlusHalfHighMin,
}

/// How a free block of another migratetype is taken over
/// (`PCPALLOC_STEAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageStealing {
    /// Vlastimil Babka's "page stealing tweaks" (Linux 4.0): split
    /// buddies always go to the requester, unmovable requests take the
    /// whole pageblock. The default.
    Linux4_0,
    /// The rules of Linux 3.19, before them.
    Linux3_19,
}

/// Transparent huge pages for the heap's pageblocks (`PCPALLOC_THP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HugePages {
    /// Never: the heap stays in 4 KiB pages (MADV_NOHUGEPAGE).
    Never,
    /// Always: every block asks for huge pages from the start.
    Always,
    /// Once the heap passes 64 MiB, for the pageblocks of long-lived small
    /// objects, where a 2 MiB page is used and stays so (the default).
    Dense,
}

/// How small objects' slabs are grouped in pageblocks
/// (`PCPALLOC_GROUPING`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grouping {
    /// By lifetime: a size class whose slabs keep coming back empty takes
    /// reclaimable pageblocks, the rest unmovable ones (the default).
    Lifetime,
    /// By mobility alone: every slab unmovable, as the kernel's slabs.
    Mobility,
}

/// What the report at exit looks like (`PCPALLOC_STATS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatsAtExit {
    /// No report (the default).
    Off,
    /// A short summary, then `name value` lines.
    Text,
    /// One JSON object.
    Json,
}

/// Settings for the global allocator. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    values: ConfigValues,
}

macro_rules! set {
    ($self:ident, $name:literal, $v:expr) => {{
        const I: usize = index_of($name);
        $self.values[I] = $v;
        $self
    }};
}

impl Config {
    /// The defaults: no memory limit of our own (only the OS and the
    /// cgroup), a one-second tick run from the allocator's own calls (no
    /// thread), per-CPU pagesets, every heuristic, no report at exit.
    pub const fn new() -> Config {
        Config {
            values: CONFIG_UNSET,
        }
    }

    /// `PCPALLOC_MEMORY_LIMIT`: the most bytes the heap may hold resident
    /// (at least 4 MiB); past it, after reclaiming what is cached,
    /// allocations fail (`malloc` returns NULL with ENOMEM, a Rust
    /// allocation aborts after one line saying so). 0: no limit (the
    /// default).
    pub const fn memory_limit(mut self, bytes: usize) -> Config {
        let v = if bytes == 0 {
            ConfigValue::Text("none")
        } else {
            ConfigValue::Num(bytes as u64)
        };
        set!(self, "PCPALLOC_MEMORY_LIMIT", v)
    }

    /// `PCPALLOC_DECAY_MS`: the maintenance tick in milliseconds
    /// (10..=60000): how often pagesets decay and idle memory goes back
    /// to the OS.
    pub const fn decay_ms(mut self, ms: u32) -> Config {
        set!(self, "PCPALLOC_DECAY_MS", ConfigValue::Num(ms as u64))
    }

    /// `PCPALLOC_DIRTY_RATIO` (0..=1000): the percent of the pages in use
    /// the heap's resident free memory may reach before a free gives
    /// whole free pageblocks back to the OS at once; 0 leaves it all to
    /// the tick.
    pub const fn dirty_ratio(mut self, percent: u32) -> Config {
        set!(
            self,
            "PCPALLOC_DIRTY_RATIO",
            ConfigValue::Num(percent as u64)
        )
    }

    /// `PCPALLOC_PCP`: where the pagesets live.
    pub const fn pagesets(mut self, p: Pagesets) -> Config {
        let v = match p {
            Pagesets::PerCpu => "cpu",
            Pagesets::PerThread => "thread",
        };
        set!(self, "PCPALLOC_PCP", ConfigValue::Text(v))
    }

    /// `PCPALLOC_PCP_ENTRY`: how a thread enters its CPU's pageset.
    pub const fn pcp_entry(mut self, e: PcpEntry) -> Config {
        let v = match e {
            PcpEntry::Auto => "auto",
            PcpEntry::RseqGlibc => "rseq-glibc",
            PcpEntry::RseqOwn => "rseq-own",
            PcpEntry::Getcpu => "getcpu",
        };
        set!(self, "PCPALLOC_PCP_ENTRY", ConfigValue::Text(v))
    }

    /// `PCPALLOC_BATCH_SCALE_MAX` (0..=6): the largest batch scale factor,
    /// which bounds the pages one refill or drain moves under the zone
    /// lock ("mm: restrict the pcp batch scale factor to avoid too long
    /// latency", Linux 6.7).
    pub const fn batch_scale_max(mut self, scale: u32) -> Config {
        set!(
            self,
            "PCPALLOC_BATCH_SCALE_MAX",
            ConfigValue::Num(scale as u64)
        )
    }

    /// `PCPALLOC_HIGH_FRACTION` (0, or at least 8): a fixed pageset
    /// `high` of managed pages / fraction / CPUs, which turns auto-tuning
    /// off (the kernel's `percpu_pagelist_high_fraction`); 0 auto-tunes.
    pub const fn high_fraction(mut self, fraction: u32) -> Config {
        set!(
            self,
            "PCPALLOC_HIGH_FRACTION",
            ConfigValue::Num(fraction as u64)
        )
    }

    /// `PCPALLOC_HEURISTICS`: which pageset heuristics run.
    pub const fn heuristics(mut self, h: Heuristics) -> Config {
        set!(self, "PCPALLOC_HEURISTICS", ConfigValue::Heuristics(h.0))
    }

    /// `PCPALLOC_FREE_COUNT`: what an allocation does to `free_count`.
    pub const fn free_count(mut self, f: FreeCount) -> Config {
        let v = match f {
            FreeCount::Halve => "halve",
            FreeCount::Exact => "exact",
        };
        set!(self, "PCPALLOC_FREE_COUNT", ConfigValue::Text(v))
    }

    /// `PCPALLOC_FREE_HIGH_THRESHOLD`: the `free_count` from which
    /// consecutive high-order frees drain a pageset.
    pub const fn free_high_threshold(mut self, t: FreeHighThreshold) -> Config {
        let v = match t {
            FreeHighThreshold::Batch => "batch",
            FreeHighThreshold::FiveBatch => "5batch",
            FreeHighThreshold::BatchPlusHalfHighMin => "batch+high_min/2",
        };
        set!(self, "PCPALLOC_FREE_HIGH_THRESHOLD", ConfigValue::Text(v))
    }

    /// `PCPALLOC_BACKGROUND`: whether the maintenance tick runs on a
    /// background thread, started once the heap passes 16 MiB or a second
    /// thread allocates. Off by default: the tick then runs from the
    /// allocator's own calls when it is due, and a free gives back at once
    /// what waits beyond what the caches keep — no thread, so a program
    /// that was single-threaded stays so (`unshare(CLONE_NEWUSER)` and
    /// `setns()` need that). On, freed memory goes back a tick after it
    /// went idle, and the thread collapses dense pageblocks into huge
    /// pages.
    pub const fn background_thread(mut self, on: bool) -> Config {
        let v = if on { "1" } else { "0" };
        set!(self, "PCPALLOC_BACKGROUND", ConfigValue::Text(v))
    }

    /// `PCPALLOC_STATS=1` or `0`: whether to print the report (summary and
    /// counters) at exit.
    pub const fn stats_at_exit(self, on: bool) -> Config {
        self.stats(if on {
            StatsAtExit::Text
        } else {
            StatsAtExit::Off
        })
    }

    /// `PCPALLOC_STATS`: the report at exit, as text or JSON.
    pub const fn stats(mut self, s: StatsAtExit) -> Config {
        let v = match s {
            StatsAtExit::Off => "0",
            StatsAtExit::Text => "1",
            StatsAtExit::Json => "json",
        };
        set!(self, "PCPALLOC_STATS", ConfigValue::Text(v))
    }

    /// `PCPALLOC_STATS_FILE`: write the report at exit to this file (each
    /// `%p` becomes the process id) rather than stderr; turns the report
    /// on.
    pub const fn stats_file(mut self, path: &'static str) -> Config {
        set!(self, "PCPALLOC_STATS_FILE", ConfigValue::Text(path))
    }

    /// `PCPALLOC_TRACE`: record every allocation event to
    /// `prefix.<pid>`, for `pcpalloc-replay`.
    pub const fn trace(mut self, prefix: &'static str) -> Config {
        set!(self, "PCPALLOC_TRACE", ConfigValue::Text(prefix))
    }

    /// `PCPALLOC_STEAL`: the page stealing rules.
    pub const fn steal(mut self, s: PageStealing) -> Config {
        let v = match s {
            PageStealing::Linux4_0 => "seed004",
            PageStealing::Linux3_19 => "baseline",
        };
        set!(self, "PCPALLOC_STEAL", ConfigValue::Text(v))
    }

    /// `PCPALLOC_THP`: transparent huge pages for the heap.
    pub const fn huge_pages(mut self, h: HugePages) -> Config {
        let v = match h {
            HugePages::Never => "never",
            HugePages::Always => "always",
            HugePages::Dense => "dense",
        };
        set!(self, "PCPALLOC_THP", ConfigValue::Text(v))
    }

    /// `PCPALLOC_GROUPING`: how small objects' slabs are grouped.
    pub const fn grouping(mut self, g: Grouping) -> Config {
        let v = match g {
            Grouping::Lifetime => "lifetime",
            Grouping::Mobility => "mobility",
        };
        set!(self, "PCPALLOC_GROUPING", ConfigValue::Text(v))
    }

    /// `PCPALLOC_CGROUP`: the memory cgroup directory whose limit the heap
    /// keeps clear of, instead of the process's own; `"none"` for none.
    pub const fn cgroup(mut self, dir: &'static str) -> Config {
        set!(self, "PCPALLOC_CGROUP", ConfigValue::Text(dir))
    }

    /// `PCPALLOC_PROFILE`: sample allocations for a heap profile, one per
    /// `mean_bytes` allocated on average (at least 4 KiB); 1 for the
    /// default (2 MiB), 0 for none (the default). Profiles go to
    /// [`profile_file`](Self::profile_file) at exit; see the README's heap
    /// profile section.
    pub const fn profile(mut self, mean_bytes: usize) -> Config {
        const I: usize = index_of("PCPALLOC_PROFILE");
        let peaks = matches!(self.values[I], ConfigValue::Profile(_, true));
        self.values[I] = ConfigValue::Profile(mean_bytes as u64, peaks);
        self
    }

    /// `PCPALLOC_PROFILE`'s `,peak`: also write a profile at each new peak
    /// of the live bytes sampled (to the profile file's path with
    /// `.peak`). Needs [`profile`](Self::profile) on.
    pub const fn profile_at_peaks(mut self, on: bool) -> Config {
        const I: usize = index_of("PCPALLOC_PROFILE");
        let mean = match self.values[I] {
            ConfigValue::Profile(mean, _) => mean,
            _ => 1,
        };
        self.values[I] = ConfigValue::Profile(mean, on);
        self
    }

    /// `PCPALLOC_PROFILE_FILE`: where heap profiles go (each `%p` becomes
    /// the process id).
    pub const fn profile_file(mut self, path: &'static str) -> Config {
        set!(self, "PCPALLOC_PROFILE_FILE", ConfigValue::Text(path))
    }

    /// The settings, for the runtime: each value through its setting's
    /// parser.
    pub(crate) fn apply(&self) {
        settings::apply_config(&self.values);
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}
