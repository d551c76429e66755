//! The settings: one table of `PCPALLOC_*` variables, read once
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

//!
//! `state.rs` holds what the variables set and the table's types, `table.rs`
//! the table, `path.rs` a setting that holds a path; this file reads the
//! environment and a `Config` through the table and writes the settings
//! in force.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::page_alloc::knobs::{write_heuristics, Heuristics, Knobs};
use crate::sys;
use crate::util::{buf::FixedBuf, write_json_string};

mod path;
mod state;
mod table;

pub use state::*;
use table::TABLE;

/// No value set.
pub(crate) const CONFIG_UNSET: ConfigValues = [ConfigValue::Unset; NR_TUNABLES];

/// Which settings a `Config` set (bit i for `TUNABLES[i]`), so a bad
/// environment value says it keeps the `Config`'s.
static CONFIG_SET: AtomicU32 = AtomicU32::new(0);

/// Applies a `Config`'s values (at init, before the environment, which
/// overrides them). Each goes through its setting's parser; a refused one
/// gets one line on stderr, as a bad environment value does, and the
/// default stays.
pub(crate) fn apply_config(values: &ConfigValues) {
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

/// Every `PCPALLOC_*` variable.
pub static TUNABLES: &[Tunable] = &TABLE;

/// The index of the setting `name` in [`TUNABLES`] (a compile-time error
/// in a constant when there is none).
pub(crate) const fn index_of(name: &str) -> usize {
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
pub(crate) fn find(name: &[u8]) -> Option<&'static Tunable> {
    TUNABLES
        .iter()
        .find(|t| t.name.as_bytes() == name || t.config.as_bytes() == name)
}

/// Writes every setting in force as `NAME value` lines (the report's
/// header), with `knobs` the page allocator's.
pub(crate) fn write_settings(w: &mut dyn Write, knobs: &Knobs) -> fmt::Result {
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
pub(crate) fn write_settings_json(w: &mut dyn Write, knobs: &Knobs) -> fmt::Result {
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
pub(crate) fn load_from_env() {
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
