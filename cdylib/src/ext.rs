//! pcpalloc's own C entry points (declared in `include/pcpalloc.h`): one
//! counter by name, as jemalloc's `mallctl("stats.allocated", ...)` reads
//! one; the whole report through a callback; a setting changed at run
//! time; the version; the calling thread's cache flushed and its byte
//! counters. None allocates.

use core::ffi::{c_char, c_int, c_void, CStr};

use crate::lines::{name_value, Lines};

/// Reads the report's counter `name` (e.g. `"allocated_bytes"`,
/// `"free_high"`, `"pcp_high_max"`, a `PCPALLOC_*` setting with a number)
/// into `*value`. Returns 0, `ENOENT` for a name the report does not have,
/// `EINVAL` for a null argument or a value that is not a number. Costs a
/// stats snapshot (the zone and every pageset locked briefly): not for a
/// hot loop.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `value` is null or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn pcpalloc_stat(name: *const c_char, value: *mut u64) -> c_int {
    if name.is_null() || value.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: name is NUL-terminated (contract).
    let want = unsafe { CStr::from_ptr(name) }.to_bytes();
    let mut found: Option<Option<u64>> = None;
    let mut w = Lines::new(|line| {
        let (n, v) = name_value(line);
        if found.is_none() && n == want {
            found = Some(parse_u64(v));
        }
    });
    let _ = pcpalloc_core::write_report(&mut w);
    w.finish();
    match found {
        None => libc::ENOENT,
        Some(None) => libc::EINVAL,
        Some(Some(v)) => {
            // SAFETY: value is valid for a write (contract).
            unsafe { value.write(v) };
            0
        }
    }
}

fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |acc, &c| {
        let d = c.checked_sub(b'0').filter(|d| *d < 10)?;
        acc.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// The callback of [`pcpalloc_report`]: `len` bytes of report text at
/// `text` (not NUL-terminated).
pub type ReportWriter = unsafe extern "C" fn(ctx: *mut c_void, text: *const c_char, len: usize);

/// Writes the report (what `PCPALLOC_STATS=1` prints at exit) through
/// `write`, in chunks of whole lines. The snapshot is taken before the
/// first call, and no lock is held during one, so `write` may allocate.
/// Returns 0, or `EINVAL` if `write` is null.
///
/// # Safety
/// `write` is null or a function safe to call with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn pcpalloc_report(write: Option<ReportWriter>, ctx: *mut c_void) -> c_int {
    let Some(write) = write else {
        return libc::EINVAL;
    };
    pcpalloc_core::c::report_to(|chunk| {
        // SAFETY: the caller vouches for write and ctx.
        unsafe { write(ctx, chunk.as_ptr().cast(), chunk.len()) }
    });
    0
}

/// Changes setting `name` (`"PCPALLOC_DECAY_MS"` or `"decay_ms"`) to
/// `value` (as the environment would give it) while the program runs.
/// Returns 0; `ENOENT` for an unknown name; `EPERM` for a setting read
/// only at start; `EINVAL` for a null argument or a value the setting's
/// parser refuses; `ENOSYS` if the allocator could not start. Prints
/// nothing.
///
/// # Safety
/// `name` and `value` are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pcpalloc_set(name: *const c_char, value: *const c_char) -> c_int {
    if name.is_null() || value.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: both are NUL-terminated (contract).
    let (name, value) = unsafe { (CStr::from_ptr(name), CStr::from_ptr(value)) };
    set_errno_code(pcpalloc_core::c::set_bytes(
        name.to_bytes(),
        value.to_bytes(),
    ))
}

/// The C return code of a run-time setting change.
pub fn set_errno_code(r: Result<(), pcpalloc_core::SetError>) -> c_int {
    use pcpalloc_core::SetErrorKind;
    match r.map_err(|e| e.kind()) {
        Ok(()) => 0,
        Err(SetErrorKind::Unknown) => libc::ENOENT,
        Err(SetErrorKind::NotAtRunTime) => libc::EPERM,
        Err(SetErrorKind::Invalid(_)) => libc::EINVAL,
        Err(SetErrorKind::NotRunning) => libc::ENOSYS,
    }
}

/// A caller's buffer as a `fmt::Write`: what does not fit (the NUL kept)
/// is dropped and noted.
struct CBuf {
    buf: *mut u8,
    len: usize,
    at: usize,
    cut: bool,
}

impl core::fmt::Write for CBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.len.saturating_sub(1).saturating_sub(self.at);
        let n = s.len().min(room);
        // SAFETY: buf holds len bytes (pcpalloc_get's contract) and
        // at + n < len.
        unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), self.buf.add(self.at), n) };
        self.at += n;
        self.cut |= n < s.len();
        Ok(())
    }
}

/// Writes the value of setting `name` (`"PCPALLOC_DECAY_MS"` or
/// `"decay_ms"`) in force, as the report shows it, into `buf` (`len`
/// bytes, NUL-terminated). Returns 0; `ERANGE` if the value was cut to
/// fit; `ENOENT` for an unknown name; `EINVAL` for a null name, or a null
/// or empty buffer; `ENOSYS` if the allocator could not start. Does not
/// allocate.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `buf` is null or valid for
/// `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn pcpalloc_get(name: *const c_char, buf: *mut c_char, len: usize) -> c_int {
    if name.is_null() || buf.is_null() || len == 0 {
        return libc::EINVAL;
    }
    // SAFETY: name is NUL-terminated (contract).
    let name = unsafe { CStr::from_ptr(name) };
    let mut w = CBuf {
        buf: buf.cast(),
        len,
        at: 0,
        cut: false,
    };
    let r = pcpalloc_core::c::get_bytes(name.to_bytes(), &mut w);
    // SAFETY: at < len (CBuf keeps a byte for the NUL).
    unsafe { *buf.add(w.at) = 0 };
    match set_errno_code(r) {
        0 if w.cut => libc::ERANGE,
        c => c,
    }
}

/// The library's version, e.g. `"0.1.0"` (a static string).
#[no_mangle]
pub extern "C" fn pcpalloc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Gives back what the calling thread caches (free objects on its bins,
/// cached large blocks, parked empty slabs) and collects what other
/// threads freed of its objects; the thread keeps its heap.
#[no_mangle]
pub extern "C" fn pcpalloc_thread_flush() {
    pcpalloc_core::thread_flush();
}

/// The calling thread's byte counters (see `pcpalloc::stats::ThreadStats`).
#[repr(C)]
pub struct ThreadStats {
    /// Bytes taken for the thread to hand out.
    pub allocated: u64,
    /// Bytes the thread gave back.
    pub deallocated: u64,
    /// Bytes of free objects waiting on the thread's bins.
    pub cached: u64,
}

/// Fills `*out` with the calling thread's byte counters. Returns 0, or
/// `EINVAL` for a null `out`.
///
/// # Safety
/// `out` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pcpalloc_thread_stats(out: *mut ThreadStats) -> c_int {
    if out.is_null() {
        return libc::EINVAL;
    }
    let t = pcpalloc_core::thread_stats();
    // SAFETY: out is valid for a write (contract).
    unsafe {
        out.write(ThreadStats {
            allocated: t.allocated,
            deallocated: t.deallocated,
            cached: t.cached,
        })
    };
    0
}

/// Writes the heap profile now (`PCPALLOC_PROFILE`): to `path` (each `%p`
/// becomes the process id), or for NULL to the `PCPALLOC_PROFILE_FILE`
/// path followed by `.1`, `.2`... Returns 0 or an errno (of the file's
/// creation, EIO for a failed write). Does not allocate.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pcpalloc_profile_dump(path: *const c_char) -> c_int {
    let path = if path.is_null() {
        None
    } else {
        // SAFETY: path is NUL-terminated (contract).
        Some(unsafe { CStr::from_ptr(path) }.to_bytes())
    };
    pcpalloc_core::c::profile_dump(path)
}
