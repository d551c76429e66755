//! What the machine is, read without allocating: its CPUs (sysfs lists,
//! affinity), the last-level cache slice, MemTotal (the memory cgroup is
//! `memcg.rs`'s), the program's name and the process's huge pages (smaps),
//! through files streamed a line at a time through a small stack buffer
//! (the first allocation may run on a 16 KiB thread stack or a signal
//! handler's 8 KiB alternate stack). Part of the Linux backend
//! of the platform contract (see `sys/mod.rs`); the memory and clock calls
//! are in `linux.rs`.

use core::fmt::Write;

use crate::util::{buf::FixedBuf, parse_size, parse_u64};

use super::linux::{errno, KeepErrno};

/// CPUs that may ever exist (indexes for per-CPU arrays), at least 1.
/// Read from sysfs ourselves: glibc's fallback for this opens a directory,
/// which allocates.
pub fn nr_cpus_possible() -> usize {
    first_line(c"/sys/devices/system/cpu/possible", |l| {
        Some(max_cpu_in_list(l) + 1)
    })
    .filter(|&n| n > 1 || affinity_count() <= 1)
    .unwrap_or_else(|| affinity_count().max(1))
}

/// CPUs online now, at least 1.
pub fn nr_cpus_online() -> usize {
    first_line(c"/sys/devices/system/cpu/online", |l| {
        Some(count_cpu_list(l))
    })
    .filter(|&n| n > 0)
    .unwrap_or_else(|| affinity_count().max(1))
}

fn affinity_count() -> usize {
    let _e = KeepErrno::new();
    // SAFETY: set is a valid out-parameter of the size we pass.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 1;
        }
        libc::CPU_COUNT(&set) as usize
    }
}

/// The highest CPU number in a sysfs cpu list.
fn max_cpu_in_list(s: &[u8]) -> usize {
    let mut max = 0;
    for part in s.trim_ascii().split(|&c| c == b',') {
        for num in part.split(|&c| c == b'-') {
            if let Some(v) = parse_u64(num) {
                max = max.max(v as usize);
            }
        }
    }
    max
}

/// Bytes of a line [`scan_lines`] hands over whole; a longer line is cut
/// to its first `LINE_MAX` bytes. (A sysfs CPU list, a cgroup path or an
/// smaps mapping header fits; the rest of a longer one is not needed.)
const LINE_MAX: usize = 512;

/// Streams the file at `path` through a `LINE_MAX`-byte stack buffer,
/// calling `f` with each line (without its newline; a longer line cut to
/// its first `LINE_MAX` bytes) until `f` returns `Some`. Returns that, or
/// `None` at the end of the file or if it cannot be opened or read. Never
/// inlined, so a caller's frame does not hold the buffer of every file it
/// reads.
#[inline(never)]
pub fn scan_lines<T>(path: &core::ffi::CStr, mut f: impl FnMut(&[u8]) -> Option<T>) -> Option<T> {
    let _e = KeepErrno::new();
    // SAFETY: path is NUL-terminated; O_CLOEXEC keeps the fd out of
    // children.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; LINE_MAX];
    // `skipping`: the buffer's start is the rest of a line already cut.
    let (mut len, mut skipping) = (0usize, false);
    let found = 'read: loop {
        // SAFETY: the destination is the unused tail of buf.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().add(len).cast(), buf.len() - len) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            // The end (or an error): a last line without a newline.
            break if len > 0 && !skipping {
                f(&buf[..len])
            } else {
                None
            };
        }
        len += n as usize;
        let mut start = 0;
        while let Some(nl) = buf[start..len].iter().position(|&c| c == b'\n') {
            if !skipping {
                if let Some(v) = f(&buf[start..start + nl]) {
                    break 'read Some(v);
                }
            }
            skipping = false;
            start += nl + 1;
        }
        if start == 0 && len == buf.len() {
            // A line longer than the buffer: its start now, the rest never.
            if !skipping {
                if let Some(v) = f(&buf[..len]) {
                    break Some(v);
                }
            }
            skipping = true;
            start = len;
        }
        buf.copy_within(start..len, 0);
        len -= start;
    };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    found
}

/// `f` of the first line of the file at `path` (a sysfs or cgroup value).
pub(super) fn first_line<T>(
    path: &core::ffi::CStr,
    mut f: impl FnMut(&[u8]) -> Option<T>,
) -> Option<T> {
    let mut first = true;
    scan_lines(path, |l| {
        if !core::mem::take(&mut first) {
            return None;
        }
        f(l)
    })
}

/// Counts the CPUs in a sysfs cpu list such as `0-3,8,10-11`.
fn count_cpu_list(s: &[u8]) -> usize {
    let mut n = 0;
    for part in s.trim_ascii().split(|&c| c == b',') {
        let mut it = part.splitn(2, |&c| c == b'-');
        let a = it.next().and_then(parse_u64);
        let b = it.next().and_then(parse_u64);
        match (a, b) {
            (Some(a), Some(b)) if b >= a => n += (b - a + 1) as usize,
            (Some(_), None) => n += 1,
            _ => {}
        }
    }
    n
}

/// This CPU's slice of the last-level cache in bytes: the size of the
/// highest-level data or unified cache of `cpu` divided by the CPUs sharing
/// it (the kernel's `per_cpu_data_slice_size`). `None` if sysfs lacks it.
pub fn llc_slice_bytes(cpu: usize) -> Option<u64> {
    let mut best: Option<(u64, u64, usize)> = None; // (level, size, sharers)
    for index in 0..16 {
        let mut path = FixedBuf::<128>::new();
        // The first line of the file `leaf` of this cache, through `f`;
        // None (f's) if the file is missing.
        let mut read =
            |leaf: &str, f: &mut dyn FnMut(&[u8]) -> Option<u64>| -> Option<Option<u64>> {
                path.clear();
                let _ = write!(
                    path,
                    "/sys/devices/system/cpu/cpu{cpu}/cache/index{index}/{leaf}"
                );
                first_line(path.as_cstr()?, |l| Some(f(l)))
            };
        let Some(level) = read("level", &mut parse_u64) else {
            break;
        };
        let Some(level) = level else {
            continue;
        };
        let data = read("type", &mut |l| {
            let kind = l.trim_ascii();
            (kind == b"Data" || kind == b"Unified").then_some(1)
        });
        if data.flatten().is_none() {
            continue;
        }
        let Some(size) = read("size", &mut parse_size).flatten() else {
            continue;
        };
        let sharers = read("shared_cpu_list", &mut |l| Some(count_cpu_list(l) as u64))
            .flatten()
            .unwrap_or(1)
            .max(1) as usize;
        if best.is_none_or(|(l, _, _)| level > l) {
            best = Some((level, size, sharers));
        }
    }
    best.map(|(_, size, sharers)| size / sharers as u64)
}

/// Calls `f` with the program's name: the path it was executed by (the
/// kernel's `AT_EXECFN`, on the initial stack: no copy), else its name
/// from /proc/self/comm, else nothing.
pub fn program_name<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    // SAFETY: getauxval has no preconditions.
    let p = unsafe { libc::getauxval(libc::AT_EXECFN) } as *const core::ffi::c_char;
    if !p.is_null() {
        // SAFETY: AT_EXECFN names a NUL-terminated string on the initial
        // stack, alive for the whole process.
        let path = unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes();
        if !path.is_empty() {
            return f(path);
        }
    }
    let mut comm = FixedBuf::<32>::new();
    first_line(c"/proc/self/comm", |l| {
        comm.push_bytes(l.trim_ascii_end());
        Some(())
    });
    f(comm.as_bytes())
}

/// Total RAM, from /proc/meminfo.
pub fn mem_total_bytes() -> Option<u64> {
    mem_total()
}

fn mem_total() -> Option<u64> {
    scan_lines(c"/proc/meminfo", |l| {
        let rest = l.strip_prefix(b"MemTotal:")?.trim_ascii();
        let digits = rest.split(|&c| c == b' ').next()?;
        Some(parse_u64(digits).and_then(|k| k.checked_mul(1024)))
    })
    .flatten()
}

/// Bytes in transparent huge pages (`AnonHugePages` of `/proc/self/smaps`)
/// over the mappings whose start address `ours` claims. Streams the file
/// a line at a time; 0 when it cannot be read. Costs a walk of every
/// mapping of the process: for reports, not for paths.
pub fn huge_page_bytes(ours: &dyn Fn(usize) -> bool) -> usize {
    const FIELD: &[u8] = b"AnonHugePages:";
    let (mut total, mut counting) = (0usize, false);
    scan_lines::<()>(c"/proc/self/smaps", |line| {
        if line.starts_with(FIELD) {
            if counting {
                total += parse_decimal(&line[FIELD.len()..]) << 10;
            }
        } else if let Some(dash) = line.iter().position(|&c| c == b'-') {
            // A mapping's header, "start-end perms ...": field lines are
            // "Name: value" and have no '-' before a ':'.
            if line[..dash].iter().all(u8::is_ascii_hexdigit) && dash > 0 {
                counting = ours(parse_hex(&line[..dash]));
            }
        }
        None
    });
    total
}

/// The decimal number after any spaces at the start of `s`.
fn parse_decimal(s: &[u8]) -> usize {
    s.iter()
        .skip_while(|&&c| c == b' ')
        .take_while(|c| c.is_ascii_digit())
        .fold(0usize, |v, &c| {
            v.saturating_mul(10).saturating_add(usize::from(c - b'0'))
        })
}

/// The hexadecimal number `s`.
fn parse_hex(s: &[u8]) -> usize {
    s.iter().fold(0usize, |v, &c| {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => c - b'A' + 10,
        };
        (v << 4) | usize::from(d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::page_size;

    #[test]
    fn cpu_lists_count() {
        assert_eq!(count_cpu_list(b"0-3,8,10-11\n"), 7);
        assert_eq!(count_cpu_list(b"0"), 1);
        assert_eq!(count_cpu_list(b""), 0);
        assert_eq!(max_cpu_in_list(b"0-3,8,10-11\n"), 11);
    }

    #[test]
    fn lines_stream_and_long_ones_are_cut() {
        let path = std::env::temp_dir().join(format!("pcpalloc-lines-{}", std::process::id()));
        let long = "a".repeat(LINE_MAX + 100) + "X";
        std::fs::write(&path, format!("short\n{long}\nafter\n\nlast")).unwrap();
        let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let none: Option<()> = scan_lines(&cpath, |l| {
            seen.push(l.to_vec());
            None
        });
        assert_eq!(none, None);
        let want: Vec<&[u8]> = vec![
            b"short",
            &long.as_bytes()[..LINE_MAX],
            b"after",
            b"",
            b"last",
        ];
        assert_eq!(seen, want);
        assert_eq!(
            scan_lines(&cpath, |l| l.starts_with(b"aft").then_some(7)),
            Some(7)
        );
        assert_eq!(first_line(&cpath, |l| Some(l.len())), Some(5));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(first_line(&cpath, |l| Some(l.len())), None);
    }

    #[test]
    fn machine_facts_are_readable() {
        assert_eq!(page_size(), 4096);
        assert!(nr_cpus_possible() >= nr_cpus_online());
        assert!(mem_total_bytes().unwrap() > 1 << 20);
        // The cache slice may be missing in odd containers; when present it
        // must be a sane size.
        if let Some(s) = llc_slice_bytes(0) {
            assert!(s >= 4096, "{s}");
        }
        let name = program_name(|n| n.to_vec());
        assert!(!name.is_empty());
    }
}
