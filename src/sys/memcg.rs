//! The memory cgroup (the kernel's memcg) the process runs in, read
//! without allocating: which level of its hierarchy limits it, that
//! level's limit, and what it holds. Part of the Linux backend of the
//! platform contract (see `sys/mod.rs`).
//!
//! A limit binds a cgroup and everything below it, so the process is
//! limited by the least limit of its own cgroup and its ancestors; a
//! systemd service's `MemoryMax=` sits on the service, a container's on
//! its cgroup, and the process may be in a child of either. So the levels
//! are walked from the process's cgroup (as `/proc/self/cgroup` names it)
//! up to the root, and the level with the least limit is the one followed.
//!
//! - **cgroup v2** (`0::/path`, mounted at `/sys/fs/cgroup`): a level's
//!   limit is the lesser of `memory.max` (past it the OOM killer runs)
//!   and `memory.high` (past it the kernel throttles the cgroup and
//!   reclaims; with no swap an anonymous page cannot be reclaimed, so
//!   the program crawls); `max` means none. What it holds is
//!   `memory.current`.
//! - **cgroup v1** (`N:memory:/path`, mounted at
//!   `/sys/fs/cgroup/memory`): `memory.limit_in_bytes` (about 2^63: none)
//!   and `memory.usage_in_bytes`. `memory.soft_limit_in_bytes` is not
//!   read: the kernel only acts on it when the whole machine is short,
//!   and then by reclaiming, which an anonymous page without swap escapes.
//!
//! What a cgroup holds includes its page cache, which the kernel reclaims
//! rather than kill anyone: the usage that counts is the usage less the
//! file pages (`memory.stat`: v2 `file`, v1 `total_cache`), with shared
//! memory (tmpfs, which cannot be dropped) counted back in (`shmem`,
//! `total_shmem`). A process in a cgroup that reads big files would
//! otherwise always look at its limit.
//!
//! A directory can also be named (`PCPALLOC_CGROUP`): its files are read
//! as the limiting level, v1 if it holds `memory.limit_in_bytes`, else
//! v2 — for a hierarchy mounted elsewhere, and for tests, which give a
//! directory of plain files.

use crate::util::{buf::FixedBuf, parse_u64};

use super::machine::{first_line, scan_lines};

/// The longest cgroup directory path followed.
pub const MEMCG_PATH_MAX: usize = 384;

/// One level of the process's memory cgroup: the directory its files are
/// read from, and whether it is of cgroup v2.
#[derive(Clone, Copy)]
pub struct MemCgroup {
    dir: [u8; MEMCG_PATH_MAX],
    len: usize,
    v2: bool,
}

impl MemCgroup {
    /// No level (filled in place by [`find_mem_cgroup`]).
    const EMPTY: MemCgroup = MemCgroup {
        dir: [0; MEMCG_PATH_MAX],
        len: 0,
        v2: false,
    };

    /// Makes `out` the level at `dir` (without a trailing `/`), in place:
    /// the struct is too big for the stacks a first allocation may run on
    /// to hold copies of it. False, `out` untouched, if the path is too
    /// long.
    fn set(out: &mut Option<MemCgroup>, dir: &[u8], v2: bool) -> bool {
        if !fits(dir) {
            return false;
        }
        let m = out.get_or_insert(MemCgroup::EMPTY);
        m.dir[..dir.len()].copy_from_slice(dir);
        m.len = dir.len();
        m.v2 = v2;
        true
    }

    /// The directory.
    fn dir(&self) -> &[u8] {
        &self.dir[..self.len]
    }

    /// Whether the level is of cgroup v2.
    #[cfg(test)]
    fn is_v2(&self) -> bool {
        self.v2
    }

    /// The limit set at this level in bytes: v2 the lesser of
    /// `memory.max` and `memory.high`, v1 `memory.limit_in_bytes`. `None`
    /// when it sets none.
    pub(crate) fn limit(&self) -> Option<u64> {
        limit_at(self.dir(), self.v2)
    }

    /// What this level holds that the kernel cannot reclaim without swap,
    /// in bytes: its usage less its file pages, shared memory counted
    /// back in (see the module docs). `None` if the usage cannot be read;
    /// the usage as it is if `memory.stat` cannot.
    pub(crate) fn usage(&self) -> Option<u64> {
        let (usage, file, shmem): (&[u8], &[&[u8]; 2], &[&[u8]; 2]) = if self.v2 {
            (
                b"memory.current",
                &[b"file", b"file"],
                &[b"shmem", b"shmem"],
            )
        } else {
            (
                b"memory.usage_in_bytes",
                &[b"total_cache", b"cache"],
                &[b"total_shmem", b"shmem"],
            )
        };
        let usage = number_in(self.dir(), usage)?;
        let mut path = FixedBuf::<{ MEMCG_PATH_MAX + 8 }>::new();
        path.push_bytes(self.dir());
        path.push_bytes(b"/memory.stat");
        let Some(stat) = path.as_cstr() else {
            return Some(usage);
        };
        // The value of each name of the two lists (at most two each), the
        // first the file has taken (streamed a line at a time:
        // `machine::scan_lines`).
        let (mut file_v, mut shmem_v) = ([None; 2], [None; 2]);
        scan_lines::<()>(stat, |l| {
            for (names, got) in [(file, &mut file_v), (shmem, &mut shmem_v)] {
                for (n, g) in names.iter().zip(got.iter_mut()) {
                    if g.is_none() {
                        *g = stat_field(l, n);
                    }
                }
            }
            None
        });
        let first = |v: [Option<u64>; 2]| v.into_iter().flatten().next();
        let reclaimable = first(file_v)
            .unwrap_or(0)
            .saturating_sub(first(shmem_v).unwrap_or(0));
        Some(usage.saturating_sub(reclaimable))
    }
}

/// Whether a cgroup directory path leaves room for
/// "/memory.limit_in_bytes" and the NUL in a path buffer.
fn fits(dir: &[u8]) -> bool {
    dir.len() + 32 <= MEMCG_PATH_MAX
}

/// The number in the file `leaf` of the cgroup directory `dir`; `None`
/// if it cannot be read or is not a number (`max`).
fn number_in(dir: &[u8], leaf: &[u8]) -> Option<u64> {
    let mut path = FixedBuf::<{ MEMCG_PATH_MAX + 8 }>::new();
    path.push_bytes(dir);
    path.push_bytes(b"/");
    path.push_bytes(leaf);
    if path.truncated {
        return None;
    }
    first_line(path.as_cstr()?, parse_u64)
}

/// The limit set by the cgroup directory `dir` (see [`MemCgroup::limit`]).
fn limit_at(dir: &[u8], v2: bool) -> Option<u64> {
    if v2 {
        match (
            number_in(dir, b"memory.max"),
            number_in(dir, b"memory.high"),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    } else {
        // "No limit" reads as PAGE_COUNTER_MAX pages, about 2^63 bytes.
        number_in(dir, b"memory.limit_in_bytes").filter(|&v| v < 1 << 62)
    }
}

/// The value of `line` if it is `name value` (a line of `memory.stat`).
fn stat_field(line: &[u8], name: &[u8]) -> Option<u64> {
    parse_u64(line.strip_prefix(name)?.strip_prefix(b" ")?)
}

/// Makes `out` the level of the process's memory cgroup that limits it:
/// the named directory `dir` if given, else the level of least limit from
/// the process's cgroup up (v2 first, then v1; see the module docs);
/// `None` when no level sets a limit, or the hierarchy cannot be read.
/// Written in place, with one path buffer at a time on the stack: this
/// runs at initialisation, which may be on a signal handler's 8 KiB
/// alternate stack.
pub fn find_mem_cgroup(dir: Option<&[u8]>, out: &mut Option<MemCgroup>) {
    *out = None;
    if let Some(d) = dir {
        let d = d.strip_suffix(b"/").unwrap_or(d);
        let v1_files = number_in(d, b"memory.limit_in_bytes").is_some();
        MemCgroup::set(out, d, !v1_files);
        return;
    }
    for v2 in [true, false] {
        // "0::/some/path" on cgroup v2, "N:memory:/path" on v1 (the
        // controller list may name several). The path is copied out of
        // the line buffer, gone once the file is read.
        let mut rel = FixedBuf::<MEMCG_PATH_MAX>::new();
        let found = scan_lines(c"/proc/self/cgroup", |l| {
            let path = if v2 {
                l.strip_prefix(b"0::")?
            } else {
                let mut parts = l.splitn(3, |&c| c == b':');
                let (_id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
                ctrls
                    .split(|&c| c == b',')
                    .any(|c| c == b"memory")
                    .then_some(path)?
            };
            rel.push_bytes(path.trim_ascii());
            Some(())
        });
        if found.is_some() && !rel.truncated {
            let root: &[u8] = if v2 {
                b"/sys/fs/cgroup"
            } else {
                b"/sys/fs/cgroup/memory"
            };
            least_limit(root, rel.as_bytes(), v2, out);
            if out.is_some() {
                return;
            }
        }
    }
}

/// Makes `out` the level of least limit among the cgroup `rel` of the
/// hierarchy mounted at `root` and its ancestors (left as it is if none
/// sets one).
#[inline(never)]
fn least_limit(root: &[u8], rel: &[u8], v2: bool, out: &mut Option<MemCgroup>) {
    let mut rel = rel.strip_suffix(b"/").unwrap_or(rel);
    let mut best = u64::MAX;
    loop {
        let mut dir = FixedBuf::<MEMCG_PATH_MAX>::new();
        dir.push_bytes(root);
        dir.push_bytes(rel);
        if !dir.truncated {
            if let Some(l) = limit_at(dir.as_bytes(), v2) {
                if l < best && MemCgroup::set(out, dir.as_bytes(), v2) {
                    best = l;
                }
            }
        }
        match rel.iter().rposition(|&c| c == b'/') {
            Some(i) if !rel.is_empty() => rel = &rel[..i],
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(files: &[(&str, &str)]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "pcpalloc-memcg-{}-{}",
            std::process::id(),
            files.len()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (name, text) in files {
            std::fs::write(d.join(name), text).unwrap();
        }
        d
    }

    #[test]
    fn a_named_v2_directory_follows_the_lesser_of_max_and_high() {
        let d = fake(&[
            ("memory.max", "max\n"),
            ("memory.high", "268435456\n"),
            ("memory.current", "104857600\n"),
            (
                "memory.stat",
                "anon 73400320\nfile 41943040\nkernel 1048576\nshmem 10485760\n",
            ),
        ]);
        let mut m = None;
        find_mem_cgroup(Some(d.to_str().unwrap().as_bytes()), &mut m);
        let m = m.unwrap();
        assert!(m.is_v2());
        assert_eq!(m.limit(), Some(256 << 20));
        // 100 MiB less 40 MiB of files, 10 of them shared memory.
        assert_eq!(m.usage(), Some(70 << 20));
        std::fs::write(d.join("memory.max"), "134217728\n").unwrap();
        assert_eq!(m.limit(), Some(128 << 20), "read again, not remembered");
        std::fs::write(d.join("memory.high"), "max\n").unwrap();
        std::fs::write(d.join("memory.max"), "max\n").unwrap();
        assert_eq!(m.limit(), None);
        std::fs::remove_file(d.join("memory.stat")).unwrap();
        assert_eq!(
            m.usage(),
            Some(100 << 20),
            "no memory.stat: the usage as is"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_named_v1_directory_reads_limit_in_bytes() {
        let d = fake(&[
            ("memory.limit_in_bytes", "9223372036854771712\n"),
            ("memory.usage_in_bytes", "52428800\n"),
            (
                "memory.stat",
                "cache 999\nrss 1\nshmem 0\ntotal_cache 20971520\ntotal_rss 1\ntotal_shmem 0\n",
            ),
        ]);
        let mut m = None;
        find_mem_cgroup(Some(format!("{}/", d.display()).as_bytes()), &mut m);
        let m = m.unwrap();
        assert!(!m.is_v2());
        assert_eq!(m.limit(), None, "about 2^63: no limit");
        assert_eq!(m.usage(), Some(30 << 20));
        std::fs::write(d.join("memory.limit_in_bytes"), "251658240\n").unwrap();
        assert_eq!(m.limit(), Some(240 << 20));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn stat_fields_match_whole_names() {
        let s = b"file_mapped 5\nfile 7\nshmem_thp 1\nshmem 3";
        let find = |name: &[u8]| s.split(|&c| c == b'\n').find_map(|l| stat_field(l, name));
        assert_eq!(find(b"file"), Some(7));
        assert_eq!(find(b"shmem"), Some(3));
        assert_eq!(find(b"anon"), None);
    }

    #[test]
    fn the_process_cgroup_is_readable() {
        let mut m = None;
        find_mem_cgroup(None, &mut m);
        if let Some(m) = m {
            assert!(m.limit().is_some_and(|l| l > 0));
            assert!(m.usage().is_some_and(|u| u > 0));
        }
    }
}
