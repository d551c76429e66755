//! Builds C++'s operator new (in C, with unwind tables: it throws) and
//! gives the library its SONAME.

fn main() {
    println!("cargo:rerun-if-changed=src/cxx_new.c");
    cc::Build::new()
        .file("src/cxx_new.c")
        .flag("-fexceptions")
        .flag("-fvisibility=hidden")
        .warnings(true)
        .compile("pcpalloc_cxx_new");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpcpalloc.so");
}
