//! What the allocator says on stderr. Fatal: one line naming the problem and the address,
//! then abort — as glibc does for a corrupted heap — instead of carrying on
//! and corrupting it further. No allocation anywhere on this path.

use core::fmt::Write;

use crate::sys;
use crate::util::buf::FixedBuf;

/// Reports `what` (e.g. "free(): invalid pointer") at `addr` and aborts.
#[cold]
#[inline(never)]
pub(crate) fn fatal(what: &str, addr: *const u8) -> ! {
    let mut line = FixedBuf::<160>::new();
    let _ = writeln!(line, "pcpalloc: {what} {addr:p}");
    sys::write_stderr(line.as_bytes());
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}

/// One warning line on stderr (no abort).
#[cold]
pub(crate) fn warn(msg: &str) {
    let mut line = FixedBuf::<256>::new();
    let _ = writeln!(line, "pcpalloc: {msg}");
    sys::write_stderr(line.as_bytes());
}
