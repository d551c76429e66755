//! Building libpcpalloc.so for programs run under `LD_PRELOAD`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the bench crate's parent directory).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds libpcpalloc.so (release) in `target_dir` — its own target
/// directory, since cargo holds the main one while benchmarks and tests
/// run — and returns its path, or None if the build failed.
pub fn build_lib(target_dir: &Path) -> Option<PathBuf> {
    let ok = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "pcpalloc-preload",
            "--target-dir",
        ])
        .arg(target_dir)
        .current_dir(workspace())
        .status()
        .ok()?
        .success();
    let lib = target_dir.join("release/libpcpalloc.so");
    (ok && lib.exists()).then_some(lib)
}
