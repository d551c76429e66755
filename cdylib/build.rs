//! Builds C++'s operator new (in C, with unwind tables: it throws), gives
//! the library its SONAME, and makes it impossible to unload.

fn main() {
    println!("cargo:rerun-if-changed=src/cxx_new.c");
    cc::Build::new()
        .file("src/cxx_new.c")
        .flag("-fexceptions")
        .flag("-fvisibility=hidden")
        .warnings(true)
        .compile("pcpalloc_cxx_new");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpcpalloc.so");
    // Never unloaded: dlclose must not unmap the code of the maintenance
    // thread, the fork handlers or the thread-exit key's destructor, all of
    // which outlive any handle a program holds.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
