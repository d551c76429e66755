//! A setting that holds a path (`PCPALLOC_STATS_FILE`, `PCPALLOC_TRACE`)
//! in a fixed buffer: no allocation at init.

use core::cell::UnsafeCell;
use core::fmt::{self, Write};

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
    pub(super) const fn new() -> PathSetting {
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
    pub(super) fn set(&self, v: &[u8]) -> Result<(), &'static str> {
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

    pub(super) fn show(&self, w: &mut dyn Write, unset: &str) -> fmt::Result {
        match self.get() {
            Some(c) => w.write_str(c.to_str().unwrap_or("(not UTF-8)")),
            None => w.write_str(unset),
        }
    }
}
