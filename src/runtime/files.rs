//! Files the runtime writes for the program (the report at exit, the
//! trace), named per process so a program that forks gets one per process.

use core::ffi::CStr;
use core::fmt::Write;

use crate::settings::STATS_FILE_MAX;
use crate::util::buf::FixedBuf;

/// Where the process id goes in a file's name.
pub(crate) enum PidIn {
    /// Each `%p` of the path becomes the process id.
    Placeholder,
    /// `.<pid>` is appended to the path.
    Suffix,
}

/// Creates (or truncates) the file `path` names for this process, for
/// writing; `append` opens it `O_APPEND` (one write(2) = one record).
/// Returns the descriptor, or -1. Does not allocate.
pub(crate) fn create_for_this_process(path: &CStr, pid_in: PidIn, append: bool) -> i32 {
    let mut name = FixedBuf::<{ STATS_FILE_MAX + 64 }>::new();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut rest = path.to_bytes();
    match pid_in {
        PidIn::Placeholder => {
            while let Some(i) = rest.windows(2).position(|w| w == b"%p") {
                name.push_bytes(&rest[..i]);
                let _ = write!(name, "{pid}");
                rest = &rest[i + 2..];
            }
            name.push_bytes(rest);
        }
        PidIn::Suffix => {
            name.push_bytes(rest);
            let _ = write!(name, ".{pid}");
        }
    }
    name.push_bytes(b"\0");
    if name.truncated {
        return -1;
    }
    let mut flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
    if append {
        flags |= libc::O_APPEND;
    }
    // SAFETY: name is NUL-terminated; open has no other preconditions.
    unsafe { libc::open(name.as_bytes().as_ptr().cast(), flags, 0o644) }
}
