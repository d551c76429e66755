//! The README documents every PCPALLOC_* variable the allocator reads.

#[test]
fn readme_lists_every_tunable() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for t in pcpalloc::internals::TUNABLES {
        assert!(
            readme.contains(&format!("`{}`", t.name)),
            "README.md does not document {}",
            t.name
        );
    }
}

#[test]
fn readme_opens_with_how_to_use_it() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let first_screen: String = readme.lines().take(45).collect::<Vec<_>>().join("\n");
    for what in [
        "[dependencies]",
        "pcpalloc = { git = \"https://github.com/pcpalloc/pcpalloc\" }",
        "#[global_allocator]",
        "static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;",
        "LD_PRELOAD=",
        "(#configuration)",
    ] {
        assert!(
            first_screen.contains(what),
            "the README's first screen lacks {what}"
        );
    }
    // The first two commands: the main job, then the tests — which is
    // what CI runs.
    let commands: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("cargo ") || l.starts_with("LD_PRELOAD="))
        .take(2)
        .collect();
    assert!(
        commands[0].starts_with("cargo bench --bench workloads"),
        "{commands:?}"
    );
    assert!(
        commands[1].starts_with("cargo test --workspace --profile tests "),
        "{commands:?}"
    );
    // The packaged crate has no CI script (`cargo package` leaves .ci/
    // out): the README's commands are checked, the script is not.
    let Ok(ci) = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")) else {
        eprintln!("SKIPPED the check of .ci/run: not in the packaged crate");
        return;
    };
    assert!(
        ci.contains("\ncargo test --workspace --profile tests\n"),
        "CI must run the README's test command"
    );
}

/// Every image the README shows is a file of the crate, so it resolves in
/// the repository and in the packaged crate alike (`cargo package` keeps
/// docs/'s pictures).
#[test]
fn readme_images_are_files_of_the_crate() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let image = regex::Regex::new(r"!\[[^\]\n]*\]\(([^)\s]+)\)").unwrap();
    let mut n = 0;
    for c in image.captures_iter(&readme) {
        let target = &c[1];
        n += 1;
        if !target.starts_with("https://") {
            assert!(
                std::path::Path::new(root).join(target).is_file(),
                "the README's image {target} is not in the crate"
            );
        }
    }
    assert!(n >= 4, "found {n} images");
}
