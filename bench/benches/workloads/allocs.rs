//! The allocators under comparison, each a `GlobalAlloc` value used
//! directly by the workloads (the harness itself runs on the system
//! allocator), with a hook to give memory back between runs.

use std::alloc::{GlobalAlloc, Layout, System};

use pcpalloc::PcpAlloc;

/// Which allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    System,
    Pcpalloc,
    #[cfg(feature = "peers")]
    Mimalloc,
    #[cfg(feature = "peers")]
    Jemalloc,
}

impl Which {
    pub fn name(self) -> &'static str {
        match self {
            Which::System => "system (glibc)",
            Which::Pcpalloc => "pcpalloc",
            #[cfg(feature = "peers")]
            Which::Mimalloc => "mimalloc",
            #[cfg(feature = "peers")]
            Which::Jemalloc => "jemalloc",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Which::System => "system",
            Which::Pcpalloc => "pcpalloc",
            #[cfg(feature = "peers")]
            Which::Mimalloc => "mimalloc",
            #[cfg(feature = "peers")]
            Which::Jemalloc => "jemalloc",
        }
    }

    /// Every allocator compiled in, system first.
    pub fn all() -> Vec<Which> {
        #[allow(unused_mut)]
        let mut v = vec![Which::System, Which::Pcpalloc];
        #[cfg(feature = "peers")]
        v.extend([Which::Mimalloc, Which::Jemalloc]);
        v
    }

    /// Gives cached memory back so the next run starts from a clean slate.
    pub fn settle(self) {
        match self {
            // SAFETY: malloc_trim has no preconditions.
            Which::System => unsafe {
                libc::malloc_trim(0);
            },
            Which::Pcpalloc => {
                pcpalloc::trim();
            }
            #[cfg(feature = "peers")]
            _ => {}
        }
    }
}

/// Calls `f` with the allocator `w` as a concrete `GlobalAlloc` type, so
/// the workloads are monomorphised (no dynamic dispatch in the loops).
#[macro_export]
macro_rules! with_alloc {
    ($w:expr, |$a:ident| $body:expr) => {
        match $w {
            $crate::allocs::Which::System => {
                let $a: &'static std::alloc::System = &std::alloc::System;
                $body
            }
            $crate::allocs::Which::Pcpalloc => {
                let $a: &'static pcpalloc::PcpAlloc = &pcpalloc::PcpAlloc;
                $body
            }
            #[cfg(feature = "peers")]
            $crate::allocs::Which::Mimalloc => {
                static M: mimalloc::MiMalloc = mimalloc::MiMalloc;
                let $a: &'static mimalloc::MiMalloc = &M;
                $body
            }
            #[cfg(feature = "peers")]
            $crate::allocs::Which::Jemalloc => {
                static J: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
                let $a: &'static tikv_jemallocator::Jemalloc = &J;
                $body
            }
        }
    };
}

/// Allocates `size` bytes (8-aligned) from `a`, panicking on failure.
#[inline]
pub fn alloc<A: GlobalAlloc>(a: &A, size: usize) -> *mut u8 {
    // SAFETY: size > 0 is ensured by callers via max(1).
    let p = unsafe { a.alloc(Layout::from_size_align_unchecked(size.max(1), 8)) };
    assert!(!p.is_null(), "allocation of {size} bytes failed");
    p
}

/// Frees a block from [`alloc`].
#[inline]
pub fn free<A: GlobalAlloc>(a: &A, p: *mut u8, size: usize) {
    // SAFETY: p came from alloc with this size.
    unsafe { a.dealloc(p, Layout::from_size_align_unchecked(size.max(1), 8)) }
}

#[allow(dead_code)]
fn _assert_types() {
    let _: &dyn GlobalAlloc = &System;
    let _: &dyn GlobalAlloc = &PcpAlloc;
}
