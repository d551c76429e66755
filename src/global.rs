//! The Rust face: `#[global_allocator] static GLOBAL: PcpAlloc = PcpAlloc;`.

use core::alloc::{GlobalAlloc, Layout};

use crate::config::Config;
use crate::geometry::SMALL_MAX;
use crate::malloc;
use crate::runtime;
use crate::slab::classes;

/// pcpalloc as a Rust global allocator, with the [`Config`] it starts with.
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;
/// ```
///
/// (`pcpalloc::PcpAlloc` names both the type and its default value.) See
/// [`Config`] for a configured one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcpAlloc {
    config: Config,
}

/// The allocator with the default configuration.
#[allow(non_upper_case_globals)]
pub const PcpAlloc: PcpAlloc = PcpAlloc::new();

impl PcpAlloc {
    /// The allocator with the default configuration.
    pub const fn new() -> PcpAlloc {
        PcpAlloc {
            config: Config::new(),
        }
    }

    /// The allocator with `config` (which the environment overrides).
    pub const fn with_config(config: Config) -> PcpAlloc {
        PcpAlloc { config }
    }

    /// Every allocation that is not served from a thread's bins: hands the
    /// configuration to the runtime before its first initialisation.
    #[cold]
    #[inline(never)]
    fn alloc_slow(&self, l: Layout, zero: bool) -> *mut u8 {
        runtime::configure_once(|| self.config.apply());
        let p = if l.align() <= classes::QUANTUM {
            if zero {
                malloc::calloc(1, l.size())
            } else {
                malloc::alloc(l.size())
            }
        } else {
            malloc::alloc_aligned(l.align(), l.size(), zero)
        };
        if !p.is_null() && runtime::valgrind::on() {
            runtime::valgrind::narrow(p, l.size());
        }
        p
    }

    /// `realloc` under valgrind: always a new block, so memcheck tracks
    /// the layout's exact size.
    ///
    /// # Safety
    /// As `GlobalAlloc::realloc`.
    #[cold]
    #[inline(never)]
    unsafe fn realloc_valgrind(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc::realloc's contract: new_size rounded to the
        // alignment does not overflow.
        let nl = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
        // SAFETY: nl has a non-zero size (realloc's contract).
        let q = unsafe { self.alloc(nl) };
        if !q.is_null() {
            // SAFETY: both blocks are live and distinct; p holds l.size().
            unsafe {
                core::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                self.dealloc(p, l);
            }
        }
        q
    }
}

// SAFETY: every method returns blocks of at least the layout's size and
// alignment, or null; dealloc/realloc accept exactly what alloc returned.
unsafe impl GlobalAlloc for PcpAlloc {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.align() <= classes::QUANTUM && l.size() <= SMALL_MAX {
            let p = malloc::alloc_small_fast(l.size());
            if !p.is_null() {
                return p;
            }
        }
        self.alloc_slow(l, false)
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p came from this allocator with this layout (GlobalAlloc
        // contract). An over-aligned small block may sit in a larger class
        // than its size's: the slab's class is checked against it.
        unsafe { malloc::dealloc_sized(p, l.size()) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.align() <= classes::QUANTUM && l.size() <= SMALL_MAX {
            let p = malloc::alloc_small_fast(l.size());
            if !p.is_null() {
                // SAFETY: p holds at least l.size() bytes.
                unsafe { core::ptr::write_bytes(p, 0, l.size()) };
                return p;
            }
        }
        self.alloc_slow(l, true)
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        if runtime::valgrind::on() {
            // SAFETY: forwarded contract.
            return unsafe { self.realloc_valgrind(p, l, new_size) };
        }
        if l.align() <= classes::QUANTUM {
            // SAFETY: p is a live block of ours (GlobalAlloc contract).
            return unsafe { malloc::realloc_raw(p, new_size) };
        }
        // Over-aligned: keep the block if it still fits, else move.
        // SAFETY: p is a live block of ours.
        let usable = unsafe { malloc::usable_size(p) };
        if new_size <= usable && new_size >= usable / 2 {
            return p;
        }
        let q = malloc::alloc_aligned(l.align(), new_size, false);
        if !q.is_null() {
            // SAFETY: both blocks are live and distinct.
            unsafe {
                core::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                malloc::free(p);
            }
        }
        q
    }
}
