//! The examples build and run: the Rust global allocator one, and the C
//! program under LD_PRELOAD.

mod support;

use std::process::Command;

use support::*;

#[test]
fn global_allocator_example_runs() {
    // Its own target directory (cargo holds the lock on the main one while
    // tests run), shared with the preload library's build.
    let dir = target_dir().join("preload");
    let traces =
        std::env::temp_dir().join(format!("pcpalloc-example-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&traces);
    std::fs::create_dir_all(&traces).unwrap();
    let o = Command::new(env!("CARGO"))
        .args([
            "run",
            "--quiet",
            "--release",
            "--example",
            "global_allocator",
            "--target-dir",
        ])
        .arg(&dir)
        .current_dir(root())
        .env("PCPALLOC_TRACE", traces.join("t"))
        .output()
        .expect("run cargo");
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("200000 entries live in 4 maps"), "{out}");
    // The Rust global allocator records a trace too: one file, this
    // process's, with the format's magic and a few hundred thousand
    // 24-byte events (the maps' 200000 entries, allocated and freed).
    let files: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    assert_eq!(&bytes[..8], b"PCPTRACE");
    assert!(bytes.len() > 200_000 * 24, "{} bytes", bytes.len());
    let _ = std::fs::remove_dir_all(&traces);
    let allocated: u64 = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("allocated")?
                .trim()
                .strip_suffix(" KiB")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{out}"));
    assert!(allocated > 4 << 10, "the maps hold several MiB: {out}");
}

#[test]
fn c_example_runs_under_preload() {
    if !have_preload_lib() {
        return skip("libpcpalloc.so is built by the workspace (this is the packaged crate)");
    }
    let src = root().join("examples/preload.c");
    let bin = std::env::temp_dir().join(format!("pcpalloc-example-{}", std::process::id()));
    let status = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success());
    let o = run_ok(&mut preloaded(&bin));
    let _ = std::fs::remove_file(&bin);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("malloc is pcpalloc"), "{out}");
    assert!(out.contains("pcpalloc_stat: resident_bytes"), "{out}");
    assert!(out.ends_with("done\n"), "{out}");
}
