//! Building libpcpalloc.so for programs run under `LD_PRELOAD`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the bench crate's parent directory).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The target directory the running program was built in — wherever
/// `CARGO_TARGET_DIR`, `--target-dir` or cargo's configuration put it:
/// the nearest directory above the executable that cargo marked with a
/// `CACHEDIR.TAG`. Else `$CARGO_TARGET_DIR` (relative to the workspace),
/// else the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe
            .ancestors()
            .skip(1)
            .find(|d| d.join("CACHEDIR.TAG").is_file())
        {
            return dir.to_path_buf();
        }
    }
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => workspace().join(d),
        None => workspace().join("target"),
    }
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
