//! Where the allocator's pagesets live.
//!
//! Per CPU (the default, as in the kernel): an array indexed by the CPU the
//! thread runs on (`sched_getcpu`, which glibc reads from rseq). Per thread
//! (`PCPALLOC_PCP=thread`): each thread heap takes a pageset from this pool
//! and gives it back, drained, when the thread exits.
//!
//! Every pageset ever made is on one list (`next_all`), so the maintenance
//! tick and drain-all reach idle CPUs' and idle threads' pagesets too.

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::meta;
use crate::sync::Locked;
use crate::zone::Zone;

use super::Pageset;

/// Upper bound on per-CPU pagesets (more CPUs share by index modulo).
pub const MAX_CPU_PAGESETS: usize = 1024;

static CPU_SETS: AtomicPtr<Pageset> = AtomicPtr::new(ptr::null_mut());
static NR_CPU_SETS: AtomicUsize = AtomicUsize::new(0);
static ALL: AtomicPtr<Pageset> = AtomicPtr::new(ptr::null_mut());
static FREE: Locked<usize> = Locked::new(0);

fn publish(ps: *mut Pageset) {
    let mut head = ALL.load(Ordering::Acquire);
    loop {
        // SAFETY: ps is a fresh pageset only we reference so far.
        unsafe { (*ps).next_all.store(head, Ordering::Relaxed) };
        match ALL.compare_exchange_weak(head, ps, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(h) => head = h,
        }
    }
}

fn new_pageset() -> *mut Pageset {
    let p = meta::alloc(core::mem::size_of::<Pageset>(), 64).cast::<Pageset>();
    if !p.is_null() {
        // SAFETY: fresh, aligned metadata memory.
        unsafe { p.write(Pageset::new()) };
    }
    p
}

/// Creates the per-CPU pagesets (once, at init). `free_high_batch(cpu)`
/// says whether that CPU's cache slice is large enough for
/// PCPF_FREE_HIGH_BATCH. Returns false if metadata memory is unavailable.
pub fn init_cpu_sets(nr_cpus: usize, free_high_batch: impl Fn(usize) -> bool) -> bool {
    let n = nr_cpus.clamp(1, MAX_CPU_PAGESETS);
    let arr = meta::alloc(n * core::mem::size_of::<Pageset>(), 64).cast::<Pageset>();
    if arr.is_null() {
        return false;
    }
    for cpu in 0..n {
        // SAFETY: arr has room for n pagesets.
        unsafe {
            let ps = arr.add(cpu);
            ps.write(Pageset::new());
            (*ps).set_free_high_batch(free_high_batch(cpu));
            publish(ps);
        }
    }
    NR_CPU_SETS.store(n, Ordering::Relaxed);
    CPU_SETS.store(arr, Ordering::Release);
    true
}

/// The pageset of `cpu` (per-CPU mode). Only after initialisation
/// (`state::ensure_init`).
#[inline]
pub fn cpu_pageset(cpu: usize) -> &'static Pageset {
    let n = NR_CPU_SETS.load(Ordering::Relaxed);
    let arr = CPU_SETS.load(Ordering::Acquire);
    debug_assert!(n > 0 && !arr.is_null());
    let i = if cpu < n { cpu } else { cpu % n };
    // SAFETY: init_cpu_sets made n pagesets that live forever.
    unsafe { &*arr.add(i) }
}

/// A pageset for a new thread (thread mode): a drained one from the free
/// list, or a new one. Null if metadata memory is unavailable.
pub fn acquire_thread_pageset(free_high_batch: bool) -> *mut Pageset {
    let mut f = FREE.lock();
    let head = *f as *mut Pageset;
    if !head.is_null() {
        // SAFETY: pagesets on the free list are ours and live forever.
        *f = unsafe { (*head).next_free.load(Ordering::Relaxed) } as usize;
        return head;
    }
    drop(f);
    let p = new_pageset();
    if !p.is_null() {
        // SAFETY: p is fresh.
        unsafe {
            (*p).set_free_high_batch(free_high_batch);
            (*p).set_biased(true);
        }
        publish(p);
    }
    p
}

/// Drains a thread's pageset into `zone` and puts it on the free list.
///
/// # Safety
/// `ps` came from [`acquire_thread_pageset`], and the calling thread, which
/// owns it, is done with it.
pub unsafe fn release_thread_pageset(ps: *mut Pageset, zone: &Zone) {
    // SAFETY: ps lives forever (contract).
    unsafe {
        (*ps).drain_owned(zone);
        let mut f = FREE.lock();
        (*ps).next_free.store(*f as *mut Pageset, Ordering::Relaxed);
        *f = ps as usize;
    }
}

/// Calls `f` on every pageset ever created.
pub fn for_each(mut f: impl FnMut(&'static Pageset)) {
    let mut p = ALL.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: published pagesets live forever.
        let ps: &'static Pageset = unsafe { &*p };
        f(ps);
        p = ps.next_all.load(Ordering::Acquire);
    }
}

/// Drains every pageset into `zone` (`drain_all_pages`). Returns pages.
pub fn drain_all(zone: &Zone) -> usize {
    let mut n = 0;
    for_each(|ps| n += ps.drain(zone));
    n
}

/// Pages held by all pagesets (racy sum, for decisions and reports).
pub fn total_count() -> usize {
    let mut n = 0;
    for_each(|ps| n += ps.snapshot().0.count.max(0) as usize);
    n
}

/// Takes every pageset lock and the free-list lock before fork.
pub fn before_fork() {
    FREE.lock.lock();
    for_each(|ps| core::mem::forget(ps.lock()));
}

/// Releases the locks taken by [`before_fork`] (parent: waking anyone
/// queued on them) or resets them (child).
///
/// # Safety
/// Only right after fork, having called [`before_fork`].
pub unsafe fn after_fork(child: bool) {
    // SAFETY: every lock was taken by before_fork in this thread.
    unsafe {
        for_each(|ps| ps.force_unlock());
        if child {
            FREE.lock.force_unlock();
        } else {
            FREE.lock.unlock();
        }
    }
}
