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
//! The settings take effect at the allocator's first allocation. The
//! environment (`PCPALLOC_*`, see the README's table) overrides them, so a
//! program built with one configuration can still be tuned without a
//! rebuild; a setuid or setgid program reads no environment.

use crate::page_alloc::knobs::Heuristics as Bits;
use crate::runtime::settings::{self, PcpMode, Preset};

/// Where the per-CPU page caches (pagesets) live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pagesets {
    /// One per CPU, as the kernel's (the default).
    PerCpu,
    /// One per thread, drained when the thread exits.
    PerThread,
}

/// Which of the kernel's pageset heuristics run: the nine patches of the
/// PCP auto-tuning series merged in Linux 6.7 (Huang Ying, 2023).
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

/// Settings for the global allocator. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    preset: Preset,
}

impl Config {
    /// The defaults: the memory limit of the cgroup (else the machine's
    /// memory), a one-second tick, per-CPU pagesets, every heuristic, no
    /// report at exit, a background tick thread.
    pub const fn new() -> Config {
        Config {
            preset: Preset::DEFAULT,
        }
    }

    /// The most bytes the heap may map (at least 4 MiB); past it,
    /// allocations fail (`malloc` returns NULL with ENOMEM). 0 keeps the
    /// default.
    pub const fn memory_limit(mut self, bytes: usize) -> Config {
        self.preset.memory_limit = bytes;
        self
    }

    /// The maintenance tick in milliseconds (10..=60000): how often
    /// pagesets decay and idle memory goes back to the OS.
    pub const fn decay_ms(mut self, ms: u32) -> Config {
        self.preset.decay_ms = ms;
        self
    }

    /// Where the pagesets live.
    pub const fn pagesets(mut self, p: Pagesets) -> Config {
        self.preset.pcp_mode = match p {
            Pagesets::PerCpu => PcpMode::Cpu,
            Pagesets::PerThread => PcpMode::Thread,
        };
        self
    }

    /// Which pageset heuristics run.
    pub const fn heuristics(mut self, h: Heuristics) -> Config {
        self.preset.heuristics = Bits(h.0);
        self
    }

    /// Whether to print the stats report to stderr at exit.
    pub const fn stats_at_exit(mut self, on: bool) -> Config {
        self.preset.stats_at_exit = on;
        self
    }

    /// Whether the maintenance tick runs on a background thread (else on
    /// allocation slow paths).
    pub const fn background_thread(mut self, on: bool) -> Config {
        self.preset.background = on;
        self
    }

    /// The settings, for the runtime.
    pub(crate) fn apply(&self) {
        settings::apply_preset(&self.preset);
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}
