//! Small allocation-free helpers: fixed buffers for text, integer parsing,
//! and bit tricks used across layers.

pub(crate) mod buf;
pub(crate) mod text;

/// `p`, in a register the compiler cannot fold back into an indexed
/// memory operand: the loads and stores through the result address
/// `[reg]` or `[reg + disp]`. On CPUs with memory renaming (this Xeon) a
/// store forwards to the next load of the same address with no delay only
/// for such addresses; through an indexed one (`[base + i * 8]`) the load
/// waits for the store as if it had no renaming — a chain of pops through
/// one list head took 2.8 ns a pop indexed against 1.5 ns (a C loop of
/// the same loads and stores). The fast paths' per-class words, which
/// consecutive calls load and store, go through this (`heap/bin.rs`).
#[inline(always)]
// The pointer itself goes through the asm (not its address alone, with
// `map_addr`): the compiler then re-derived the result from the original
// pointer plus the difference, an indexed operand again.
#[allow(clippy::pointers_in_nomem_asm_block)]
#[cfg_attr(not(all(target_arch = "x86_64", not(miri))), allow(unused_mut))]
pub(crate) fn addressed_by_register<T>(mut p: *mut T) -> *mut T {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: an empty asm that only claims to change the register holding
    // `p` (it does not): no memory, stack or flags are touched, and `p`
    // keeps its provenance.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack, preserves_flags));
    }
    p
}

/// Rounds `x` down to a power of two (`x` > 0), as the kernel's
/// `rounddown_pow_of_two`.
#[inline]
pub(crate) const fn rounddown_pow_of_two(x: usize) -> usize {
    1 << (usize::BITS - 1 - x.leading_zeros())
}

/// The smallest order `o` with `2^o >= n` (`n` ≥ 1).
#[inline]
pub(crate) const fn order_for_pages(n: usize) -> u32 {
    if n <= 1 {
        0
    } else {
        usize::BITS - (n - 1).leading_zeros()
    }
}

/// Parses a decimal size with an optional unit, powers of 1024: `K`/`KiB`,
/// `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (any case, `B` alone means bytes), e.g.
/// `64M` or `64MiB`. Returns `None` on anything else, or on overflow.
pub(crate) fn parse_size(s: &[u8]) -> Option<u64> {
    let s = s.trim_ascii();
    let split = s
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    const UNITS: [(&[u8], u32); 10] = [
        (b"", 0),
        (b"b", 0),
        (b"k", 10),
        (b"kib", 10),
        (b"m", 20),
        (b"mib", 20),
        (b"g", 30),
        (b"gib", 30),
        (b"t", 40),
        (b"tib", 40),
    ];
    let (_, shift) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit))?;
    let v = parse_u64(digits)?;
    v.checked_mul(1u64 << shift)
}

/// Writes `s` as a JSON string: quoted, with `"`, `\` and control
/// characters escaped, and bytes that are not UTF-8 as U+FFFD.
pub(crate) fn write_json_string(w: &mut dyn core::fmt::Write, s: &[u8]) -> core::fmt::Result {
    w.write_str("\"")?;
    for chunk in s.utf8_chunks() {
        for ch in chunk.valid().chars() {
            match ch {
                '"' => w.write_str("\\\"")?,
                '\\' => w.write_str("\\\\")?,
                c if (c as u32) < 0x20 => write!(w, "\\u{:04x}", c as u32)?,
                c => w.write_char(c)?,
            }
        }
        if !chunk.invalid().is_empty() {
            w.write_str("\u{fffd}")?;
        }
    }
    w.write_str("\"")
}

/// Parses a plain decimal `u64` (surrounding ASCII whitespace allowed).
pub(crate) fn parse_u64(s: &[u8]) -> Option<u64> {
    let s = s.trim_ascii();
    if !s.first()?.is_ascii_digit() {
        return None; // no sign
    }
    core::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size(b"64M"), Some(64 << 20));
        assert_eq!(parse_size(b"64MiB"), Some(64 << 20));
        assert_eq!(parse_size(b"3kib"), Some(3 << 10));
        assert_eq!(parse_size(b"1TiB"), Some(1 << 40));
        assert_eq!(parse_size(b"5B"), Some(5));
        assert_eq!(parse_size(b"5MB"), None);
        assert_eq!(parse_size(b"M"), None);
        assert_eq!(parse_size(b" 2g\n"), Some(2 << 30));
        assert_eq!(parse_size(b"4096"), Some(4096));
        assert_eq!(parse_size(b"12x"), None);
        assert_eq!(parse_size(b""), None);
        assert_eq!(parse_size(b"99999999999999999999T"), None);
    }

    #[test]
    fn orders_and_powers() {
        assert_eq!(order_for_pages(1), 0);
        assert_eq!(order_for_pages(2), 1);
        assert_eq!(order_for_pages(3), 2);
        assert_eq!(order_for_pages(1024), 10);
        assert_eq!(rounddown_pow_of_two(96), 64);
        assert_eq!(rounddown_pow_of_two(1), 1);
    }
}
