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

/// Every relative link and image of the README and of the manual in
/// docs/ names a file of the repository, and an anchor a heading of that
/// file. (In the packaged crate, which leaves docs/'s pages out, only the
/// README's images are checked: crates.io resolves its other links
/// against the repository.)
#[test]
fn readme_and_manual_links_resolve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let packaged = !root.join("docs/architecture.md").is_file();
    let mut pages = vec![root.join("README.md")];
    if !packaged {
        for e in std::fs::read_dir(root.join("docs")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            }
        }
    }
    let link = regex::Regex::new(r"(!?)\[[^\]\n]*\]\(([^)\s]+)\)").unwrap();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = page.parent().unwrap();
        for c in link.captures_iter(&text) {
            let (image, target) = (&c[1] == "!", &c[2]);
            if target.starts_with("https://") || target.starts_with("http://") {
                continue;
            }
            if packaged && !image {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target, None),
            };
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            assert!(
                path.exists(),
                "{}: link to {target}: no such file",
                page.display()
            );
            if let Some(a) = anchor {
                let body = std::fs::read_to_string(&path).unwrap();
                let found = body
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|h| anchor_of(h.trim_start_matches('#')))
                    .any(|h| h == a);
                assert!(
                    found,
                    "{}: link to {target}: no such heading",
                    page.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
}

/// GitHub's anchor for a heading.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}
