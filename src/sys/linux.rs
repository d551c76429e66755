//! Linux backend of the platform contract (see `sys/mod.rs`).

use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::geometry::PAGE_SIZE;

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

/// `membarrier(2)` with `cmd`, `flags` and `cpu_id`; errno is left as it
/// was. True when the kernel took it.
pub fn membarrier(cmd: libc::c_long, flags: libc::c_long, cpu: libc::c_long) -> bool {
    let _keep = KeepErrno::new();
    // SAFETY: membarrier reads no memory of ours; a refusal is its result.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, flags, cpu) == 0 }
}

/// Keeps errno as it was when made, whatever the calls in its scope do:
/// no function of the platform contract changes errno.
pub(super) struct KeepErrno(i32);

impl KeepErrno {
    #[inline]
    pub(super) fn new() -> KeepErrno {
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

/// Reserves `lead + len` bytes of address space, inaccessible as
/// [`reserve`]'s, placed so that the address `lead` bytes in is aligned to
/// `align` (a power of two ≥ page size); returns the start. `None` if the
/// OS refuses: it needs `align` bytes more for a moment, trimmed at once.
pub fn reserve_offset(lead: usize, len: usize, align: usize) -> Option<*mut u8> {
    if injected_failure() {
        return None;
    }
    let _e = KeepErrno::new();
    let keep = lead.checked_add(len)?;
    let span = keep.checked_add(align)?;
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
    let first = p as usize;
    let start = ((first + lead).next_multiple_of(align)) - lead;
    let head = start - first;
    let tail = span - head - keep;
    // SAFETY: both trimmed ranges lie inside the mapping just made and are
    // not part of the range we keep.
    unsafe {
        if head > 0 {
            libc::munmap(p, head);
        }
        if tail > 0 {
            libc::munmap((start + keep) as *mut libc::c_void, tail);
        }
    }
    Some(start as *mut u8)
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

/// Why [`map_at`] mapped nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapAtError {
    /// Some of the range is mapped already (by someone else).
    Taken,
    /// The OS refused the memory (out of memory or address space, or over
    /// a locked-memory limit).
    Refused,
}

/// Maps `len` fresh bytes exactly at `p` — read-write (zeroed), or
/// inaccessible (a reservation, as [`reserve`]'s) — failing, rather than
/// replacing anything, if any of the range is already mapped; says which
/// way it failed.
pub fn map_at(p: *mut u8, len: usize, accessible: bool) -> Result<(), MapAtError> {
    if injected_failure() {
        return Err(MapAtError::Refused);
    }
    let _e = KeepErrno::new();
    let prot = if accessible {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; on a
    // kernel that ignores the flag the hint may be moved, which we check.
    let r = unsafe {
        libc::mmap(
            p.cast(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return Err(if errno() == libc::EEXIST {
            MapAtError::Taken
        } else {
            MapAtError::Refused
        });
    }
    if r.cast::<u8>() != p {
        // SAFETY: r is the mapping just made, not the range we asked for.
        unsafe { libc::munmap(r, len) };
        return Err(MapAtError::Taken);
    }
    Ok(())
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

/// Moves the mapping `[from, from+old_len)` to `to`, resized to `new_len`
/// bytes, replacing whatever was mapped at `[to, to+new_len)` (mremap with
/// MREMAP_FIXED): no copy, the page tables move, and the pages past
/// `old_len` are fresh and read as zero. False on failure (nothing moved).
pub fn move_mapping(from: *mut u8, old_len: usize, to: *mut u8, new_len: usize) -> bool {
    if injected_failure() {
        return false;
    }
    let _e = KeepErrno::new();
    // SAFETY: the source is a whole mapping of ours that the caller moves,
    // the target a reservation of ours (contract).
    let q = unsafe {
        libc::mremap(
            from.cast(),
            old_len,
            new_len,
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

/// Ranges one [`release_many`] system call takes.
const RELEASE_BATCH: usize = 64;
/// `process_madvise` refused the calling process's pidfd, or the advice
/// (before Linux 6.13/6.15): one madvise a range from then on.
static NO_BATCHED_RELEASE: AtomicBool = AtomicBool::new(false);
/// The pidfd that names the calling process (`PIDFD_SELF`, Linux 6.15):
/// unlike a pidfd opened once, it still names the caller after a fork.
const PIDFD_SELF: libc::c_int = -10000;

/// Gives the physical memory behind each of `ranges` (address, length)
/// back to the OS, as [`release`] does one: up to [`RELEASE_BATCH`] a
/// system call (`process_madvise` on the calling process), which also
/// flushes the other CPUs' TLBs once for all of them rather than once a
/// range — a madvise of a few resident pages costs a cross-CPU interrupt
/// while another thread runs; where the kernel refuses that, one madvise
/// a range. Returns how many of the ranges, from the first, were
/// released.
pub fn release_many(ranges: &[(usize, usize)]) -> usize {
    let _e = KeepErrno::new();
    let mut done = 0;
    while done < ranges.len() && !NO_BATCHED_RELEASE.load(Relaxed) {
        let chunk = &ranges[done..(done + RELEASE_BATCH).min(ranges.len())];
        let mut iov = [libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; RELEASE_BATCH];
        let mut total = 0;
        for (v, &(a, len)) in iov.iter_mut().zip(chunk) {
            v.iov_base = a as *mut libc::c_void;
            v.iov_len = len;
            total += len;
        }
        // SAFETY: the iovecs describe ranges that are ours and hold no
        // live data (contract); the kernel only reads the array.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                PIDFD_SELF,
                iov.as_ptr(),
                chunk.len(),
                libc::MADV_DONTNEED,
                0,
            )
        };
        if r < 0 {
            NO_BATCHED_RELEASE.store(true, Relaxed);
            break;
        }
        // The kernel advises the ranges in order and stops at the first
        // it cannot: count the whole ones, and go on after them.
        let mut advised = r as usize;
        let mut whole = 0;
        for &(_, len) in chunk {
            if advised < len {
                break;
            }
            advised -= len;
            whole += 1;
        }
        done += whole;
        if (r as usize) < total {
            // A range the batch stopped at: madvise says why, or does it.
            if !release(ranges[done].0 as *mut u8, ranges[done].1) {
                return done;
            }
            done += 1;
        }
    }
    for &(a, len) in &ranges[done..] {
        if !release(a as *mut u8, len) {
            return done;
        }
        done += 1;
    }
    done
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
/// small stack buffer (the report runs on small stacks too). Ranges that
/// are not mapped count as not resident.
pub fn resident_pages(p: *const u8, len: usize) -> usize {
    const CHUNK_PAGES: usize = 512;
    const HOLE_PAGES: usize = 16;
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
        } else {
            // A hole in the range (a section maps its descriptors 16
            // pages at a time): count it piece by piece.
            for q in (a..a + pages * PAGE_SIZE).step_by(HOLE_PAGES * PAGE_SIZE) {
                let k = HOLE_PAGES.min((a + pages * PAGE_SIZE - q) / PAGE_SIZE);
                // SAFETY: as above, for a piece of the range.
                let r = unsafe {
                    libc::mincore(q as *mut libc::c_void, k * PAGE_SIZE, vec.as_mut_ptr())
                };
                if r == 0 {
                    n += vec[..k].iter().filter(|&&v| v & 1 != 0).count();
                }
            }
        }
        a += pages * PAGE_SIZE;
    }
    n
}

/// Which pages of `[p, p + out.len() pages)` are resident now (mincore):
/// bit 0 of each byte of `out`, one byte a page. Returns how many are, or
/// `None` if the kernel could not tell (the range is not mapped).
pub fn resident_map(p: *const u8, out: &mut [u8]) -> Option<usize> {
    let _e = KeepErrno::new();
    // SAFETY: out has one byte per page of the range; mincore only reads
    // the page tables of our own address range.
    let r = unsafe {
        libc::mincore(
            p as *mut libc::c_void,
            out.len() * PAGE_SIZE,
            out.as_mut_ptr(),
        )
    };
    (r == 0).then(|| out.iter().filter(|&&v| v & 1 != 0).count())
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

#[cfg(test)]
mod tests {
    use super::*;

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
