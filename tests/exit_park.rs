//! Issue 42, the thread storm: an exiting thread's heap keeps up to
//! 256 KiB of its empty slabs parked (`runtime/thread.rs`,
//! `EXIT_PARK_BYTES`), and the next thread, which adopts the heap, takes
//! them instead of new ones whose pages it would fault in.

mod support;

use support::*;

/// A value `name N` of the program's line.
fn value(line: &str, name: &str) -> i64 {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == name {
            return words.next().unwrap().parse().unwrap();
        }
    }
    panic!("no {name} in {line}");
}

/// 200 threads one after another, each with one object of 12 size
/// classes (12 slabs): the threads after the first make at most 5 new
/// slabs each — 8 of their 12 come parked from the thread before (before:
/// 12 each, 2,401 slabs in all; now 809).
#[test]
fn next_thread_takes_the_exited_ones_slabs() {
    let run = on_pcpalloc("exit_park", &["200"], &[], QUICK);
    let line = run.assert_ok().stdout();
    let first = value(&line, "slabs_created_first");
    let all = value(&line, "slabs_created");
    let per_thread = (all - first) as f64 / 199.0;
    eprintln!("{line}per later thread: {per_thread:.2} new slabs");
    assert!(first >= 12, "the first thread made {first} slabs\n{line}");
    assert!(
        per_thread <= 5.0,
        "each later thread made {per_thread:.2} new slabs (at most 5: 8 of its 12 parked by the one before)\n{line}"
    );
}
