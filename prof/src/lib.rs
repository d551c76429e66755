//! Reads a heap profile pcpalloc wrote (`PCPALLOC_PROFILE`: pprof's
//! `profile.proto`, unsymbolised, with the process's mappings), turns its
//! addresses into function names — DWARF where the file has it (inlined
//! functions included, with `addr2line`), the symbol table otherwise
//! (`object`) — and writes what people read: folded stacks, the flame
//! graph of them (`inferno`) and a table of the stacks that hold the most.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};
use prost::Message;

/// pprof's `Profile`, the fields pcpalloc writes.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Kept as bytes: a mapping's path need not be UTF-8.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub string_table: Vec<Vec<u8>>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// pprof's `ValueType`: string table indices.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// pprof's `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

/// pprof's `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
}

/// pprof's `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
}

/// The values of a stack, in the profile's sample-type order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Values {
    /// Objects allocated here (estimated from the samples).
    pub alloc_objects: i64,
    /// Bytes allocated here (estimated).
    pub alloc_bytes: i64,
    /// Objects live here (estimated).
    pub live_objects: i64,
    /// Bytes live here (estimated).
    pub live_bytes: i64,
}

/// Which of a stack's values to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Bytes live when the profile was written (at exit: the leaks).
    Live,
    /// Bytes allocated since the start.
    Allocated,
}

impl Values {
    /// (bytes, objects) of `m`.
    pub fn of(&self, m: Measure) -> (i64, i64) {
        match m {
            Measure::Live => (self.live_bytes, self.live_objects),
            Measure::Allocated => (self.alloc_bytes, self.alloc_objects),
        }
    }
}

/// One call stack of the profile, symbolised: outermost frame first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Function names, outermost first (inlined functions as frames of
    /// their own).
    pub frames: Vec<String>,
    /// What the stack's samples stand for.
    pub values: Values,
}

/// An error reading or understanding a profile.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

impl Profile {
    /// Reads a profile file (pprof's format, gzip not supported).
    pub fn read(path: &Path) -> Result<Profile, Error> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if bytes.starts_with(&[0x1f, 0x8b]) {
            return Err(format!("{}: gzip-compressed; gunzip it first", path.display()).into());
        }
        Ok(Profile::decode(bytes.as_slice())
            .map_err(|e| format!("{}: not a pprof profile: {e}", path.display()))?)
    }

    /// String `i` of the string table ("" when out of range).
    pub fn string(&self, i: i64) -> String {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.string_table.get(i))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    }

    /// The profile's comments (pcpalloc writes one: its version and the
    /// process).
    pub fn comments(&self) -> Vec<String> {
        self.comment.iter().map(|&i| self.string(i)).collect()
    }

    /// The index of sample type `name` (e.g. `inuse_space`).
    fn value_index(&self, name: &str) -> Option<usize> {
        self.sample_type
            .iter()
            .position(|t| self.string(t.r#type) == name)
    }

    /// Every stack, symbolised; with `trim`, the allocator's own frames
    /// at the top of each stack are left out (`pcpalloc::…`, the malloc
    /// family, Rust's allocation shims, and anything in libpcpalloc.so).
    pub fn symbolise(&self, trim: bool) -> Vec<Stack> {
        let idx = |n: &str| self.value_index(n);
        let (ao, ab, lo, lb) = (
            idx("alloc_objects"),
            idx("alloc_space"),
            idx("inuse_objects"),
            idx("inuse_space"),
        );
        let locations: HashMap<u64, &Location> = self.location.iter().map(|l| (l.id, l)).collect();
        let mappings: HashMap<u64, &Mapping> = self.mapping.iter().map(|m| (m.id, m)).collect();
        let mut sym = Symboliser::default();
        let mut out = Vec::new();
        for s in &self.sample {
            let v = |i: Option<usize>| i.and_then(|i| s.value.get(i).copied()).unwrap_or(0);
            let values = Values {
                alloc_objects: v(ao),
                alloc_bytes: v(ab),
                live_objects: v(lo),
                live_bytes: v(lb),
            };
            // Innermost first, as stored; inlined frames innermost first
            // within each location.
            let mut frames: Vec<(String, bool)> = Vec::new();
            for id in &s.location_id {
                let Some(l) = locations.get(id) else { continue };
                let m = mappings.get(&l.mapping_id).copied();
                let file = m.map(|m| self.string(m.filename)).unwrap_or_default();
                let (names, function) = sym.names(m, &file, l.address);
                // The allocator's code: its library, or (linked into the
                // program) a function of its whose symbol says so — the
                // functions inlined into it too, whose DWARF names are
                // short.
                let ours = file.ends_with("libpcpalloc.so")
                    || function.as_deref().is_some_and(is_allocator_frame);
                for name in names {
                    frames.push((name, ours));
                }
            }
            if trim {
                let keep = frames
                    .iter()
                    .position(|(name, ours)| !ours && !is_allocator_frame(name))
                    .unwrap_or(frames.len());
                frames.drain(..keep);
            }
            if frames.is_empty() {
                frames.push(("[no frames: the stack table was full]".into(), false));
            }
            out.push(Stack {
                frames: frames.into_iter().rev().map(|(n, _)| n).collect(),
                values,
            });
        }
        out
    }
}

/// Whether `name` is one of the allocator's own frames, which sit at the
/// top of every stack.
pub fn is_allocator_frame(name: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "pcpalloc::",
        "<pcpalloc::",
        "pcpalloc_core::",
        "__rust_alloc",
        "__rust_realloc",
        "__rdl_",
        "__rg_",
        "alloc::alloc::",
        "<alloc::alloc::Global",
    ];
    const NAMES: [&str; 12] = [
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
        "operator new(unsigned long)",
        "operator new[](unsigned long)",
        "__libc_malloc",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name)
}

/// Drops a Rust symbol's hash (`::h0123456789abcdef`).
fn without_hash(name: &str) -> &str {
    match name.rfind("::h") {
        Some(i) if name.len() - i == 19 && name[i + 3..].bytes().all(|c| c.is_ascii_hexdigit()) => {
            &name[..i]
        }
        _ => name,
    }
}

/// One object file, opened for symbolisation.
struct Obj {
    /// DWARF and the symbol table (`addr2line`'s loader).
    loader: addr2line::Loader,
    /// (file offset, file size, address) of each segment, to turn a file
    /// offset into the address the file's symbols use.
    segments: Vec<(u64, u64, u64)>,
    /// (address, size, name) of every defined function symbol, sorted.
    symbols: Vec<(u64, u64, String)>,
}

impl Obj {
    fn open(path: &Path) -> Option<Obj> {
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(data.as_slice()).ok()?;
        let segments = file
            .segments()
            .filter_map(|s| {
                let (off, size) = s.file_range();
                (size > 0).then_some((off, size, s.address()))
            })
            .collect();
        let mut symbols: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        symbols.sort();
        symbols.dedup_by_key(|s| s.0);
        // Debug info installed apart (Debian's -dbgsym packages): by
        // build id under /usr/lib/debug.
        let debug = file.build_id().ok().flatten().and_then(|id| {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let p = PathBuf::from(format!(
                "/usr/lib/debug/.build-id/{}/{}.debug",
                &hex[..2],
                &hex[2..]
            ));
            p.exists().then_some(p)
        });
        let loader = addr2line::Loader::new(debug.as_deref().unwrap_or(path)).ok()?;
        Some(Obj {
            loader,
            segments,
            symbols,
        })
    }

    /// The address in the file's own terms of file offset `off`.
    fn address_of(&self, off: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(o, size, _)| off >= o && off < o + size)
            .map(|&(o, _, a)| a + (off - o))
    }

    /// The symbol of the function that covers `addr` (the file's
    /// address), demangled.
    fn symbol(&self, addr: u64) -> Option<String> {
        let i = self.symbols.partition_point(|s| s.0 <= addr);
        let (start, size, name) = &self.symbols[i.checked_sub(1)?];
        (*size == 0 || addr < start + size).then(|| {
            let n = addr2line::demangle_auto(name.as_str().into(), None);
            without_hash(&n).to_string()
        })
    }

    /// The function names at `addr` (the file's address), innermost
    /// first: DWARF's frames (the outermost, the function itself, by its
    /// symbol's full name when it has one), else the symbol that covers
    /// it; and that symbol's name.
    fn names(&self, addr: u64) -> (Vec<String>, Option<String>) {
        let mut names = Vec::new();
        if let Ok(mut frames) = self.loader.find_frames(addr) {
            while let Ok(Some(f)) = frames.next() {
                if let Some(func) = f.function {
                    if let Ok(n) = func.demangle() {
                        names.push(without_hash(&n).to_string());
                    }
                }
            }
        }
        let symbol = self.symbol(addr);
        if let Some(s) = &symbol {
            match names.last_mut() {
                Some(last) => *last = s.clone(),
                None => names.push(s.clone()),
            }
        }
        (names, symbol)
    }
}

/// Open object files, by path.
#[derive(Default)]
struct Symboliser {
    objects: HashMap<String, Option<Obj>>,
}

impl Symboliser {
    /// The names at `addr` of mapping `m` of file `file`, innermost first
    /// (`file+0xoffset` when nothing names it), and the symbol of the
    /// function there.
    fn names(
        &mut self,
        m: Option<&Mapping>,
        file: &str,
        addr: u64,
    ) -> (Vec<String>, Option<String>) {
        let Some(m) = m else {
            // pcpalloc ends a stack cut at 64 frames with address 1.
            if addr == 1 {
                return (vec!["[more frames]".into()], None);
            }
            return (vec![format!("0x{addr:x}")], None);
        };
        let off = addr - m.memory_start + m.file_offset;
        let obj = self
            .objects
            .entry(file.to_string())
            .or_insert_with(|| Obj::open(Path::new(file)));
        let base = Path::new(file)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.to_string());
        let (names, symbol) = obj
            .as_ref()
            .and_then(|o| Some(o.names(o.address_of(off)?)))
            .unwrap_or_default();
        if names.is_empty() {
            (vec![format!("{base}+0x{off:x}")], symbol)
        } else {
            (names, symbol)
        }
    }
}

/// The stacks as folded lines (`outer;inner value`, what flame-graph tools
/// read), for measure `m`; stacks with nothing are left out.
pub fn folded(stacks: &[Stack], m: Measure) -> Vec<String> {
    let mut by: HashMap<String, i64> = HashMap::new();
    for s in stacks {
        let (bytes, _) = s.values.of(m);
        if bytes <= 0 {
            continue;
        }
        let key = s
            .frames
            .iter()
            .map(|f| f.replace(';', ","))
            .collect::<Vec<_>>()
            .join(";");
        *by.entry(key).or_default() += bytes;
    }
    let mut lines: Vec<String> = by.into_iter().map(|(k, v)| format!("{k} {v}")).collect();
    lines.sort();
    lines
}

/// Writes the flame graph of `stacks` for measure `m` as SVG, leaving out
/// frames narrower than `min_width` percent of the whole.
pub fn flame_graph(
    stacks: &[Stack],
    m: Measure,
    title: &str,
    min_width: f64,
    out: impl std::io::Write,
) -> Result<(), Error> {
    let lines = folded(stacks, m);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.min_width = min_width;
    opts.count_name = "bytes".to_string();
    opts.name_type = "Function:".to_string();
    if lines.is_empty() {
        return Err("nothing to draw: no stack holds any bytes".into());
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}

/// `n` bytes for people: `12.3 MiB`.
pub fn human(n: i64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// The `n` stacks that hold the most for measure `m`, as a table: bytes,
/// share of the total, objects, and the stack (innermost first, up to
/// `depth` frames).
pub fn top(stacks: &[Stack], m: Measure, n: usize, depth: usize) -> String {
    let mut rows: Vec<&Stack> = stacks.iter().filter(|s| s.values.of(m).0 > 0).collect();
    rows.sort_by_key(|s| std::cmp::Reverse(s.values.of(m).0));
    let total: i64 = rows.iter().map(|s| s.values.of(m).0).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>11} {:>6} {:>10}  stack (innermost first)",
        "bytes", "share", "objects"
    );
    for s in rows.iter().take(n) {
        let (bytes, objects) = s.values.of(m);
        let share = if total > 0 {
            100.0 * bytes as f64 / total as f64
        } else {
            0.0
        };
        let frames: Vec<&str> = s
            .frames
            .iter()
            .rev()
            .take(depth)
            .map(String::as_str)
            .collect();
        let more = if s.frames.len() > depth { " < …" } else { "" };
        let _ = writeln!(
            out,
            "{:>11} {:>5.1}% {:>10}  {}{more}",
            human(bytes),
            share,
            objects,
            frames.join(" < ")
        );
    }
    let _ = writeln!(
        out,
        "{:>11} 100.0% {:>10}  total of {} stacks",
        human(total),
        rows.iter().map(|s| s.values.of(m).1).sum::<i64>(),
        rows.len()
    );
    out
}

/// The total bytes (estimated) of stacks whose frames include a function
/// whose name contains `needle`, for measure `m`.
pub fn bytes_in(stacks: &[Stack], m: Measure, needle: &str) -> i64 {
    stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.contains(needle)))
        .map(|s| s.values.of(m).0)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_rust_hashes() {
        assert_eq!(without_hash("foo::bar::h0123456789abcdef"), "foo::bar");
        assert_eq!(without_hash("foo::hello"), "foo::hello");
    }

    #[test]
    fn folds_outermost_first() {
        let s = Stack {
            frames: vec!["main".into(), "a;b".into()],
            values: Values {
                live_bytes: 10,
                ..Values::default()
            },
        };
        assert_eq!(folded(&[s.clone(), s], Measure::Live), vec!["main;a,b 20"]);
    }

    #[test]
    fn knows_the_allocator_frames() {
        assert!(is_allocator_frame("pcpalloc::runtime::paths::alloc_big"));
        assert!(is_allocator_frame("__rust_alloc"));
        assert!(is_allocator_frame("malloc"));
        assert!(!is_allocator_frame("alloc::raw_vec::RawVec<T>::grow_one"));
        assert!(!is_allocator_frame("main"));
    }
}
