#!/usr/bin/env bash
# Records the replay's traces of programs nobody here wrote, under
# LD_PRELOAD=libpcpalloc.so with PCPALLOC_TRACE (one file per process):
#
#   kbuild   gcc -O2 -c over the C sources of Lua 5.4, Lua 5.3 and zstd
#            (fetched with cargo), 28 compilers at a time (KBUILD_JOBS): one
#            of the seeds' 8 `make -j28` kbuild instances
#   redis    redis-server (4 I/O threads) under redis-benchmark on loopback
#   pingpong bench/c/pingpong.c: producers hand 8-32 KiB buffers to consumers
#            on the other CPU, the network case of the seeds (replay it with
#            --copies to get their 32 or 64 pairs)
#   python   CPython running a slice of its own test suite
#
# Usage: bench/traces/record.sh OUTDIR [kbuild|redis|pingpong|python]...
# Then:  cargo run --release --bin pcpalloc-replay -- OUTDIR/kbuild/t.* --cpus 224 --copies 8
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(kbuild redis pingpong python)

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
  local jobs=${KBUILD_JOBS:-28}
  echo "kbuild: $(wc -l <"$objs/jobs") files, $jobs at a time"
  compile() {
    xargs -P "$jobs" -L 1 sh -c 'gcc -O2 -w -c "$0" "$@" -o "'"$objs"'/$(echo "$0" | tr / _).o"' <"$objs/jobs"
  }
  # The same build untraced first: the tracing overhead, measured.
  local t0 t1 t2
  t0=$(date +%s.%N)
  LD_PRELOAD="$lib" compile
  t1=$(date +%s.%N)
  PCPALLOC_TRACE="$dir/t" LD_PRELOAD="$lib" compile
  t2=$(date +%s.%N)
  python3 -c "import sys; a, b, c = map(float, sys.argv[1:]); print(f'kbuild: untraced {b - a:.1f} s, traced {c - b:.1f} s ({(c - b) / (b - a):.2f}x)')" "$t0" "$t1" "$t2"
  echo "kbuild: $(ls "$dir" | wc -l) trace files"
  rm -rf "$objs"
}

redis() {
  local dir port=7391
  dir="$(trace_dir redis)"
  PCPALLOC_TRACE="$dir/t" LD_PRELOAD="$lib" \
    redis-server --port $port --save '' --appendonly no --io-threads 4 --io-threads-do-reads yes >/dev/null &
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

pingpong() {
  local dir bin
  dir="$(trace_dir pingpong)"
  bin="$(mktemp -d)/pingpong"
  gcc -O2 -pthread -o "$bin" "$root/bench/c/pingpong.c"
  PCPALLOC_TRACE="$dir/t" LD_PRELOAD="$lib" "$bin" >/dev/null
  rm -rf "$(dirname "$bin")"
  echo "pingpong: $(ls "$dir" | wc -l) trace files"
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
