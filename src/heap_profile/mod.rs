//! The heap profile (`PCPALLOC_PROFILE`): who holds the memory. One
//! allocation per `mean` bytes allocated on average is sampled, at random
//! (`sampler.rs`); its call stack is taken (`unwind.rs`, through the rule
//! cache of `cfi.rs`) and counted with the bytes its sample stands for
//! under that stack (`table.rs`), live until the block is freed. A profile is the table written in pprof's
//! format with the process's mappings (`dump.rs`, `pprof.rs`, `maps.rs`),
//! at exit — the sampled blocks still live then are the leak report — on
//! demand, and at each new peak if asked. `pcpalloc-prof` (the workspace's
//! `prof/` crate) symbolises one and draws its flame graph.
//!
//! The design is tcmalloc's (sampled allocations, each weighted by the
//! bytes it stands for) with no cost when off: the fast paths keep their
//! instructions (see `heap/bin.rs` for how a bin's pops are bounded while
//! sampling), the runtime's hooks (`runtime/sampled.rs`) sit on slow
//! paths, and a sampled small object's slab is marked while it holds the
//! sample, so that its frees take the slow path, which finds the sample's
//! record in the slab (`slab/marks.rs`); a sampled page-granular block
//! keeps its record in its descriptor.
//!
//! This module holds what every thread reads: whether to sample and at
//! which rate, and the setting's syntax.

pub(crate) mod cfi;
pub(crate) mod dump;
pub(crate) mod maps;
pub(crate) mod pprof;
pub(crate) mod sample_stack;
pub(crate) mod sampler;
pub(crate) mod table;
pub(crate) mod unwind;

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

/// Where profiles go when `PCPALLOC_PROFILE_FILE` is not set.
pub(crate) const DEFAULT_FILE: &str = "pcpalloc.%p.pb";

pub use sampler::{weight, Rate, Sampler};
pub use table::{Record, TABLE};

/// The mean bytes between samples `PCPALLOC_PROFILE=1` asks for:
/// tcmalloc's default, made to be left on (jemalloc's is 512 KiB: the
/// published programs ran 2.2–3.2% slower at it in geometric mean,
/// 1.1–1.9% at this one while sampled small objects went to page blocks,
/// 0.6% since they stay in their slabs; docs/heap-profile.md).
pub(crate) const DEFAULT_MEAN: u64 = 2 << 20;
/// The least mean a setting may ask for (every allocation of 4 KiB or more
/// would be sampled below it).
pub(crate) const MIN_MEAN: u64 = 4 << 10;
/// The most.
pub(crate) const MAX_MEAN: u64 = 1 << 40;

/// Mean bytes between samples; 0 while not sampling.
static MEAN: AtomicU64 = AtomicU64::new(0);
/// Moves at each change of [`MEAN`].
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// Dump at each new peak of live sampled bytes.
static AT_PEAKS: AtomicBool = AtomicBool::new(false);

/// Whether allocations are sampled.
#[inline]
pub(crate) fn sampling() -> bool {
    MEAN.load(Relaxed) != 0
}

/// The rate every thread follows.
#[inline]
pub(crate) fn rate() -> Rate {
    Rate {
        mean: MEAN.load(Relaxed),
        generation: GENERATION.load(Relaxed),
    }
}

/// The rate's generation alone (see [`Rate`]): never 0 once sampling
/// was turned on.
#[inline]
pub(crate) fn generation() -> u32 {
    GENERATION.load(Relaxed)
}

/// Whether a profile is written at each new peak.
pub(crate) fn at_peaks() -> bool {
    AT_PEAKS.load(Relaxed)
}

/// What `PCPALLOC_PROFILE` says: the mean bytes between samples (0: off)
/// and whether to dump at peaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Setting {
    /// Mean bytes between samples; 0 for off.
    pub mean: u64,
    /// Dump at each new peak of live bytes.
    pub peaks: bool,
}

/// Parses `0`, `1`, or a size (the mean bytes between samples), each
/// optionally followed by `,peak`.
pub(crate) fn parse(v: &[u8]) -> Result<Setting, &'static str> {
    let (head, peaks) = match v.iter().position(|&c| c == b',') {
        Some(i) if v[i + 1..].trim_ascii() == b"peak" => (&v[..i], true),
        Some(_) => return Err("only ,peak may follow the rate"),
        None => (v, false),
    };
    let mean = match head.trim_ascii() {
        b"0" | b"off" => 0,
        b"1" | b"on" => DEFAULT_MEAN,
        s => match crate::util::parse_size(s) {
            None => return Err("neither 0, 1 nor a size (the mean bytes between samples)"),
            Some(n) if n < MIN_MEAN => return Err("a mean below 4 KiB between samples"),
            Some(n) if n > MAX_MEAN => return Err("a mean above 1 TiB between samples"),
            Some(n) => n,
        },
    };
    if mean == 0 && peaks {
        return Err("peak dumps need sampling on");
    }
    Ok(Setting { mean, peaks })
}

/// Writes the setting in force as `PCPALLOC_PROFILE` takes it.
pub(crate) fn show(w: &mut dyn Write) -> fmt::Result {
    let mean = MEAN.load(Relaxed);
    if mean == 0 {
        return w.write_str("0");
    }
    write!(w, "{mean}")?;
    if at_peaks() {
        w.write_str(",peak")?;
    }
    Ok(())
}

/// Puts setting `s` in force (the caller makes the bins follow: see
/// `runtime/sampled.rs`).
pub(crate) fn configure(s: Setting) {
    AT_PEAKS.store(s.peaks, Relaxed);
    if MEAN.swap(s.mean, Relaxed) != s.mean {
        let _ = GENERATION.fetch_update(Relaxed, Relaxed, |g| {
            Some(if g >= sampler::GENERATION_MAX {
                1
            } else {
                g + 1
            })
        });
    }
}

/// What the profile holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Samples ever taken.
    pub samples: u64,
    /// Sampled blocks live now.
    pub live_samples: u64,
    /// Bytes the live samples stand for.
    pub live_bytes: u64,
    /// The most `live_bytes` ever was.
    pub peak_bytes: u64,
    /// Distinct stacks.
    pub stacks: u64,
}

/// A snapshot of the profile's totals.
pub(crate) fn summary() -> Summary {
    let mut t = TABLE.lock();
    t.settle();
    Summary {
        samples: t.samples,
        live_samples: t.live_samples,
        live_bytes: t.live_bytes,
        peak_bytes: t.peak_bytes,
        stacks: t.stacks() as u64,
    }
}

/// Counts a sample taken at `frames` that stands for `(bytes, objects)`
/// ([`weight`] of its size at one sample per `mean` bytes); returns its record
/// (null if metadata memory ran out) and whether the live bytes just
/// passed a new peak worth a dump (asked for with `,peak`: an eighth
/// above the last one dumped, and four samples' worth at least).
pub(crate) fn add_sample(
    frames: &[usize],
    (bytes, objects): (u64, u64),
    mean: u64,
) -> (*mut Record, bool) {
    let mut t = TABLE.lock();
    t.settle();
    let r = t.add(frames, bytes, objects);
    let mut peak = false;
    if at_peaks() && t.live_bytes >= 4 * mean && t.live_bytes > t.peak_dumped + t.peak_dumped / 8 {
        t.peak_dumped = t.live_bytes;
        peak = true;
    }
    (r, peak)
}

/// The block of record `r` was freed: its weight leaves the live counts
/// when the table's lock is next taken (a free takes no lock:
/// `table::defer_remove`).
///
/// # Safety
/// `r` is a live record [`add_sample`] returned, not removed since.
pub(crate) unsafe fn remove_sample(r: *mut Record) {
    // SAFETY: forwarded contract.
    unsafe { table::defer_remove(r) }
}

/// Writes the profile to `fd` (see `dump.rs`); true if every write
/// succeeded.
pub(crate) fn write_to(fd: i32, comment: &[u8], time_ns: u64) -> bool {
    let mut t = TABLE.lock();
    t.settle();
    let h = dump::Header {
        mean: MEAN.load(Relaxed).max(1),
        time_ns,
        comment,
    };
    dump::write_profile(fd, &t, &h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_setting() {
        let on = |mean, peaks| Ok(Setting { mean, peaks });
        assert_eq!(parse(b"0"), on(0, false));
        // `1` is the documented default, tcmalloc's 2 MiB (README).
        assert_eq!(parse(b"1"), on(2 << 20, false));
        assert_eq!(parse(b"512K"), on(512 << 10, false));
        assert_eq!(parse(b"64K,peak"), on(64 << 10, true));
        assert_eq!(parse(b"1, peak"), on(DEFAULT_MEAN, true));
        assert!(parse(b"1K").is_err());
        assert!(parse(b"0,peak").is_err());
        assert!(parse(b"1,peaks").is_err());
        assert!(parse(b"x").is_err());
    }
}
