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
