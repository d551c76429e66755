//! A free small object, as the free lists see it: word 0 links it to the
//! next free object, word 1 carries the process's free key while it is
//! free (so a second free is recognised; allocation clears it). Every
//! list of free objects — a bin, a slab's own and remote lists, a chain
//! of remote frees — is made of these.

/// A free object (or one being freed). Every size class is at least two
/// words, so both words are the object's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeObject(*mut usize);

const _: () = assert!(super::classes::MIN_CLASS_SIZE >= 2 * core::mem::size_of::<usize>());

impl FreeObject {
    /// The object at `p`.
    ///
    /// # Safety
    /// `p` is the start of a small object of ours (live or free) — or, for
    /// [`holds`](Self::holds) alone, a pointer into a slab whose two words
    /// there are readable.
    #[inline(always)]
    pub(crate) unsafe fn at(p: *mut u8) -> FreeObject {
        FreeObject(p.cast())
    }

    /// Its address.
    #[inline(always)]
    pub(crate) fn addr(self) -> *mut u8 {
        self.0.cast()
    }

    /// The next object of its list (null at the end).
    ///
    /// # Safety
    /// The object is on a list of free objects the caller may read.
    #[inline(always)]
    pub(crate) unsafe fn next(self) -> *mut u8 {
        // SAFETY: word 0 is the object's (contract).
        unsafe { self.0.read() as *mut u8 }
    }

    /// Links it to `next`.
    ///
    /// # Safety
    /// Nobody else uses the object (it is being freed, or is on a list the
    /// caller owns).
    #[inline(always)]
    pub(crate) unsafe fn set_next(self, next: *mut u8) {
        // SAFETY: as above.
        unsafe { self.0.write(next as usize) }
    }

    /// Whether word 1 holds `key`: almost surely a free object (see
    /// `free.rs` on the exception).
    ///
    /// # Safety
    /// As [`at`](Self::at).
    #[inline(always)]
    pub(crate) unsafe fn holds(self, key: usize) -> bool {
        // SAFETY: word 1 is readable (contract).
        unsafe { self.0.add(1).read() == key }
    }

    /// Marks it free with `key`.
    ///
    /// # Safety
    /// As [`set_next`](Self::set_next).
    #[inline(always)]
    pub(crate) unsafe fn mark(self, key: usize) {
        // SAFETY: as above.
        unsafe { self.0.add(1).write(key) }
    }

    /// Clears the mark: the object is handed out (or found live).
    ///
    /// # Safety
    /// As [`set_next`](Self::set_next).
    #[inline(always)]
    pub(crate) unsafe fn unmark(self) {
        // SAFETY: as above.
        unsafe { self.0.add(1).write(0) }
    }
}
