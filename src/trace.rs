//! The allocation trace (`PCPALLOC_TRACE=PREFIX`): its file format and the
//! per-thread buffer events are gathered in before they are written.
//!
//! # Format, version 1
//!
//! All integers little-endian. A file is one process's trace:
//!
//! ```text
//! FileHeader (32 bytes)   magic "PCPTRACE", version, header size, pid,
//!                         CPUs online, start time (CLOCK_MONOTONIC ns)
//! Chunk*                  ChunkHeader (8 bytes: thread id, event count)
//!                         then that many Events (24 bytes each)
//! ```
//!
//! A chunk holds events of one thread in the order they happened; a
//! thread's chunks follow each other in the file in the order they were
//! written. Chunks of different threads interleave, so the events of one
//! file are sorted by time only within a thread: a reader merges threads
//! (and files, processes sharing one machine) by `time_ns`. A thread id
//! may come back after a thread's `EXIT` event, for a new thread.
//!
//! An [`Event`] is `time_ns`, `addr` (the block's address: its identity
//! from allocation to free) and one word packing the operation, the CPU it
//! ran on, the size and the alignment ([`Event::pack`]). An allocation is
//! recorded after it returns and a free before it happens, so a block
//! handed from one thread to another is allocated before it is freed in
//! time order. A `realloc` that moves a block is an allocation and a free;
//! one that keeps it in place is not recorded (no page moves). Small
//! allocations are recorded with their size class's size.
//!
//! Nothing here allocates: buffers are metadata memory, written out with
//! write(2), one chunk per call on an `O_APPEND` descriptor.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};

use crate::meta;
use crate::sys;

/// The file magic.
pub const MAGIC: [u8; 8] = *b"PCPTRACE";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;

/// A file's header.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// Bytes of this header (chunks start here).
    pub header_bytes: u32,
    /// The traced process.
    pub pid: u32,
    /// CPUs online when the trace started.
    pub nr_cpus: u32,
    /// CLOCK_MONOTONIC at the start, in nanoseconds.
    pub start_ns: u64,
}

/// A chunk's header: the events that follow are `count` events of thread
/// `tid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The thread (its kernel thread id).
    pub tid: u32,
    /// Events in the chunk.
    pub count: u32,
}

/// One allocator event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC in nanoseconds.
    pub time_ns: u64,
    /// The block's address (0 for `EXIT`).
    pub addr: u64,
    /// Operation, CPU, size, alignment: see [`Event::pack`].
    pub word: u64,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A block was allocated.
    Alloc = 0,
    /// A block is being freed.
    Free = 1,
    /// The thread exits (its heap goes back).
    Exit = 2,
}

const SIZE_BITS: u32 = 40;
const CPU_SHIFT: u32 = 40;
const CPU_BITS: u32 = 12;
const OP_SHIFT: u32 = 52;
const ALIGN_SHIFT: u32 = 56;

impl Event {
    /// Bits 0..40 size in bytes (saturated), 40..52 the CPU (saturated at
    /// 4095), 52..56 the [`Op`], 56..62 log2 of the alignment asked for
    /// (0: the default).
    pub fn pack(op: Op, cpu: usize, size: usize, align_log2: u32) -> u64 {
        let size = (size as u64).min((1 << SIZE_BITS) - 1);
        let cpu = (cpu as u64).min((1 << CPU_BITS) - 1);
        size | cpu << CPU_SHIFT
            | (op as u64) << OP_SHIFT
            | u64::from(align_log2 & 63) << ALIGN_SHIFT
    }

    /// The operation (`None` for a value this version does not know).
    pub fn op(&self) -> Option<Op> {
        match (self.word >> OP_SHIFT) & 15 {
            0 => Some(Op::Alloc),
            1 => Some(Op::Free),
            2 => Some(Op::Exit),
            _ => None,
        }
    }

    /// The CPU the event ran on.
    pub fn cpu(&self) -> usize {
        ((self.word >> CPU_SHIFT) & ((1 << CPU_BITS) - 1)) as usize
    }

    /// The size in bytes (allocations).
    pub fn size(&self) -> usize {
        (self.word & ((1 << SIZE_BITS) - 1)) as usize
    }

    /// The alignment asked for, in bytes (1: the default).
    pub fn align(&self) -> usize {
        1 << ((self.word >> ALIGN_SHIFT) & 63)
    }
}

/// A buffer whose first event is this old is written out at the next
/// event (100 ms).
pub const FLUSH_AGE_NS: u64 = 100_000_000;

/// Events per buffer: a buffer is 64 KiB.
pub const BUFFER_EVENTS: usize = (64 * 1024 - 16) / core::mem::size_of::<Event>();

/// A thread's events not yet written, as one chunk ready to go: its header
/// and events are contiguous, so a flush is one write.
///
/// Invariant: `chunk.count <= BUFFER_EVENTS`; `lock` is held by whoever
/// reads or writes the rest.
#[repr(C)]
pub struct Buffer {
    lock: AtomicBool,
    _pad: [u8; 3],
    /// The thread whose events go in (set when a thread takes the heap).
    owner: AtomicU32,
    /// What the lock guards.
    chunk: UnsafeCell<Chunk>,
}

// SAFETY: the chunk is reached only through the lock (a BufferGuard); the
// rest is atomic.
unsafe impl Sync for Buffer {}

/// A chunk being filled: its header and events, contiguous.
#[repr(C)]
struct Chunk {
    header: ChunkHeader,
    events: [Event; BUFFER_EVENTS],
}

const _: () = assert!(core::mem::size_of::<Buffer>() <= 64 * 1024);

impl Buffer {
    /// A new, empty buffer in metadata memory (never freed: buffers go
    /// with heaps, which are reused), or null.
    pub fn create() -> *mut Buffer {
        let b = meta::alloc(core::mem::size_of::<Buffer>(), 64).cast::<Buffer>();
        if !b.is_null() {
            // SAFETY: fresh metadata memory, ours: the header is written
            // before anyone sees the buffer (the events are written before
            // they are read).
            unsafe {
                core::ptr::addr_of_mut!((*b).lock).write(AtomicBool::new(false));
                core::ptr::addr_of_mut!((*b).owner).write(AtomicU32::new(0));
                core::ptr::addr_of_mut!((*(*b).chunk.get()).header).write(ChunkHeader::default());
            }
        }
        b
    }

    /// Sets the thread whose events go in.
    pub fn set_owner(&self, tid: u32) {
        self.owner.store(tid, Relaxed);
    }

    /// The thread whose events go in.
    pub fn owner(&self) -> u32 {
        self.owner.load(Relaxed)
    }

    /// Releases a lock taken by a [`BufferGuard`] that was forgotten (fork's
    /// handlers).
    ///
    /// # Safety
    /// The caller took the lock and forgot its guard.
    pub unsafe fn unlock_raw(&self) {
        self.lock.store(false, Release);
    }

    /// Drops the buffered events, the lock being held by a forgotten
    /// guard (fork's child handler).
    ///
    /// # Safety
    /// The caller holds the lock.
    pub unsafe fn discard_locked(&self) {
        // SAFETY: the lock is held (contract).
        unsafe { (*self.chunk.get()).header.count = 0 };
    }

    /// Takes the buffer's lock (uncontended except against a flush at
    /// exit or fork).
    pub fn lock(&self) -> BufferGuard<'_> {
        while self.lock.swap(true, Acquire) {
            sys::yield_now();
        }
        BufferGuard { b: self }
    }
}

/// The buffer, locked.
pub struct BufferGuard<'a> {
    b: &'a Buffer,
}

impl BufferGuard<'_> {
    fn chunk(&mut self) -> &mut Chunk {
        // SAFETY: the guard holds the lock, which gives it the chunk.
        unsafe { &mut *self.b.chunk.get() }
    }

    /// Appends an event for thread `tid`, first writing the buffer out to
    /// `fd` if it is full, holds another thread's events, or its first
    /// event is older than [`FLUSH_AGE_NS`] (so a process that ends in
    /// `_exit`, which runs no exit handler, loses at most that much).
    pub fn push(&mut self, fd: i32, tid: u32, e: Event) {
        let c = self.chunk();
        let n = c.header.count as usize;
        if n == BUFFER_EVENTS
            || (n > 0
                && (c.header.tid != tid
                    || e.time_ns.wrapping_sub(c.events[0].time_ns) > FLUSH_AGE_NS))
        {
            self.flush(fd);
        }
        let c = self.chunk();
        c.header.tid = tid;
        let n = c.header.count as usize;
        c.events[n] = e;
        c.header.count += 1;
    }

    /// Writes the buffered events out to `fd` as one chunk (nothing if
    /// there are none, or `fd` is negative) and empties the buffer.
    pub fn flush(&mut self, fd: i32) {
        let c = self.chunk();
        let n = c.header.count as usize;
        if n > 0 && fd >= 0 {
            let len = core::mem::size_of::<ChunkHeader>() + n * core::mem::size_of::<Event>();
            // SAFETY: header and events are contiguous plain data
            // (repr(C), no padding), `len` bytes of them in use.
            let bytes =
                unsafe { core::slice::from_raw_parts((c as *const Chunk).cast::<u8>(), len) };
            sys::write_fd(fd, bytes);
        }
        c.header.count = 0;
    }
}

impl Drop for BufferGuard<'_> {
    fn drop(&mut self) {
        self.b.lock.store(false, Release);
    }
}

/// The header of a new trace file for process `pid`.
pub(crate) fn file_header(pid: u32, nr_cpus: usize, start_ns: u64) -> FileHeader {
    FileHeader {
        magic: MAGIC,
        version: VERSION,
        header_bytes: core::mem::size_of::<FileHeader>() as u32,
        pid,
        nr_cpus: nr_cpus as u32,
        start_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_pack_and_unpack() {
        let e = Event {
            time_ns: 7,
            addr: 0x1000,
            word: Event::pack(Op::Free, 223, 12345, 6),
        };
        assert_eq!(e.op(), Some(Op::Free));
        assert_eq!(e.cpu(), 223);
        assert_eq!(e.size(), 12345);
        assert_eq!(e.align(), 64);
        let big = Event::pack(Op::Alloc, 9999, usize::MAX, 0);
        let e = Event { word: big, ..e };
        assert_eq!(
            (e.op(), e.cpu(), e.size(), e.align()),
            (Some(Op::Alloc), 4095, (1 << 40) - 1, 1)
        );
        assert_eq!(core::mem::size_of::<Event>(), 24);
        assert_eq!(core::mem::size_of::<FileHeader>(), 32);
    }
}
