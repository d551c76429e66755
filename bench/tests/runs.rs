//! The benchmark's helpers: figures shown as median and range, and the
//! target directory it writes to.

use pcpalloc_bench::preload::target_dir;
use pcpalloc_bench::runs::Runs;

#[test]
fn figures_show_the_median_and_the_range() {
    let r: Runs = [3.0, 1.0, 2.0, f64::NAN].into_iter().collect();
    assert_eq!(r.len(), 3);
    assert_eq!(r.show(1), "2.0 (1.0–3.0)");
    assert_eq!(r.map(|v| v * 10.0).show(0), "20 (10–30)");
    let r: Runs = [4.0, 1.0].into_iter().collect();
    assert_eq!(r.median(), 2.5);
    assert_eq!(r.show_with(|v| format!("{v:.1}x")), "2.5x (1.0x–4.0x)");
    assert_eq!(Runs(vec![7.0]).show(0), "7");
    assert_eq!(Runs::new().show(0), "-");
}

#[test]
fn the_target_directory_is_the_one_this_was_built_in() {
    // This test's executable sits in <target>/<profile>/deps/: the target
    // directory is the one above it that cargo tagged, wherever
    // CARGO_TARGET_DIR put it.
    let exe = std::env::current_exe().unwrap();
    let t = target_dir();
    assert!(
        exe.starts_with(&t),
        "{} not under {}",
        exe.display(),
        t.display()
    );
    assert!(t.join("CACHEDIR.TAG").is_file(), "{}", t.display());
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        let d = std::path::Path::new(&d);
        if d.is_absolute() {
            assert_eq!(
                std::fs::canonicalize(d).unwrap(),
                std::fs::canonicalize(&t).unwrap()
            );
        }
    }
}
