//! The heap profile's hooks on the allocator's slow paths (the profile
//! itself is `crate::heap_profile`): which allocation a sample falls on, the
//! sample taken and served, a sampled block's free, and the files.
//!
//! Small objects: while sampling, a bin hands out only what its refill or
//! the last visit here allowed — pushes give no pop credit
//! (`heap/bin.rs`) — so its pop fails at the allocation a sample falls on
//! and this path sees it. It gives the bin credit for as many objects as
//! the class's countdown allows (all of those on the bin when no sample
//! is near), takes the sample when the countdown is out, and serves the
//! sampled object from the bin like any other, its record in a slot of
//! its slab, which is marked meanwhile so that every free of the slab's
//! objects takes the slow path (`slab/marks.rs`) — free's fast path
//! checks nothing more. (Served as a page-granular block, as before, a
//! sample made a producer/consumer pair on two CPUs run 6–22% slower,
//! whatever the block's source or free: `docs/heap-profile.md`.) A slab
//! with all seven slots taken, or a process that watches every free
//! (tracing, valgrind), gets the sample in a page-granular block still:
//! its free finds the record in the block's descriptor.
//!
//! Blocks above 8 KiB count against one countdown of bytes on their own
//! slow path ([`alloc_big`]); huge blocks likewise.

use core::fmt::Write;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::geometry::PAGE_SIZE;
use crate::heap::Heap;
use crate::heap_profile::{self as profile, sample_stack, unwind, Record};
use crate::large::{self, Caller};
use crate::page::{flags, LargeBlock};
use crate::slab::classes::{CLASS_SIZE, NR_CLASSES};
use crate::slab::{marks, Slab};
use crate::sync::bump;
use crate::sys;
use crate::util::buf::FixedBuf;

use super::files::{self, PidIn};
use super::tls;
use crate::settings::SETTINGS;

/// A seed for a thread's sampler: its heap's address and the clock.
fn seed(h: *const Heap) -> u64 {
    (h as u64).rotate_left(32) ^ sys::now_ns().wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Where a sample's record is kept until its block is freed.
#[derive(Clone, Copy)]
enum Holder {
    /// In the page-granular block's descriptor (`LargeBlock::sample`).
    Block,
    /// In slot `.1` of slab `.0`, which holds the sampled object
    /// (`slab/marks.rs`).
    Slot(*mut Slab, usize),
}

/// What the small slow path does while sampling.
enum Small {
    /// Served from the bin with new credit.
    Served(*mut u8),
    /// The countdown is out: a sample falls on this allocation.
    Sample,
    /// The bin is empty: the plain slow path refills it.
    Refill,
    /// The bin holds too few objects for the countdown (`Bins::low`):
    /// they are set aside, the plain slow path refills the bin, and they
    /// go back on it.
    TopUp,
    /// Inside a sample (the unwinder allocates): not counted.
    Busy,
}

/// The bin of `class` of heap `h` ran out of credit with objects on it
/// and no sample of the class is due: it gets credit for as many as the
/// countdown allows and pops one. Null (nothing done) in every other case,
/// which [`alloc_small`] sorts out — among them every call while not
/// sampling: a sampler draws only while sampling, and the rate's
/// generation moves when sampling stops, so none is ready then.
///
/// # Safety
/// `h` is the calling thread's heap, or the empty heap; `class` is a
/// class (`< NR_CLASSES`, unchecked).
#[inline(always)]
pub(crate) unsafe fn recredit(h: *mut Heap, class: usize) -> *mut u8 {
    // SAFETY: the sampler is only read until it says the heap is a
    // thread's that drew for this rate and is not inside a sample (the
    // empty heap's never drew); this thread owns such a heap.
    unsafe {
        if !(*Heap::sampler(h)).ready(profile::generation()) {
            return core::ptr::null_mut();
        }
        bump(&(*h).profile_slow_paths, 1);
        let mut o = (*h).owned();
        let l = o.local();
        // Null when the countdown is out (a sample is due) or the bin
        // empty; class is a class (the malloc path's).
        l.bins
            .recredit_and_pop(class, l.profile.small_countdown(class))
    }
}

/// The small-object slow path of heap `h` for `class` while sampling;
/// `plain` is the slow path without the profile (it refills the bin if
/// it is empty and pops an object off it), `page_block` allocates a
/// page-granular block of the given size, `give_back` frees an object
/// `plain` returned that the program does not get after all.
///
/// # Safety
/// `h` is the calling thread's heap (not the empty heap).
pub(crate) unsafe fn alloc_small(
    h: *mut Heap,
    class: usize,
    plain: impl FnOnce() -> *mut u8,
    page_block: impl FnOnce(usize) -> *mut u8,
    give_back: impl FnOnce(*mut u8),
) -> *mut u8 {
    let rate = profile::rate();
    if rate.mean == 0 {
        return plain();
    }
    // SAFETY: h is this thread's heap; the handle is dropped before
    // `plain` makes its own.
    let step = unsafe {
        let mut o = (*h).owned();
        let l = o.local();
        if l.profile.busy() {
            Small::Busy
        } else {
            if l.profile.sync(rate, &CLASS_SIZE, || seed(h)) {
                // New countdowns: no bin may hand out more than its own.
                for c in 0..NR_CLASSES {
                    let g = l.profile.grant_small(c, l.bins.credit(c));
                    l.bins.set_credit(c, g);
                }
            }
            let n = l.bins.count(class);
            if l.profile.small_due(class) {
                Small::Sample
            } else if n > 0 && l.bins.low(class, *l.profile.small_countdown(class)) {
                Small::TopUp
            } else if n > 0 {
                // The credit is spent, with objects on the bin still.
                let g = l.profile.grant_small(class, n);
                l.bins.set_credit(class, g);
                Small::Served(l.bins.pop(class))
            } else {
                Small::Refill
            }
        }
    };
    match step {
        Small::Served(p) => p,
        Small::Busy => plain(),
        Small::Refill => {
            let p = plain();
            if !p.is_null() {
                // SAFETY: as above.
                unsafe { refilled(h, class, 1) };
            }
            p
        }
        Small::TopUp => {
            // SAFETY: as above; each handle lives for one statement.
            let (list, n) = unsafe { (*h).owned().local().bins.set_aside(class) };
            let p = plain();
            // SAFETY: as above; the list goes back on the bin it came
            // from, which refilled (a slab's worth at most) or, out of
            // memory, is empty.
            unsafe {
                let mut o = (*h).owned();
                let l = o.local();
                l.bins.put_back(class, list, n);
                if p.is_null() {
                    // Out of memory: the objects set aside serve (the
                    // countdown allows more than their number).
                    let g = l.profile.grant_small(class, n);
                    l.bins.set_credit(class, g);
                    return l.bins.pop(class);
                }
            }
            // SAFETY: as above.
            unsafe { refilled(h, class, 1) };
            p
        }
        Small::Sample => {
            let size = CLASS_SIZE[class];
            // SAFETY: as above.
            let weight = unsafe {
                let mut o = (*h).owned();
                let l = o.local();
                l.profile.sampled_small(class, size, rate.mean);
                l.profile.small_weight(class)
            };
            // The object from the bin, its sample kept in its slab
            // (`slab/marks.rs`) — not while every free is watched (tracing,
            // valgrind), whose path takes no marks.
            if !super::record::every_op_slow() {
                let p = plain();
                if p.is_null() {
                    return p;
                }
                // SAFETY: p is an object of this heap's, just taken from
                // its bin and not yet the program's; h is this thread's heap.
                unsafe {
                    refilled(h, class, 0);
                    if let Some(s) = crate::slab::slab::lookup(p as usize) {
                        if let Some(i) = marks::take_slot(s, p) {
                            record(h, p, weight, rate.mean, Holder::Slot(s, i));
                            if marks::record(s, i) == 0 {
                                // No sample taken after all.
                                marks::release_slot(s, i, p);
                            }
                            return p;
                        }
                    }
                    // Every slot of its slab is taken: the sample goes to a
                    // block of its own, the object back to the bin (or, with
                    // no block, to the program unsampled).
                    let b = sample_in_block(h, size as usize, weight, rate.mean, page_block);
                    if b.is_null() {
                        return p;
                    }
                    give_back(p);
                    return b;
                }
            }
            // SAFETY: as above.
            let b = unsafe { sample_in_block(h, size as usize, weight, rate.mean, page_block) };
            if b.is_null() {
                return plain();
            }
            b
        }
    }
}

/// A page-granular block of `size` bytes from `page_block`, sampled as a
/// small object standing for `weight` at one sample per `mean` bytes;
/// null if there is none.
///
/// # Safety
/// `h` is the calling thread's heap.
unsafe fn sample_in_block(
    h: *mut Heap,
    size: usize,
    weight: (u64, u64),
    mean: u64,
    page_block: impl FnOnce(usize) -> *mut u8,
) -> *mut u8 {
    let b = page_block(size);
    if !b.is_null() {
        // SAFETY: b is a live page-granular block, not yet the program's;
        // h is this thread's heap (contract).
        unsafe { record(h, b, weight, mean, Holder::Block) };
    }
    b
}

/// `plain` refilled the bin of `class` of heap `h` (a refill gives the
/// bin credit of its own) and popped an object off it, which counts `n`
/// against the countdown (none for a sampled object: the countdown was
/// drawn after it); the bin may hand out what the countdown allows.
///
/// # Safety
/// `h` is the calling thread's heap.
unsafe fn refilled(h: *mut Heap, class: usize, n: u32) {
    // SAFETY: forwarded contract.
    unsafe {
        let mut o = (*h).owned();
        let l = o.local();
        l.profile.count_small(class, n);
        let g = l.profile.grant_small(class, l.bins.count(class));
        l.bins.set_credit(class, g);
    }
}

/// An allocation of `size` bytes above the small classes while sampling,
/// in the common case: the thread's countdown is in force and no sample
/// falls in it. Counts it and returns true; false (nothing done) sends
/// the caller to [`alloc_big`] — a sample due, a new rate, a thread inside
/// a sample or without a heap (the empty heap's sampler never drew).
/// Inline on the large path: a few loads and a compare, where the whole
/// path was some 70 instructions a block (kbuild: 38 M for 488 k blocks).
#[inline(always)]
pub(crate) fn big_counted(size: usize) -> bool {
    // SAFETY: the TLS heap is this thread's, or the empty heap, whose
    // sampler is never ready and so never written.
    unsafe { (*Heap::sampler_mut(tls::heap())).count_large_undue(size, profile::generation()) }
}

/// An allocation of `size` bytes above the small classes while sampling:
/// `plain` allocates it; a sample is taken if one falls in it.
pub fn alloc_big(size: usize, plain: impl FnOnce() -> *mut u8) -> *mut u8 {
    let rate = profile::rate();
    let h = tls::current_heap();
    // SAFETY: h is this thread's heap, or the empty heap (left alone).
    let due = unsafe {
        if rate.mean == 0 || (*h).is_empty_heap() {
            false
        } else {
            let mut o = (*h).owned();
            let l = o.local();
            if l.profile.busy() {
                false
            } else {
                if l.profile.sync(rate, &CLASS_SIZE, || seed(h)) {
                    for c in 0..NR_CLASSES {
                        let g = l.profile.grant_small(c, l.bins.credit(c));
                        l.bins.set_credit(c, g);
                    }
                }
                l.profile.count_large(size, rate.mean)
            }
        }
    };
    let p = plain();
    if due && !p.is_null() {
        // SAFETY: p is a live block not yet the program's; h is this
        // thread's heap.
        unsafe {
            record(
                h,
                p,
                profile::weight(size, rate.mean),
                rate.mean,
                Holder::Block,
            )
        };
    }
    p
}

/// The descriptor of page-granular block `p`.
///
/// # Safety
/// `p` is a live large or huge block.
unsafe fn block_of(p: *mut u8) -> *mut LargeBlock {
    match crate::section::lookup(p as usize) {
        Some(d) => d.cast(),
        // SAFETY: p is a live huge block (contract).
        None => unsafe { large::checked_huge(p, Caller::Free) },
    }
}

/// Takes the sample of block `p` for heap `h`'s thread, standing for
/// `weight` (bytes, objects: [`profile::weight`]) at one sample per `mean`
/// bytes: its stack, counted in the profile, the record in the block's
/// descriptor. The work runs on the heap's sample stack
/// (`heap_profile/sample_stack.rs`), whatever stack the allocation came
/// from; without one (valgrind, another architecture, no memory for it),
/// or for a stack only libgcc can walk, on this stack, and not at all on
/// an alternate signal stack.
///
/// # Safety
/// `h` is the calling thread's heap; `p` is a live page-granular block
/// the program does not have yet.
unsafe fn record(h: *mut Heap, p: *mut u8, weight: (u64, u64), mean: u64, to: Holder) {
    // This function's registers, where the walk on the sample stack
    // starts (this frame stays put until it returns).
    let regs = unwind::Regs::here();
    // The unwinder's first use walks its own stack, which a sample stack
    // would end without a way back: it runs here, once a process (the
    // library's constructor runs it when sampling from the start).
    if !unwind::prepared() {
        if on_signal_stack() {
            return;
        }
        unwind::prepare();
    }
    // SAFETY: h is this thread's heap (contract); each handle lives for
    // one statement.
    let top = unsafe {
        let mut o = (*h).owned();
        let l = o.local();
        l.profile.set_busy(true);
        if l.profile.stack_top == 0 && !super::valgrind::on() {
            l.profile.stack_top = sample_stack::map();
        }
        l.profile.stack_top
    };
    let mut stack = unwind::Stack::new();
    let mut done = false;
    // (Never mapped under valgrind: top is 0 there.)
    if top != 0 {
        let mut work = || {
            // SAFETY: regs are this thread's record's, suspended in
            // run_on's call meanwhile.
            if unsafe { unwind::walk_from(regs, &mut stack) } {
                // SAFETY: p is a live block of the caller's (contract).
                unsafe { keep(p, stack.frames(), weight, mean, to) };
                done = true;
            }
        };
        // SAFETY: top is this heap's sample stack, which nothing else of
        // this thread is on (it is busy: no sample nests).
        unsafe { sample_stack::run_on(top, &mut work) };
    }
    if !done && !on_signal_stack() {
        unwind::capture(&mut stack);
        // SAFETY: as above.
        unsafe { keep(p, stack.frames(), weight, mean, to) };
    }
    // SAFETY: as above.
    unsafe { (*h).owned().local().profile.set_busy(false) };
}

/// Counts the sample of block `p` with stack `frames` in the profile and
/// keeps its record in the block's descriptor; writes the peak's profile
/// if the live bytes reached a new peak.
///
/// # Safety
/// `p` is a live page-granular block the program does not have yet.
unsafe fn keep(p: *mut u8, frames: &[usize], weight: (u64, u64), mean: u64, to: Holder) {
    let (r, peak) = profile::add_sample(frames, weight, mean);
    if !r.is_null() {
        // SAFETY: p is a live block of the caller's (contract), or the
        // object of slot i of slab s, filled by this thread.
        unsafe {
            match to {
                Holder::Block => {
                    let b = block_of(p);
                    (*b).sample = r as usize;
                    (*b).flags |= flags::SAMPLED;
                }
                Holder::Slot(s, i) => marks::set_record(s, i, r as usize),
            }
        }
    }
    if peak {
        write_file(Some(b".peak"));
    }
}

/// Whether the thread runs on its alternate signal stack (a handler of
/// `SA_ONSTACK`): a sample is not taken there — such stacks are small (8
/// KiB, half of it the signal frame) and the unwinder needs a few.
fn on_signal_stack() -> bool {
    let mut ss = core::mem::MaybeUninit::<libc::stack_t>::uninit();
    let saved = sys::errno();
    // SAFETY: a null new stack only reads the current one into `ss`.
    let r = unsafe { libc::sigaltstack(core::ptr::null(), ss.as_mut_ptr()) };
    sys::set_errno(saved);
    // SAFETY: sigaltstack filled `ss` when it returned 0.
    r == 0 && unsafe { ss.assume_init() }.ss_flags & libc::SS_ONSTACK != 0
}

/// Sampled block `b` is being freed: its sample leaves the profile.
///
/// # Safety
/// `b` is a live block with `flags::SAMPLED`, which the caller frees.
#[cold]
#[inline(never)]
pub(crate) unsafe fn freed(b: *mut LargeBlock) {
    // SAFETY: the caller owns b; its sample word holds a live record.
    unsafe {
        let r = (*b).sample as *mut Record;
        (*b).flags &= !flags::SAMPLED;
        (*b).sample = 0;
        profile::remove_sample(r);
    }
}

/// The profiles written on demand so far (their names' numbers).
static ON_DEMAND: AtomicU32 = AtomicU32::new(0);

/// Writes the profile to `path` (each `%p` the process id), or, for
/// `None`, to the `PCPALLOC_PROFILE_FILE` path followed by `.1`, `.2`...
/// Returns 0 or an errno.
pub(crate) fn dump(path: Option<&[u8]>) -> i32 {
    if !super::process::ensure_init() {
        return libc::ENOSYS;
    }
    match path {
        Some(p) => write_to_path(p, b""),
        None => {
            let mut suffix = FixedBuf::<16>::new();
            let _ = write!(suffix, ".{}", ON_DEMAND.fetch_add(1, Relaxed) + 1);
            write_to_path(configured_path(), suffix.as_bytes())
        }
    }
}

/// The `PCPALLOC_PROFILE_FILE` path, or the default.
fn configured_path() -> &'static [u8] {
    match SETTINGS.profile_file.get() {
        Some(c) => c.to_bytes(),
        None => profile::DEFAULT_FILE.as_bytes(),
    }
}

/// Writes the profile to the configured path with `suffix`; 0 or errno.
fn write_file(suffix: Option<&[u8]>) -> i32 {
    write_to_path(configured_path(), suffix.unwrap_or(b""))
}

fn write_to_path(path: &[u8], suffix: &[u8]) -> i32 {
    let mut name = FixedBuf::<{ crate::settings::STATS_FILE_MAX + 32 }>::new();
    name.push_bytes(path);
    name.push_bytes(suffix);
    if name.truncated {
        return libc::ENAMETOOLONG;
    }
    let Some(c) = name.as_cstr() else {
        return libc::EINVAL;
    };
    let saved = sys::errno();
    let fd = files::create_for_this_process(c, PidIn::Placeholder, false);
    if fd < 0 {
        let e = sys::errno();
        sys::set_errno(saved);
        return e;
    }
    let mut comment = FixedBuf::<160>::new();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = write!(
        comment,
        "pcpalloc {} heap profile of process {pid}",
        env!("CARGO_PKG_VERSION")
    );
    // SAFETY: a clock read into a valid timespec.
    let now = unsafe {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let ok = profile::write_to(fd, comment.as_bytes(), now);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    sys::set_errno(saved);
    if ok {
        0
    } else {
        libc::EIO
    }
}

/// At the process's exit, if anything was sampled: the profile to its
/// file, and one line on stderr with the leak report's summary — the
/// sampled blocks still live. (A process that allocated too little for a
/// sample — a shell a script runs — writes nothing.)
pub(crate) fn at_exit() {
    let s = profile::summary();
    if s.samples == 0 {
        return;
    }
    let e = write_file(None);
    let mut line = FixedBuf::<{ crate::settings::STATS_FILE_MAX + 256 }>::new();
    let _ = write!(
        line,
        "pcpalloc: heap profile: {} samples; still live at exit: {} sampled blocks standing for ",
        s.samples, s.live_samples
    );
    let _ = crate::util::text::write_bytes(&mut line, s.live_bytes);
    let _ = write!(line, " in {} stacks; ", s.stacks);
    if e == 0 {
        let _ = write!(line, "written to ");
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let mut rest = configured_path();
        while let Some(i) = rest.windows(2).position(|w| w == b"%p") {
            line.push_bytes(&rest[..i]);
            let _ = write!(line, "{pid}");
            rest = &rest[i + 2..];
        }
        line.push_bytes(rest);
    } else {
        let _ = write!(line, "cannot write it (errno {e})");
    }
    line.push_bytes(b"\n");
    sys::write_stderr(line.as_bytes());
}

/// Gets the unwinder ready at a point where nothing is held (the
/// library's constructor), if sampling.
pub(crate) fn prepare() {
    if profile::sampling() {
        unwind::prepare();
    }
}

/// Page-granular blocks' free path: a sampled block's sample leaves.
///
/// # Safety
/// `b` is a live block the caller frees.
#[inline(always)]
pub(crate) unsafe fn on_free(b: *mut LargeBlock) {
    // SAFETY: forwarded contract.
    unsafe {
        if (*b).flags & flags::SAMPLED != 0 {
            freed(b);
        }
    }
}

/// The page size sampled small objects are served in.
pub(crate) const SAMPLE_ALIGN: usize = PAGE_SIZE;
