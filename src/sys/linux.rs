//! Linux backend of the platform contract (see `sys/mod.rs`).

use core::fmt::Write;
use core::ptr;

use crate::geometry::PAGE_SIZE;
use crate::util::{buf::FixedBuf, parse_size, parse_u64};

use super::inject::injected_failure;

/// The calling thread's errno.
#[inline]
pub fn errno() -> i32 {
    // SAFETY: errno's location is valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's errno.
#[inline]
pub fn set_errno(e: i32) {
    // SAFETY: errno's location is valid for the calling thread.
    unsafe { *libc::__errno_location() = e };
}

/// Keeps errno as it was when made, whatever the calls in its scope do:
/// no function of the platform contract changes errno.
struct KeepErrno(i32);

impl KeepErrno {
    #[inline]
    fn new() -> KeepErrno {
        KeepErrno(errno())
    }
}

impl Drop for KeepErrno {
    #[inline]
    fn drop(&mut self) {
        set_errno(self.0);
    }
}

/// The OS page size in bytes.
pub fn page_size() -> usize {
    let _e = KeepErrno::new();
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v <= 0 {
        PAGE_SIZE
    } else {
        v as usize
    }
}

/// Reserves `len` bytes of address space aligned to `align` (a power of two
/// ≥ page size), inaccessible until [`commit`]ted. `None` if the OS refuses.
///
/// The reservation is PROT_NONE and private, which the kernel's overcommit
/// accounting does not count; [`commit`] (mprotect to read-write) is what
/// it counts and may refuse — exactly as it refuses glibc's mmap of a
/// block larger than the machine can back (heuristic overcommit) or past
/// the commit limit (strict overcommit). No MAP_NORESERVE anywhere: that
/// would skip the check, and a program asking for 100 GiB on a 16 GiB
/// machine would get it and be killed when it writes.
pub fn reserve(len: usize, align: usize) -> Option<*mut u8> {
    if injected_failure() {
        return None;
    }
    let _e = KeepErrno::new();
    let span = len.checked_add(align)?;
    // SAFETY: an anonymous PROT_NONE mapping at an address of the kernel's
    // choosing touches no existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let aligned = (start + align - 1) & !(align - 1);
    let head = aligned - start;
    let tail = span - head - len;
    // SAFETY: both trimmed ranges lie inside the mapping just made and are
    // not part of the range we keep.
    unsafe {
        if head > 0 {
            libc::munmap(p, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    Some(aligned as *mut u8)
}

/// Maps `len` fresh read-write bytes exactly at `p`, failing (rather than
/// replacing anything) if any of the range is already mapped. Reads as zero.
pub fn map_fixed(p: *mut u8, len: usize) -> bool {
    if injected_failure() {
        return false;
    }
    let _e = KeepErrno::new();
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; on a
    // kernel that ignores the flag the hint may be moved, which we check.
    let r = unsafe {
        libc::mmap(
            p.cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return false;
    }
    if r.cast::<u8>() != p {
        // SAFETY: r is the mapping just made, not the range we asked for.
        unsafe { libc::munmap(r, len) };
        return false;
    }
    true
}

/// Makes `[p, p+len)` of a reservation readable and writable. The memory
/// reads as zero until written.
pub fn commit(p: *mut u8, len: usize) -> bool {
    if injected_failure() {
        return false;
    }
    let _e = KeepErrno::new();
    // SAFETY: the range is part of a reservation we own (contract).
    unsafe { libc::mprotect(p.cast(), len, libc::PROT_READ | libc::PROT_WRITE) == 0 }
}

/// Maps `len` fresh zeroed read-write bytes anywhere. `None` on failure.
pub fn map(len: usize) -> Option<*mut u8> {
    if injected_failure() {
        return None;
    }
    let _e = KeepErrno::new();
    // SAFETY: an anonymous mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        None
    } else {
        Some(p.cast())
    }
}

/// Unmaps `[p, p+len)`.
pub fn unmap(p: *mut u8, len: usize) {
    let _e = KeepErrno::new();
    // SAFETY: the range was mapped by us and nobody uses it any more
    // (contract).
    unsafe {
        libc::munmap(p.cast(), len);
    }
}

/// Grows or shrinks the mapping at `p` from `old` to `new` bytes without
/// moving it (mremap without MREMAP_MAYMOVE). False if the address space
/// after it is taken (the mapping is then untouched).
pub fn resize_in_place(p: *mut u8, old: usize, new: usize) -> bool {
    if injected_failure() {
        return false;
    }
    let _e = KeepErrno::new();
    // SAFETY: p/old describe a whole mapping of ours (contract); without
    // MAYMOVE the kernel either resizes it where it is or fails.
    let q = unsafe { libc::mremap(p.cast(), old, new, 0) };
    q != libc::MAP_FAILED
}

/// Moves the pages of `[from, from+len)` to `to`, replacing whatever was
/// mapped at `[to, to+len)` (mremap with MREMAP_FIXED): no copy, the page
/// tables move. False on failure (nothing moved).
pub fn move_pages(from: *mut u8, len: usize, to: *mut u8) -> bool {
    if injected_failure() {
        return false;
    }
    let _e = KeepErrno::new();
    // SAFETY: both ranges are whole mappings of ours (contract): the
    // source is a live block the caller moves, the target fresh memory.
    let q = unsafe {
        libc::mremap(
            from.cast(),
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to.cast::<libc::c_void>(),
        )
    };
    q == to.cast()
}

/// Gives the physical memory behind `[p, p+len)` back to the OS. The range
/// stays mapped and reads as zero afterwards.
pub fn release(p: *mut u8, len: usize) -> bool {
    let _e = KeepErrno::new();
    // SAFETY: the range is ours and holds no live data (contract).
    unsafe { libc::madvise(p.cast(), len, libc::MADV_DONTNEED) == 0 }
}

/// Asks the kernel for transparent huge pages on `[p, p+len)`
/// (MADV_HUGEPAGE), or to keep them away (MADV_NOHUGEPAGE). A kernel
/// without THP refuses; nothing else changes then.
pub fn advise_huge(p: *mut u8, len: usize, on: bool) {
    let _e = KeepErrno::new();
    let advice = if on {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    };
    // SAFETY: the range is mapped by us; the advice only changes how the
    // kernel backs it.
    unsafe { libc::madvise(p.cast(), len, advice) };
}

/// Asks the kernel to back `[p, p+len)` (huge-page aligned) with huge
/// pages now (MADV_COLLAPSE, Linux 6.1+). False if it cannot.
pub fn collapse(p: *mut u8, len: usize) -> bool {
    const MADV_COLLAPSE: libc::c_int = 25;
    let _e = KeepErrno::new();
    // SAFETY: as in advise_huge; collapse copies the range's pages into a
    // huge page without changing its contents.
    unsafe { libc::madvise(p.cast(), len, MADV_COLLAPSE) == 0 }
}

/// Gives `[p, p+len)` of a reservation back to the OS entirely: its
/// memory and its commit charge go, and the range is inaccessible again
/// (as after [`reserve`]) until [`commit`]ted. False if the OS refused
/// (the range is then unchanged).
pub fn decommit(p: *mut u8, len: usize) -> bool {
    let _e = KeepErrno::new();
    // SAFETY: the range is part of a reservation of ours that holds no
    // live data (contract); MAP_FIXED replaces exactly that range.
    let r = unsafe {
        libc::mmap(
            p.cast(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    r == p.cast()
}

/// Pages of `[p, p+len)` resident in memory now (mincore), read through a
/// stack buffer. Ranges that are not mapped count as not resident.
pub fn resident_pages(p: *const u8, len: usize) -> usize {
    const CHUNK_PAGES: usize = 4096;
    let _e = KeepErrno::new();
    let mut vec = [0u8; CHUNK_PAGES];
    let mut n = 0;
    let mut a = p as usize;
    let end = a + len;
    while a < end {
        let pages = ((end - a) / PAGE_SIZE).min(CHUNK_PAGES);
        if pages == 0 {
            break;
        }
        // SAFETY: vec has room for `pages` bytes; mincore only reads the
        // page tables of our own address range.
        let r =
            unsafe { libc::mincore(a as *mut libc::c_void, pages * PAGE_SIZE, vec.as_mut_ptr()) };
        if r == 0 {
            n += vec[..pages].iter().filter(|&&v| v & 1 != 0).count();
        }
        a += pages * PAGE_SIZE;
    }
    n
}

/// Writes all of `msg` to standard error, ignoring failures.
pub fn write_stderr(msg: &[u8]) {
    write_fd(2, msg);
}

/// Writes all of `msg` to `fd`, ignoring failures (errno is kept).
pub fn write_fd(fd: i32, msg: &[u8]) {
    // SAFETY: errno's location is valid for this thread.
    let saved = unsafe { *libc::__errno_location() };
    write_all(fd, msg);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

fn write_all(fd: i32, msg: &[u8]) {
    let mut rest = msg;
    while !rest.is_empty() {
        // SAFETY: rest is a valid byte slice.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            // Retry only on EINTR; anything else means stderr is gone.
            // SAFETY: errno location is always valid for the calling thread.
            if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// The value of environment variable `name` (NUL-terminated), if set.
/// The slice points into the process environment and lives as long as
/// nobody calls setenv for the same name.
pub fn getenv(name: &[u8]) -> Option<&'static [u8]> {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: name is NUL-terminated; getenv only scans `environ`.
    let p = unsafe { libc::getenv(name.as_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string in the environment.
    let len = unsafe { libc::strlen(p) };
    // SAFETY: as above, len bytes are readable.
    Some(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// Whether this process runs with elevated privileges (setuid/setgid,
/// file capabilities): the kernel's AT_SECURE.
pub fn secure_mode() -> bool {
    let _e = KeepErrno::new();
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Calls `f` on each `NAME=VALUE` entry of the environment (`environ`),
/// without allocating.
pub fn for_each_env(mut f: impl FnMut(&[u8])) {
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: environ is the process's environment: a null-terminated array
    // of NUL-terminated strings; we only read it.
    unsafe {
        let mut e = environ;
        if e.is_null() {
            return;
        }
        while !(*e).is_null() {
            let len = libc::strlen(*e);
            f(core::slice::from_raw_parts((*e).cast::<u8>(), len));
            e = e.add(1);
        }
    }
}

#[inline]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A monotonic clock in nanoseconds.
#[inline]
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// A cheap monotonic clock in nanoseconds with tick (millisecond-ish)
/// resolution: CLOCK_MONOTONIC_COARSE, read from the vDSO.
#[inline]
pub fn coarse_now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// Gives up the CPU for a moment.
#[inline]
pub fn yield_now() {
    let _e = KeepErrno::new();
    // SAFETY: sched_yield has no preconditions.
    unsafe {
        libc::sched_yield();
    }
}

/// The CPU this thread runs on right now (0 if the OS cannot tell).
#[inline]
pub fn current_cpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions (glibc reads it from rseq).
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        0
    } else {
        c as usize
    }
}

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

/// The memory limit of this process's cgroup, if it has one: cgroup v2
/// `memory.max` (its own cgroup or the nearest ancestor that sets one),
/// else cgroup v1 `memory.limit_in_bytes` (a value near 2^63 means none).
pub fn cgroup_limit_bytes() -> Option<u64> {
    cgroup_v2_max().or_else(cgroup_v1_limit)
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

/// The line of /proc/self/cgroup that starts with `prefix`, past it.
fn cgroup_line(prefix: &[u8], f: impl FnOnce(&[u8]) -> Option<u64>) -> Option<u64> {
    let cg = read_file(c"/proc/self/cgroup")?;
    let line = cg
        .as_bytes()
        .split(|&c| c == b'\n')
        .find(|l| l.starts_with(prefix))?;
    f(line[prefix.len()..].trim_ascii())
}

fn cgroup_v2_max() -> Option<u64> {
    // "0::/some/path" on a cgroup v2 system; walk up to the root, since a
    // limit set on a parent binds its children too.
    cgroup_line(b"0::", |rel| {
        let mut rel = rel;
        let mut best: Option<u64> = None;
        loop {
            let mut path = FixedBuf::<512>::new();
            path.push_bytes(b"/sys/fs/cgroup");
            if rel != b"/" {
                path.push_bytes(rel);
            }
            path.push_bytes(b"/memory.max");
            if path.truncated {
                return best;
            }
            // "max" means no limit at this level.
            if let Some(v) = path
                .as_cstr()
                .and_then(read_file)
                .and_then(|v| parse_u64(v.as_bytes()))
            {
                best = Some(best.map_or(v, |b| b.min(v)));
            }
            match rel.iter().rposition(|&c| c == b'/') {
                Some(0) | None => {
                    if rel == b"/" || rel.is_empty() {
                        return best;
                    }
                    rel = b"/";
                }
                Some(i) => rel = &rel[..i],
            }
        }
    })
}

fn cgroup_v1_limit() -> Option<u64> {
    // "N:memory:/path" (the controller list may name several).
    let cg = read_file(c"/proc/self/cgroup")?;
    let rel = cg.as_bytes().split(|&c| c == b'\n').find_map(|l| {
        let mut parts = l.splitn(3, |&c| c == b':');
        let _id = parts.next()?;
        let ctrls = parts.next()?;
        let path = parts.next()?;
        ctrls
            .split(|&c| c == b',')
            .any(|c| c == b"memory")
            .then_some(path)
    })?;
    let rel = rel.trim_ascii();
    let mut path = FixedBuf::<512>::new();
    path.push_bytes(b"/sys/fs/cgroup/memory");
    if rel != b"/" {
        path.push_bytes(rel);
    }
    path.push_bytes(b"/memory.limit_in_bytes");
    if path.truncated {
        return None;
    }
    let v = parse_u64(read_file(path.as_cstr()?)?.as_bytes())?;
    // "No limit" reads as PAGE_COUNTER_MAX pages, about 2^63 bytes.
    (v < 1 << 62).then_some(v)
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
        if let Some(l) = cgroup_limit_bytes() {
            assert!(l > 0);
        }
        // The cache slice may be missing in odd containers; when present it
        // must be a sane size.
        if let Some(s) = llc_slice_bytes(0) {
            assert!(s >= 4096, "{s}");
        }
    }

    #[test]
    fn reserve_is_aligned_and_commits() {
        let align = 1 << 22;
        let p = reserve(1 << 22, align).unwrap();
        assert_eq!(p as usize % align, 0);
        assert!(commit(p, 8192));
        // SAFETY: the first two pages were committed just above.
        unsafe {
            p.write(7);
            assert_eq!(*p, 7);
        }
        assert!(release(p, 4096));
        // SAFETY: still committed; released memory reads as zero.
        unsafe { assert_eq!(*p, 0) };
        unmap(p, 1 << 22);
    }
}
