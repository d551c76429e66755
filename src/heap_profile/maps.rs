//! The process's mappings, read from `/proc/self/maps` through a fixed
//! buffer (no allocation): what a profile needs to be symbolised later —
//! which file each code address lies in, and where.

/// One line of `/proc/self/maps`.
pub(crate) struct Mapping<'a> {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
    /// Offset in the file of `start`.
    pub offset: u64,
    /// Executable.
    pub exec: bool,
    /// The file's inode (0 for anonymous memory).
    pub inode: u64,
    /// The file's path, or a name like `[stack]` (may be empty).
    pub path: &'a [u8],
}

/// Longest line kept whole (a path of a thousand bytes and the fields
/// before it); a longer one is skipped. Small, with [`CHUNK`], so that a
/// dump inside an allocation fits a thread's 16 KiB stack.
const LINE_MAX: usize = 1024 + 128;
/// Bytes read at a time.
const CHUNK: usize = 1024;

/// Calls `f` on every mapping of the process, in address order. Reads
/// nothing (and calls nothing) if the file cannot be opened.
pub(crate) fn for_each(mut f: impl FnMut(&Mapping<'_>)) {
    // SAFETY: a NUL-terminated path; open has no other preconditions.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return;
    }
    let mut line = [0u8; LINE_MAX];
    let mut len = 0;
    let mut too_long = false;
    let mut chunk = [0u8; CHUNK];
    loop {
        // SAFETY: chunk is a valid buffer of CHUNK bytes.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), CHUNK) };
        if n < 0 {
            // SAFETY: errno's location is valid for this thread.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            break;
        }
        if n == 0 {
            break;
        }
        for &c in &chunk[..n as usize] {
            if c == b'\n' {
                if !too_long {
                    if let Some(m) = parse(&line[..len]) {
                        f(&m);
                    }
                }
                len = 0;
                too_long = false;
            } else if len < LINE_MAX {
                line[len] = c;
                len += 1;
            } else {
                too_long = true;
            }
        }
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
}

/// Parses `start-end perms offset dev inode path`.
fn parse(line: &[u8]) -> Option<Mapping<'_>> {
    let mut fields = line.splitn(6, |&c| c == b' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = hex(fields.next()?)?;
    let _dev = fields.next()?;
    let inode = dec(fields.next()?)?;
    let path = fields.next().unwrap_or(b"").trim_ascii_start();
    let dash = range.iter().position(|&c| c == b'-')?;
    Some(Mapping {
        start: hex(&range[..dash])? as usize,
        end: hex(&range[dash + 1..])? as usize,
        offset,
        exec: perms.get(2) == Some(&b'x'),
        inode,
        path,
    })
}

fn hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        let d = (c as char).to_digit(16)?;
        acc.checked_mul(16)?.checked_add(u64::from(d))
    })
}

fn dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        let d = (c as char).to_digit(10)?;
        acc.checked_mul(10)?.checked_add(u64::from(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_line() {
        let m = parse(b"7f12a000-7f12b000 r-xp 00002000 08:01 131 /usr/lib/libc.so.6").unwrap();
        assert_eq!((m.start, m.end, m.offset), (0x7f12a000, 0x7f12b000, 0x2000));
        assert!(m.exec);
        assert_eq!(m.inode, 131);
        assert_eq!(m.path, b"/usr/lib/libc.so.6");
        let anon = parse(b"7f000000-7f001000 rw-p 00000000 00:00 0 ").unwrap();
        assert!(!anon.exec && anon.path.is_empty());
    }

    #[test]
    fn finds_its_own_code() {
        let here = finds_its_own_code as *const () as usize;
        let mut found = false;
        for_each(|m| found |= m.exec && m.start <= here && here < m.end && m.inode != 0);
        assert!(found);
    }
}
