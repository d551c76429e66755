//! What a running program can ask of the allocator beyond malloc: change
//! a setting (`pcpalloc_set`, `pcpalloc::set`, `mallopt`) and read one
//! (`pcpalloc_get`, `pcpalloc::get`).
//!
//! A failed allocation prints nothing: the allocator cannot tell a
//! failure the program handles (`try_reserve`) from one it dies of (Rust's
//! `handle_alloc_error` prints its own line), and a handled failure is a
//! normal event. The counters say what failed (`alloc_fail`,
//! `charge_fail`: the memory limit).
//!
//! Only the settings whose readers look at them every time
//! ([`AtRunTime`]) change at run time: the tick period, the page
//! allocator's knobs (heuristics, free_count policy, free_high threshold,
//! batch scale), the memory limit and the report at exit. The others
//! shape what init builds (pagesets per CPU or per thread, the zone's
//! sizes, the background thread, the files opened) and stay.

use core::fmt::Write;
use core::sync::atomic::Ordering::Relaxed;

use crate::page_alloc::zone::NO_LIMIT;
use crate::settings::{self, AtRunTime, SETTINGS};

use super::process::{self, PAGES};
use super::tick;

/// Why a setting was not changed ([`SetError::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetErrorKind {
    /// No setting has this name.
    Unknown,
    /// The setting is read once, at init (e.g. `PCPALLOC_PCP`).
    NotAtRunTime,
    /// The value is refused, for this reason (the environment's).
    Invalid(&'static str),
    /// The allocator could not start (an unsupported page size).
    NotRunning,
}

impl core::fmt::Display for SetErrorKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SetErrorKind::Unknown => f.write_str("not a setting of pcpalloc"),
            SetErrorKind::NotAtRunTime => {
                f.write_str("read once at start, not changeable at run time")
            }
            SetErrorKind::Invalid(why) => f.write_str(why),
            SetErrorKind::NotRunning => f.write_str("the allocator is not running"),
        }
    }
}

/// The longest name a [`SetError`] keeps (a longer unknown name is cut).
const NAME_MAX: usize = 48;

/// A setting that was not changed: which one (its variable's name, or the
/// unknown name as given) and why. Displays as `PCPALLOC_DECAY_MS: below
/// the minimum of 10 ms`. Kept without allocating (the C face maps it to
/// an errno).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SetError {
    kind: SetErrorKind,
    name: [u8; NAME_MAX],
    len: u8,
}

impl SetError {
    /// The error `kind` for the setting `name`.
    pub fn new(name: &str, kind: SetErrorKind) -> SetError {
        let mut e = SetError {
            kind,
            name: [0; NAME_MAX],
            len: 0,
        };
        let mut n = name.len().min(NAME_MAX);
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        e.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        e.len = n as u8;
        e
    }

    /// Why.
    pub fn kind(&self) -> SetErrorKind {
        self.kind
    }

    /// The setting: its variable's name (`PCPALLOC_DECAY_MS`, also when
    /// it was named `decay_ms`), or an unknown name as given.
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..usize::from(self.len)]).unwrap_or("?")
    }
}

impl PartialEq<SetErrorKind> for SetError {
    fn eq(&self, other: &SetErrorKind) -> bool {
        self.kind == *other
    }
}

impl core::fmt::Debug for SetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SetError")
            .field("name", &self.name())
            .field("kind", &self.kind)
            .finish()
    }
}

impl core::fmt::Display for SetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.name(), self.kind)
    }
}

impl std::error::Error for SetError {}

/// Changes setting `name` (`PCPALLOC_DECAY_MS` or `decay_ms`) to `value`,
/// given as the environment would give it, while the program runs. The
/// value goes through the setting's own parser; nothing is printed.
pub(crate) fn set(name: &[u8], value: &[u8]) -> Result<(), SetError> {
    let given = name.trim_ascii();
    let Some(t) = settings::find(given) else {
        let given = core::str::from_utf8(given).unwrap_or("(not UTF-8)");
        return Err(SetError::new(given, SetErrorKind::Unknown));
    };
    let fail = |kind| SetError::new(t.name, kind);
    if t.at_run_time == AtRunTime::Never {
        return Err(fail(SetErrorKind::NotAtRunTime));
    }
    // Initialised first, so the environment, read at init, does not undo
    // the change later.
    if !process::ensure_init() {
        return Err(fail(SetErrorKind::NotRunning));
    }
    // One change at a time, and never in the middle of a tick.
    let _quiet = tick::pause();
    // The base is what the page allocator runs with now (the benchmark
    // may have changed its knobs directly).
    settings::sync_knobs(PAGES.knobs());
    (t.apply)(value.trim_ascii()).map_err(|why| fail(SetErrorKind::Invalid(why)))?;
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

/// Writes the value of setting `name` (`PCPALLOC_DECAY_MS` or `decay_ms`)
/// in force, as the report shows it (`1000`, `none`, `(stderr)`), to `w`;
/// `Unknown` if there is no such setting. Does not allocate.
pub(crate) fn get(name: &[u8], w: &mut dyn Write) -> Result<(), SetError> {
    let given = name.trim_ascii();
    let Some(t) = settings::find(given) else {
        let given = core::str::from_utf8(given).unwrap_or("(not UTF-8)");
        return Err(SetError::new(given, SetErrorKind::Unknown));
    };
    // The environment's values are read at init: the value in force is
    // the one after it.
    if !process::ensure_init() {
        return Err(SetError::new(t.name, SetErrorKind::NotRunning));
    }
    // A value that does not fit the writer is cut; the setting was found.
    let _ = (t.show)(w, &PAGES.knobs());
    Ok(())
}
