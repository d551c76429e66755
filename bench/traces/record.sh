#!/usr/bin/env bash
# Records the replay's traces of programs nobody here wrote, under
# LD_PRELOAD=libpcpalloc.so with PCPALLOC_TRACE (one file per process):
#
#   kbuild   gcc -O2 -c over the C sources of Lua 5.4, Lua 5.3 and zstd
#            (fetched with cargo), 4 compilers at a time: the seeds' kbuild
#   redis    redis-server under redis-benchmark on loopback: the network case
#   python   CPython running a slice of its own test suite
#
# Usage: bench/traces/record.sh OUTDIR [kbuild|redis|python]...
# Then:  cargo run --release --bin pcpalloc-replay -- OUTDIR/kbuild/t.* --cpus 224
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(kbuild redis python)

cargo build --release --quiet -p pcpalloc-preload --manifest-path "$root/Cargo.toml"
lib="$root/target/release/libpcpalloc.so"

trace_dir() { rm -rf "$out/$1"; mkdir -p "$out/$1"; echo "$out/$1"; }

kbuild() {
  local dir src objs
  dir="$(trace_dir kbuild)"
  cargo fetch --quiet --manifest-path "$root/bench/traces/sources/Cargo.toml"
  src="$(cargo metadata --format-version 1 --manifest-path "$root/bench/traces/sources/Cargo.toml" |
    python3 -c 'import json,sys,os
m = json.load(sys.stdin)
print("\n".join(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] in ("lua-src", "zstd-sys")))')"
  objs="$(mktemp -d)"
  # One compile per line: the source and its include directories.
  {
    for d in $src; do
      for lua in "$d"/lua-5.4.7 "$d"/lua-5.3.6; do
        [ -d "$lua" ] && for f in "$lua"/*.c; do echo "$f -I$lua"; done
      done
      if [ -d "$d/zstd/lib" ]; then
        for f in "$d"/zstd/lib/{common,compress,decompress}/*.c; do
          echo "$f -I$d/zstd/lib -I$d/zstd/lib/common"
        done
      fi
    done
  } | sort >"$objs/jobs"
  echo "kbuild: $(wc -l <"$objs/jobs") files, 4 at a time"
  local start=$SECONDS
  PCPALLOC_TRACE="$dir/t" LD_PRELOAD="$lib" \
    xargs -P 4 -L 1 sh -c 'gcc -O2 -w -c "$0" "$@" -o "'"$objs"'/$(echo "$0" | tr / _).o"' <"$objs/jobs"
  echo "kbuild: $((SECONDS - start)) s, $(ls "$dir" | wc -l) trace files"
  rm -rf "$objs"
}

redis() {
  local dir port=7391
  dir="$(trace_dir redis)"
  PCPALLOC_TRACE="$dir/t" LD_PRELOAD="$lib" \
    redis-server --port $port --save '' --appendonly no --io-threads 1 >/dev/null &
  local pid=$!
  for _ in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
  # 50 clients, 1 KiB and 16 KiB values: the server's buffers come and go
  # with the network traffic.
  redis-benchmark -p $port -q -n 100000 -c 50 -d 1024 -t set,get,lpush,lpop,mset >/dev/null
  redis-benchmark -p $port -q -n 20000 -c 50 -d 16384 -t set,get >/dev/null
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  wait $pid || true
  echo "redis: $(ls "$dir" | wc -l) trace files"
}

python() {
  local dir
  dir="$(trace_dir python)"
  PCPALLOC_TRACE="$dir/t" LD_PRELOAD="$lib" \
    python3 -m test -q test_json test_re test_dict test_set test_collections test_unicode >/dev/null 2>&1 || true
  echo "python: $(ls "$dir" | wc -l) trace files"
}

for w in "${which[@]}"; do "$w"; done
du -sh "$out"/* 2>/dev/null
