#!/bin/sh
# Builds the peers Debian does not package, as LD_PRELOAD libraries, from
# the C and C++ sources their Rust crates carry (crates.io; pinned):
#   libmimalloc-sys 0.1.49 -> mimalloc 2.3.2 and 3.3.2
#   snmalloc-sys 0.7.6     -> snmalloc (0.7.x)
# into $CARGO_TARGET_DIR/peers (default target/peers), where the workload
# benchmark's LD_PRELOAD sections find them. Needs cargo, gcc and g++.
# The flags follow each project's CMake build of its shared library
# (release, override on, initial-exec TLS).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out=$target/peers
# A target directory made here first gets the tag cargo gives the ones it
# makes, which the benchmark looks for to find its target directory.
if [ ! -d "$target" ]; then
  mkdir -p "$target"
  printf '%s\n' 'Signature: 8a477f597d28d172789f06886806bc55' \
    '# This file is a cache directory tag created by cargo.' \
    '# For information about cache directory tags see https://bford.info/cachedir/' \
    > "$target/CACHEDIR.TAG"
fi
mkdir -p "$out"
work=$out/src
if [ ! -d "$work/vendor" ]; then
  mkdir -p "$work/fetch/src"
  cat > "$work/fetch/Cargo.toml" <<'EOF'
[package]
name = "peer-sources"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
libmimalloc-sys = { version = "=0.1.49", default-features = false }
snmalloc-sys = { version = "=0.7.6", default-features = false }

[workspace]
EOF
  echo > "$work/fetch/src/lib.rs"
  (cd "$work/fetch" && cargo vendor --versioned-dirs -q ../vendor >/dev/null)
fi
mi=$work/vendor/libmimalloc-sys-0.1.49/c_src/mimalloc
for v in v2 v3; do
  gcc -O3 -DNDEBUG -fPIC -shared -fvisibility=hidden -ftls-model=initial-exec \
    -fno-builtin-malloc -DMI_SHARED_LIB -DMI_SHARED_LIB_EXPORT -DMI_MALLOC_OVERRIDE \
    -I "$mi/$v/include" "$mi/$v/src/static.c" -o "$out/libmimalloc-$v.so" -lpthread
done
sn=$work/vendor/snmalloc-sys-0.7.6/upstream
g++ -std=c++20 -O3 -DNDEBUG -fPIC -shared -mcx16 -fomit-frame-pointer \
  -ftls-model=initial-exec -ffunction-sections -DSNMALLOC_USE_WAIT_ON_ADDRESS=1 \
  -DSNMALLOC_CHECK_LOADS=false -DSNMALLOC_PAGEID=false -I "$sn/src" \
  "$sn/src/snmalloc/override/malloc.cc" "$sn/src/snmalloc/override/new.cc" \
  -static-libstdc++ -o "$out/libsnmallocshim.so" -lpthread
echo "peers built in $out: mimalloc 2.3.2, mimalloc 3.3.2, snmalloc"
