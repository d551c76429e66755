//! What a running program can ask of the allocator beyond malloc: change
//! a setting (`pcpalloc_set`, `pcpalloc::set`, `mallopt`), and say why an
//! allocation failed when Rust is about to abort for it.
//!
//! Only the settings whose readers look at them every time
//! ([`AtRunTime`]) change at run time: the tick period, the page
//! allocator's knobs (heuristics, free_count policy, free_high threshold,
//! batch scale), the memory limit and the report at exit. The others
//! shape what init builds (pagesets per CPU or per thread, the zone's
//! sizes, the background thread, the files opened) and stay.

use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::page_alloc::zone::NO_LIMIT;
use crate::runtime::settings::{self, AtRunTime, SETTINGS};
use crate::sys;
use crate::util::buf::FixedBuf;

use super::process::{self, PAGES};
use super::tick;

/// Why a setting was not changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetError {
    /// No setting has this name.
    Unknown,
    /// The setting is read once, at init (e.g. `PCPALLOC_PCP`).
    NotAtRunTime,
    /// The value is refused, for this reason (the environment's).
    Invalid(&'static str),
    /// The allocator could not start (an unsupported page size).
    NotRunning,
}

impl core::fmt::Display for SetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SetError::Unknown => f.write_str("not a setting of pcpalloc"),
            SetError::NotAtRunTime => f.write_str("read once at start, not changeable at run time"),
            SetError::Invalid(why) => f.write_str(why),
            SetError::NotRunning => f.write_str("the allocator is not running"),
        }
    }
}

/// Changes setting `name` (`PCPALLOC_DECAY_MS` or `decay_ms`) to `value`,
/// given as the environment would give it, while the program runs. The
/// value goes through the setting's own parser; nothing is printed.
pub fn set(name: &[u8], value: &[u8]) -> Result<(), SetError> {
    let t = settings::find(name.trim_ascii()).ok_or(SetError::Unknown)?;
    if t.at_run_time == AtRunTime::Never {
        return Err(SetError::NotAtRunTime);
    }
    // Initialised first, so the environment, read at init, does not undo
    // the change later.
    if !process::ensure_init() {
        return Err(SetError::NotRunning);
    }
    // One change at a time, and never in the middle of a tick.
    let _quiet = tick::pause();
    // The base is what the page allocator runs with now (the benchmark
    // may have changed its knobs directly).
    settings::sync_knobs(PAGES.knobs());
    (t.apply)(value.trim_ascii()).map_err(SetError::Invalid)?;
    match t.at_run_time {
        AtRunTime::Knobs => PAGES.set_knobs(settings::env_knobs()),
        AtRunTime::MemoryLimit => {
            let limit = SETTINGS.memory_limit.load(Relaxed);
            PAGES
                .zone
                .budget
                .set_limit(if limit == 0 { NO_LIMIT } else { limit });
        }
        AtRunTime::Now | AtRunTime::Never => {}
    }
    Ok(())
}

/// Said once per process: a Rust allocation that failed is about to abort
/// the program with only "memory allocation of N bytes failed".
static SAID_WHY: AtomicBool = AtomicBool::new(false);

/// One line on stderr, once per process, saying why an allocation of
/// `size` bytes the Rust global allocator could not serve failed, when
/// the cause is ours to name: the memory limit was reached, or the
/// allocator could not start. (The OS refusing memory says nothing: a
/// `try_reserve` of an absurd size is a normal event.)
#[cold]
pub fn explain_failure(size: usize) {
    let mut line = FixedBuf::<256>::new();
    let _ = write!(line, "pcpalloc: cannot allocate {size} bytes: ");
    if !process::is_ready() {
        let _ = write!(line, "the allocator could not start (see above)");
    } else {
        let b = &PAGES.zone.budget;
        if !b.has_limit() {
            return;
        }
        let _ = write!(
            line,
            "the memory limit (PCPALLOC_MEMORY_LIMIT or Config::memory_limit) of {} bytes is reached ({} held)",
            b.limit(),
            b.used()
        );
    }
    if SAID_WHY.swap(true, Relaxed) {
        return;
    }
    line.push_bytes(b"\n");
    sys::write_stderr(line.as_bytes());
}
