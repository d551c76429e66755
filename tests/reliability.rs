//! Reliability under LD_PRELOAD: memory limits and an OS that refuses
//! memory, fork storms, and real programs (a slice of CPython's own test
//! suite, sqlite3, redis with redis-benchmark, git) whose results must
//! match runs on glibc.

mod support;

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

fn stat(stderr: &str, name: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the stats report"))
}

#[test]
fn memory_limit_fails_cleanly_and_below_high_comes_and_goes() {
    let bin = c_program("limit");
    let o = run_ok(
        preloaded(&bin)
            .args(["1024", "3"])
            .env("PCPALLOC_MEMORY_LIMIT", "64M")
            .env("PCPALLOC_STATS", "1"),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let counts: Vec<u64> = out
        .trim()
        .split(' ')
        .skip(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    assert_eq!(counts.len(), 2, "{}", text(&o));
    assert!(
        counts[0] >= 48 && counts[0] <= 64,
        "1 MiB blocks under 64M: {}",
        counts[0]
    );
    assert!(stat(&err, "alloc_fail") >= 1);
    assert!(
        stat(&err, "below_high_set") >= 1,
        "BELOW_HIGH was never set:\n{err}"
    );
    assert!(
        stat(&err, "below_high_clear") >= 1,
        "BELOW_HIGH was never cleared:\n{err}"
    );
    assert!(stat(&err, "mapped_bytes") <= 64 << 20);
}

/// Huge blocks up to the limit, freed (the cache keeps some, charged to
/// the limit), then 1 MiB blocks up to the limit: the cache must give its
/// memory up rather than make the large blocks fail early.
#[test]
fn cached_huge_blocks_give_way_at_the_memory_limit() {
    let bin = c_program("limit");
    let o = run_ok(
        preloaded(&bin)
            .args(["6144", "0", "1024"])
            .env("PCPALLOC_MEMORY_LIMIT", "96M")
            .env("PCPALLOC_STATS", "1"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(stat(&err, "huge_allocs") >= 10, "{}", text(&o));
    assert!(stat(&err, "mapped_bytes") <= 96 << 20);
}

/// A loop of huge blocks reuses cached ones instead of mapping each, and
/// the tick unmaps what stays idle. The program only sleeps after its
/// frees (the compiler drops its `free(malloc(n))` loop), so only the
/// background thread ticks then: it is asked for.
#[test]
fn huge_blocks_are_reused_then_given_back_when_idle() {
    let bin = c_program("huge_cycle");
    let o = run_ok(
        preloaded(&bin)
            .env("PCPALLOC_BACKGROUND", "1")
            .env("PCPALLOC_DECAY_MS", "50")
            .env("PCPALLOC_STATS", "1"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(stat(&err, "huge_cache_hits") >= 190, "{}", text(&o));
    assert!(stat(&err, "huge_allocs") <= 10, "{}", text(&o));
    assert_eq!(stat(&err, "huge_cached_bytes"), 0, "{}", text(&o));
}

#[test]
fn os_refusing_memory_ulimit_v() {
    let bin = c_program("limit");
    for kib in ["200000", "120000"] {
        let o = run_ok(
            Command::new("sh")
                .args(["-c", &format!("ulimit -v {kib}; exec \"$0\" 1024 0")])
                .arg(&bin)
                .env("LD_PRELOAD", preload_lib()),
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).starts_with("limit ok"),
            "{}",
            text(&o)
        );
    }
    // Small blocks too: 64 KiB at a time.
    let o = run_ok(
        Command::new("sh")
            .args(["-c", "ulimit -v 150000; exec \"$0\" 64 0"])
            .arg(&bin)
            .env("LD_PRELOAD", preload_lib()),
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("limit ok"),
        "{}",
        text(&o)
    );
}

#[test]
fn hundred_forks_with_eight_busy_threads() {
    let bin = c_program("fork_busy");
    let o = run_ok(preloaded(&bin).args(["8", "100"]));
    assert!(String::from_utf8_lossy(&o.stdout).contains("fork_busy ok (100 forks, 8 threads)"));
}

/// The summary of a CPython regrtest run: "Total tests: run=… failures=…".
fn regrtest_summary(out: &str) -> (String, String) {
    let total = out
        .lines()
        .find(|l| l.starts_with("Total tests:"))
        .unwrap_or("")
        .to_string();
    let result = out
        .lines()
        .rev()
        .find(|l| l.starts_with("Result:"))
        .unwrap_or("")
        .to_string();
    (total, result)
}

#[test]
fn cpython_test_suite_slice() {
    if !require("python3") {
        return;
    }
    let have_tests = Command::new("python3")
        .args(["-c", "import test.support"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_tests {
        skip("this python3 has no test package");
        return;
    }
    let args = [
        "-m",
        "test",
        "-j2",
        "test_dict",
        "test_list",
        "test_set",
        "test_deque",
        "test_heapq",
        "test_bytes",
        "test_unicode",
        "test_json",
        "test_gc",
        "test_collections",
        "test_re",
    ];
    let plain = Command::new("python3").args(args).output().unwrap();
    let ours = preloaded("python3").args(args).output().unwrap();
    let (a, b) = (
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&ours.stdout),
    );
    let (pa, pb) = (regrtest_summary(&a), regrtest_summary(&b));
    assert!(!pa.0.is_empty(), "no regrtest summary:\n{a}");
    assert_eq!(
        pa, pb,
        "CPython's tests differ under pcpalloc:\n--- glibc\n{a}\n--- pcpalloc\n{b}"
    );
    assert_eq!(plain.status.code(), ours.status.code());
}

#[test]
fn sqlite3_generated_workload() {
    if !require("sqlite3") {
        return;
    }
    let dir = tempdir("sqlite");
    let sql = r#"
PRAGMA journal_mode = MEMORY;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, s TEXT, b BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 60000)
  INSERT INTO t SELECT x, (x * 7919) % 1000, printf('row-%d-%s', x, hex(x % 251)), zeroblob(x % 700) FROM c;
CREATE INDEX tk ON t(k);
CREATE TABLE u AS SELECT k, count(*) AS n, sum(length(b)) AS bytes, group_concat(id % 10, '') AS ds FROM t GROUP BY k;
UPDATE t SET s = s || '-' || k WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), sum(k), max(length(s)), sum(length(b)) FROM t;
SELECT k, n, bytes, length(ds) FROM u ORDER BY bytes DESC, k LIMIT 10;
SELECT s FROM t WHERE k BETWEEN 10 AND 12 ORDER BY s LIMIT 5;
VACUUM;
SELECT count(*) FROM t JOIN u USING (k) WHERE u.n > 50;
"#;
    let run = |db: &str, pre: bool| {
        let path = dir.join(db);
        let mut c = if pre {
            preloaded("sqlite3")
        } else {
            Command::new("sqlite3")
        };
        let mut child = c
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sql.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        o.stdout
    };
    let a = run("plain.db", false);
    let b = run("ours.db", true);
    assert!(a.len() > 100);
    assert_eq!(a, b, "sqlite3 output differs");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn redis_server_with_redis_benchmark() {
    if !require("redis-server") || !require("redis-benchmark") || !require("redis-cli") {
        return;
    }
    let port = free_port().to_string();
    let mut server = preloaded("redis-server")
        .args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while Command::new("redis-cli")
        .args(["-p", &port, "ping"])
        .output()
        .map(|o| o.stdout != b"PONG\n")
        .unwrap_or(true)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let bench = Command::new("redis-benchmark")
        .args([
            "-p",
            &port,
            "-n",
            "20000",
            "-c",
            "20",
            "-q",
            "-d",
            "200",
            "-t",
            "set,get,incr,lpush,lpop,sadd,hset,mset",
        ])
        .output()
        .unwrap();
    assert!(bench.status.success(), "{}", text(&bench));
    let out = String::from_utf8_lossy(&bench.stdout);
    assert!(out.matches("requests per second").count() >= 8, "{out}");
    // Data written through the server comes back intact.
    let mut proto = String::new();
    for i in 0..20000 {
        let v = format!("value-{i}-{}", "x".repeat(i % 300));
        proto.push_str(&format!(
            "*3\r\n$3\r\nSET\r\n${}\r\nkey:{i}\r\n${}\r\n{v}\r\n",
            format!("key:{i}").len(),
            v.len()
        ));
    }
    let mut pipe = Command::new("redis-cli")
        .args(["-p", &port, "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    pipe.stdin
        .take()
        .unwrap()
        .write_all(proto.as_bytes())
        .unwrap();
    assert!(pipe.wait_with_output().unwrap().status.success());
    for i in [0usize, 1, 299, 300, 12345, 19999] {
        let o = Command::new("redis-cli")
            .args(["-p", &port, "get", &format!("key:{i}")])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim_end(),
            format!("value-{i}-{}", "x".repeat(i % 300))
        );
    }
    let info = Command::new("redis-cli")
        .args(["-p", &port, "info", "memory"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&info.stdout).contains("used_memory:"));
    let _ = Command::new("redis-cli")
        .args(["-p", &port, "shutdown", "nosave"])
        .output();
    let status = server.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("pcpalloc:"), "allocator complained: {err}");
    assert!(
        status.code().is_some(),
        "redis-server died by a signal: {status:?}"
    );
}

#[test]
fn git_on_a_generated_repository() {
    if !require("git") {
        return;
    }
    let script = r#"
set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
git init -q -b main repo && cd repo
for c in 1 2 3 4 5 6; do
  for i in $(seq 1 150); do
    mkdir -p d$((i % 7))
    printf 'file %d commit %d\n%s\n' $i $c "$(seq $i $((i + c * 3)))" > d$((i % 7))/f$i.txt
  done
  git add -A && git commit -q -m "commit $c"
done
git checkout -q -b side HEAD~2
echo side > side.txt && git add side.txt && git commit -q -m side
git checkout -q main && git merge -q --no-edit side
git gc -q --aggressive
git fsck --full --strict 2>&1
git rev-parse HEAD
git log --stat --oneline | md5sum
git diff HEAD~3 --stat | tail -1
git grep -c 'commit 4' | wc -l
"#;
    let dir = tempdir("git");
    let a = dir.join("plain");
    let b = dir.join("ours");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let plain = run_ok(Command::new("sh").args(["-c", script]).current_dir(&a));
    let ours = run_ok(preloaded("sh").args(["-c", script]).current_dir(&b));
    assert_eq!(
        plain.stdout,
        ours.stdout,
        "git results differ:\n{}\n{}",
        text(&plain),
        text(&ours)
    );
}
