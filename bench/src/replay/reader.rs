//! Reading traces: every file indexed by its chunk headers, then the
//! events of all threads of all files merged by time, one chunk per thread
//! in memory at a time (so a trace of any size streams in bounded memory).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pcpalloc::internals::trace::{ChunkHeader, Event, FileHeader, MAGIC, VERSION};

const HEADER_BYTES: usize = std::mem::size_of::<FileHeader>();
const CHUNK_BYTES: usize = std::mem::size_of::<ChunkHeader>();
const EVENT_BYTES: usize = std::mem::size_of::<Event>();

/// One trace file (one process), indexed. Clones share the open file.
#[derive(Clone)]
pub struct TraceFile {
    /// Where it came from.
    pub path: PathBuf,
    /// Its header.
    pub header: FileHeader,
    file: Arc<File>,
    /// Each thread's chunks, in file order: (offset of the events, count).
    threads: BTreeMap<u32, VecDeque<(u64, u32)>>,
    /// Events in the file.
    pub events: u64,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl TraceFile {
    /// Opens and indexes `path`: reads its header and walks its chunk
    /// headers (seeking over the events). A truncated last chunk (the
    /// process died mid-write) is cut to its whole events.
    pub fn open(path: &Path) -> io::Result<TraceFile> {
        let bad = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}", path.display()),
            )
        };
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut r = BufReader::with_capacity(1 << 16, file.try_clone()?);
        let mut h = [0u8; HEADER_BYTES];
        r.read_exact(&mut h)
            .map_err(|_| bad("shorter than a trace header".into()))?;
        if h[..8] != MAGIC {
            return Err(bad("not a pcpalloc trace (no PCPTRACE magic)".into()));
        }
        let header = FileHeader {
            magic: MAGIC,
            version: u32_at(&h, 8),
            header_bytes: u32_at(&h, 12),
            pid: u32_at(&h, 16),
            nr_cpus: u32_at(&h, 20),
            start_ns: u64_at(&h, 24),
        };
        if header.version != VERSION {
            return Err(bad(format!(
                "trace format version {}, this replay reads version {VERSION}",
                header.version
            )));
        }
        let mut at = u64::from(header.header_bytes);
        r.seek(SeekFrom::Start(at))?;
        let mut threads: BTreeMap<u32, VecDeque<(u64, u32)>> = BTreeMap::new();
        let mut events = 0;
        while at + CHUNK_BYTES as u64 <= len {
            let mut c = [0u8; CHUNK_BYTES];
            r.read_exact(&mut c)?;
            let (tid, count) = (u32_at(&c, 0), u32_at(&c, 4));
            let start = at + CHUNK_BYTES as u64;
            let whole = ((len - start) / EVENT_BYTES as u64).min(u64::from(count)) as u32;
            if whole > 0 {
                threads.entry(tid).or_default().push_back((start, whole));
                events += u64::from(whole);
            }
            at = start + u64::from(count) * EVENT_BYTES as u64;
            r.seek(SeekFrom::Start(at.min(len)))?;
        }
        Ok(TraceFile {
            path: path.to_path_buf(),
            header,
            file: Arc::new(file),
            threads,
            events,
        })
    }

    fn read_chunk(&self, offset: u64, count: u32, out: &mut Vec<Event>) -> io::Result<()> {
        let mut bytes = vec![0u8; count as usize * EVENT_BYTES];
        self.file.read_exact_at(&mut bytes, offset)?;
        out.clear();
        out.extend(bytes.chunks_exact(EVENT_BYTES).map(|b| Event {
            time_ns: u64_at(b, 0),
            addr: u64_at(b, 8),
            word: u64_at(b, 16),
        }));
        Ok(())
    }
}

/// What the merge yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// An event of thread `tid` of file `file`.
    Event {
        /// Index of the file (as given).
        file: u32,
        /// Its thread.
        tid: u32,
        /// The event.
        event: Event,
    },
    /// File `file` has no more events: its process ended here.
    FileEnd(u32),
}

struct Cursor {
    file: u32,
    tid: u32,
    chunks: VecDeque<(u64, u32)>,
    buf: Vec<Event>,
    pos: usize,
}

/// Every thread of every file, merged by time (ties: file, then thread, so
/// the order is the same on every run).
pub struct Merge {
    files: Vec<TraceFile>,
    cursors: Vec<Cursor>,
    queue: BinaryHeap<Reverse<(u64, u32, u32, usize)>>,
    live: Vec<usize>,
    ended: VecDeque<u32>,
}

impl Merge {
    /// Starts merging `files`.
    pub fn new(files: Vec<TraceFile>) -> io::Result<Merge> {
        let mut m = Merge {
            cursors: vec![],
            queue: BinaryHeap::new(),
            live: vec![0; files.len()],
            ended: VecDeque::new(),
            files,
        };
        for (fi, f) in m.files.iter().enumerate() {
            for (&tid, chunks) in &f.threads {
                m.cursors.push(Cursor {
                    file: fi as u32,
                    tid,
                    chunks: chunks.clone(),
                    buf: vec![],
                    pos: 0,
                });
            }
        }
        for ci in 0..m.cursors.len() {
            let f = m.cursors[ci].file as usize;
            m.live[f] += 1;
            m.refill(ci)?;
        }
        for (f, &n) in m.live.iter().enumerate() {
            if n == 0 {
                m.ended.push_back(f as u32);
            }
        }
        Ok(m)
    }

    /// The files merged.
    pub fn files(&self) -> &[TraceFile] {
        &self.files
    }

    /// Loads cursor `ci`'s next chunk if its buffer is used up, and queues
    /// its next event; or, when it has none left, counts its file down.
    fn refill(&mut self, ci: usize) -> io::Result<()> {
        let c = &mut self.cursors[ci];
        if c.pos >= c.buf.len() {
            match c.chunks.pop_front() {
                Some((offset, count)) => {
                    let file = &self.files[c.file as usize];
                    file.read_chunk(offset, count, &mut c.buf)?;
                    c.pos = 0;
                }
                None => {
                    c.buf = vec![];
                    let f = c.file as usize;
                    self.live[f] -= 1;
                    if self.live[f] == 0 {
                        self.ended.push_back(f as u32);
                    }
                    return Ok(());
                }
            }
        }
        let c = &self.cursors[ci];
        self.queue
            .push(Reverse((c.buf[c.pos].time_ns, c.file, c.tid, ci)));
        Ok(())
    }

    /// The next item, in time order.
    pub fn next_item(&mut self) -> io::Result<Option<Item>> {
        if let Some(f) = self.ended.pop_front() {
            return Ok(Some(Item::FileEnd(f)));
        }
        let Some(Reverse((_, file, tid, ci))) = self.queue.pop() else {
            return Ok(None);
        };
        let c = &mut self.cursors[ci];
        let event = c.buf[c.pos];
        c.pos += 1;
        self.refill(ci)?;
        Ok(Some(Item::Event { file, tid, event }))
    }
}
