//! What the machine is, read without allocating: its CPUs (sysfs lists,
//! affinity), the last-level cache slice, MemTotal (the memory cgroup is
//! `memcg.rs`'s), the program's name and the process's huge pages (smaps),
//! through small files read into fixed buffers. Part of the Linux backend
//! of the platform contract (see `sys/mod.rs`); the memory and clock calls
//! are in `linux.rs`.

use core::fmt::Write;

use crate::util::{buf::FixedBuf, parse_size, parse_u64};

use super::linux::{errno, KeepErrno};

/// CPUs that may ever exist (indexes for per-CPU arrays), at least 1.
/// Read from sysfs ourselves: glibc's fallback for this opens a directory,
/// which allocates.
pub fn nr_cpus_possible() -> usize {
    read_file(c"/sys/devices/system/cpu/possible")
        .map(|f| max_cpu_in_list(f.as_bytes()) + 1)
        .filter(|&n| n > 1 || affinity_count() <= 1)
        .unwrap_or_else(|| affinity_count().max(1))
}

/// CPUs online now, at least 1.
pub fn nr_cpus_online() -> usize {
    read_file(c"/sys/devices/system/cpu/online")
        .map(|f| count_cpu_list(f.as_bytes()))
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

/// A small file read into a fixed buffer.
pub struct FileBuf {
    bytes: [u8; 4096],
    len: usize,
}

impl FileBuf {
    /// The bytes read.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Reads up to 4 KiB of the file at `path`. `None` if it cannot be opened
/// or read.
pub fn read_file(path: &core::ffi::CStr) -> Option<FileBuf> {
    let _e = KeepErrno::new();
    // SAFETY: path is NUL-terminated; O_CLOEXEC keeps the fd out of
    // children.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut fb = FileBuf {
        bytes: [0; 4096],
        len: 0,
    };
    loop {
        let room = fb.bytes.len() - fb.len;
        if room == 0 {
            break;
        }
        // SAFETY: the destination is the unused tail of fb.bytes.
        let n = unsafe { libc::read(fd, fb.bytes.as_mut_ptr().add(fb.len).cast(), room) };
        if n < 0 {
            // SAFETY: errno location is valid for the calling thread.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return None;
        }
        if n == 0 {
            break;
        }
        fb.len += n as usize;
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    Some(fb)
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
        let read = |path: &mut FixedBuf<128>, leaf: &str| -> Option<FileBuf> {
            path.clear();
            let _ = write!(
                path,
                "/sys/devices/system/cpu/cpu{cpu}/cache/index{index}/{leaf}"
            );
            read_file(path.as_cstr()?)
        };
        let Some(level) = read(&mut path, "level") else {
            break;
        };
        let Some(level) = parse_u64(level.as_bytes()) else {
            continue;
        };
        let Some(kind) = read(&mut path, "type") else {
            continue;
        };
        let kind = kind.as_bytes().trim_ascii();
        if kind != b"Data" && kind != b"Unified" {
            continue;
        }
        let Some(size) = read(&mut path, "size").and_then(|s| parse_size(s.as_bytes())) else {
            continue;
        };
        let sharers = read(&mut path, "shared_cpu_list")
            .map(|s| count_cpu_list(s.as_bytes()))
            .unwrap_or(1)
            .max(1);
        if best.is_none_or(|(l, _, _)| level > l) {
            best = Some((level, size, sharers));
        }
    }
    best.map(|(_, size, sharers)| size / sharers as u64)
}

/// Writes the program's name into `out`: the path it was executed by
/// (the kernel's `AT_EXECFN`), else its name from /proc/self/comm.
pub fn program_name<const N: usize>(out: &mut FixedBuf<N>) {
    // SAFETY: getauxval has no preconditions.
    let p = unsafe { libc::getauxval(libc::AT_EXECFN) } as *const core::ffi::c_char;
    if !p.is_null() {
        // SAFETY: AT_EXECFN names a NUL-terminated string on the initial
        // stack, alive for the whole process.
        let path = unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes();
        if !path.is_empty() {
            out.push_bytes(path);
            return;
        }
    }
    if let Some(comm) = read_file(c"/proc/self/comm") {
        out.push_bytes(comm.as_bytes().trim_ascii_end());
    }
}

/// Total RAM, from /proc/meminfo.
pub fn mem_total_bytes() -> Option<u64> {
    mem_total()
}

fn mem_total() -> Option<u64> {
    let m = read_file(c"/proc/meminfo")?;
    let line = m
        .as_bytes()
        .split(|&c| c == b'\n')
        .find(|l| l.starts_with(b"MemTotal:"))?;
    let rest = line[b"MemTotal:".len()..].trim_ascii();
    let digits = rest.split(|&c| c == b' ').next()?;
    parse_u64(digits)?.checked_mul(1024)
}

/// Bytes in transparent huge pages (`AnonHugePages` of `/proc/self/smaps`)
/// over the mappings whose start address `ours` claims. Streams the file
/// through a stack buffer; 0 when it cannot be read. Costs a walk of every
/// mapping of the process: for reports, not for paths.
pub fn huge_page_bytes(ours: &dyn Fn(usize) -> bool) -> usize {
    const FIELD: &[u8] = b"AnonHugePages:";
    let _e = KeepErrno::new();
    // SAFETY: the path is NUL-terminated; O_CLOEXEC keeps the fd out of
    // children.
    let fd = unsafe {
        libc::open(
            c"/proc/self/smaps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return 0;
    }
    let mut buf = [0u8; 4096];
    let (mut len, mut total, mut counting) = (0usize, 0usize, false);
    loop {
        // SAFETY: the destination is the unused tail of buf.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().add(len).cast(), buf.len() - len) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        len += n as usize;
        let mut start = 0;
        while let Some(nl) = buf[start..len].iter().position(|&c| c == b'\n') {
            let line = &buf[start..start + nl];
            if line.starts_with(FIELD) {
                if counting {
                    total += parse_decimal(&line[FIELD.len()..]) << 10;
                }
            } else if let Some(dash) = line.iter().position(|&c| c == b'-') {
                // A mapping's header, "start-end perms ...": field lines
                // are "Name: value" and have no '-' before a ':'.
                if line[..dash].iter().all(u8::is_ascii_hexdigit) && dash > 0 {
                    counting = ours(parse_hex(&line[..dash]));
                }
            }
            start += nl + 1;
        }
        if start == 0 && len == buf.len() {
            start = len; // a line longer than the buffer: skip it
        }
        buf.copy_within(start..len, 0);
        len -= start;
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
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
    fn machine_facts_are_readable() {
        assert_eq!(page_size(), 4096);
        assert!(nr_cpus_possible() >= nr_cpus_online());
        assert!(mem_total_bytes().unwrap() > 1 << 20);
        // The cache slice may be missing in odd containers; when present it
        // must be a sane size.
        if let Some(s) = llc_slice_bytes(0) {
            assert!(s >= 4096, "{s}");
        }
    }
}
