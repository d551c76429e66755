//! A profile written out: the table ([`Table`]) as pprof's `Profile`
//! message, with the process's executable mappings, so that `pprof` or
//! `pcpalloc-prof` can symbolise its addresses later against the files
//! they came from.
//!
//! Four values per stack, Go's heap profile's: `alloc_objects` and
//! `alloc_space` (what its samples stand for, ever allocated), and
//! `inuse_objects` and `inuse_space` (what its live samples stand for);
//! `inuse_space` is the default. A stack's frames are its locations,
//! innermost first, one location per frame (addresses inside the call
//! instruction of each return address); a stack cut at 64 frames ends
//! with a location at address 1, in no mapping.
//!
//! Everything goes through fixed buffers and write(2), under the table's
//! lock: a dump at a new peak runs inside an allocation.

use core::cell::UnsafeCell;

use super::maps;
use super::pprof::{self, location, mapping, profile, sample, value_type, Encode, Msg, Sink};
use super::sampler::OBJECT_SCALE;
use super::table::Table;

/// Most executable mappings a profile names (the rest's addresses get no
/// mapping).
const MAX_MAPPINGS: usize = 1024;

/// The strings every profile starts its string table with, in order (the
/// first must be empty).
const STRINGS: [&[u8]; 8] = [
    b"",
    b"alloc_objects",
    b"count",
    b"alloc_space",
    b"bytes",
    b"inuse_objects",
    b"inuse_space",
    b"space",
];
const S_COUNT: u64 = 2;
const S_BYTES: u64 = 4;
const S_SPACE: u64 = 7;
/// The sample types, as (type, unit) string indices.
const SAMPLE_TYPES: [(u64, u64); 4] = [(1, S_COUNT), (3, S_BYTES), (5, S_COUNT), (6, S_BYTES)];
/// The default sample type, by name: `inuse_space`'s string index (the
/// field is an index into the string table, not into the sample types).
const DEFAULT_SAMPLE_TYPE: u64 = 6;
const _: () = assert!(STRINGS[DEFAULT_SAMPLE_TYPE as usize].len() == b"inuse_space".len());

/// The buffers a dump writes through: used only under the table's lock.
struct Scratch {
    sink: Sink,
    maps: [(usize, usize); MAX_MAPPINGS],
}

struct ScratchCell(UnsafeCell<Scratch>);

// SAFETY: only `write_profile` reaches it, which its callers run under the
// table's lock (one at a time).
unsafe impl Sync for ScratchCell {}

static SCRATCH: ScratchCell = ScratchCell(UnsafeCell::new(Scratch {
    sink: Sink::new(),
    maps: [(0, 0); MAX_MAPPINGS],
}));

/// What a profile's header says besides the table.
pub(crate) struct Header<'a> {
    /// Mean bytes between samples.
    pub mean: u64,
    /// When the dump was taken (ns since the epoch).
    pub time_ns: u64,
    /// One line of text for people (a comment of the profile).
    pub comment: &'a [u8],
}

/// Writes `t` as a pprof profile to `fd`. True if every write succeeded.
/// The caller holds the table's lock (`t` comes from its guard).
pub(crate) fn write_profile(fd: i32, t: &Table, h: &Header<'_>) -> bool {
    // SAFETY: the caller holds the table's lock, which serialises every
    // use of the scratch buffers (see ScratchCell).
    let scratch = unsafe { &mut *SCRATCH.0.get() };
    let out = &mut scratch.sink;
    out.start(fd);
    let mut strings = 0u64;
    let mut string = |out: &mut Sink, s: &[u8]| {
        out.bytes(profile::STRING_TABLE, s);
        strings += 1;
        strings - 1
    };
    for s in STRINGS {
        string(out, s);
    }
    for (ty, unit) in SAMPLE_TYPES {
        let mut m = Msg::<32>::new();
        m.uint(value_type::TYPE, ty);
        m.uint(value_type::UNIT, unit);
        out.bytes(profile::SAMPLE_TYPE, m.as_bytes());
    }
    let mut m = Msg::<32>::new();
    m.uint(value_type::TYPE, S_SPACE);
    m.uint(value_type::UNIT, S_BYTES);
    out.bytes(profile::PERIOD_TYPE, m.as_bytes());
    out.uint(profile::PERIOD, h.mean);
    out.uint(profile::TIME_NANOS, h.time_ns);
    out.uint(profile::DEFAULT_SAMPLE_TYPE, DEFAULT_SAMPLE_TYPE);
    let c = string(out, h.comment);
    out.uint(profile::COMMENT, c);

    // The executable mappings, in address order.
    let mut n_maps = 0;
    maps::for_each(|m| {
        if !m.exec || n_maps == MAX_MAPPINGS {
            return;
        }
        let name = string(out, m.path);
        let mut msg = Msg::<96>::new();
        msg.uint(mapping::ID, n_maps as u64 + 1);
        msg.uint(mapping::MEMORY_START, m.start as u64);
        msg.uint(mapping::MEMORY_LIMIT, m.end as u64);
        msg.uint(mapping::FILE_OFFSET, m.offset);
        msg.uint(mapping::FILENAME, name);
        out.bytes(profile::MAPPING, msg.as_bytes());
        scratch.maps[n_maps] = (m.start, m.end);
        n_maps += 1;
    });
    let maps = &scratch.maps[..n_maps];
    let mapping_of = |a: usize| -> u64 {
        let i = maps.partition_point(|&(start, _)| start <= a);
        if i > 0 && a < maps[i - 1].1 {
            i as u64
        } else {
            0
        }
    };

    // One location per frame of every stack, then the stack's sample.
    let mut next_location = 1u64;
    t.for_each(|s| {
        let frames = s.frames();
        let mut ids = [0u64; super::unwind::STACK_WORDS];
        for (i, &pc) in frames.iter().enumerate() {
            let mut msg = Msg::<40>::new();
            msg.uint(location::ID, next_location);
            msg.uint(location::MAPPING_ID, mapping_of(pc));
            msg.uint(location::ADDRESS, pc as u64);
            out.bytes(profile::LOCATION, msg.as_bytes());
            ids[i] = next_location;
            next_location += 1;
        }
        let values = [
            scaled(s.alloc_objects),
            s.alloc_bytes,
            scaled(s.live_objects),
            s.live_bytes,
        ];
        let mut msg = Msg::<{ 16 + 10 * super::unwind::STACK_WORDS + 48 }>::new();
        msg.packed(sample::LOCATION_ID, &ids[..frames.len()]);
        msg.packed(sample::VALUE, &values);
        debug_assert!(!msg.truncated);
        out.bytes(profile::SAMPLE, msg.as_bytes());
    });
    out.flush();
    out.ok
}

/// Scaled objects, rounded to whole objects.
fn scaled(v: u64) -> u64 {
    (v + OBJECT_SCALE / 2) / OBJECT_SCALE
}

// The profile's top-level message is never length-prefixed.
const _: () = assert!(pprof::SINK_BYTES >= 1024);
