//! Every `PCPALLOC_*` variable: its name, `Config` method, values,
//! default and doc (the README's settings table is checked against it),
//! how its value is parsed into the settings' state and shown in the
//! report.

use core::sync::atomic::Ordering::Relaxed;

use super::state::*;
use crate::page_alloc::knobs::{
    parse_heuristics, write_heuristics, FreeCountMode, FreeHighThreshold, MAX_BATCH_SCALE_MAX,
};
use crate::page_alloc::zone::ThpPolicy;
use crate::sys::rseq::WantEntry;
use crate::util::{parse_size, parse_u64};

pub(super) const TABLE: [Tunable; NR_TUNABLES] = [
    Tunable {
        name: "PCPALLOC_MEMORY_LIMIT",
        config: "memory_limit",
        at_run_time: AtRunTime::MemoryLimit,
        values: "`none`, or bytes with K/KiB, M/MiB, G/GiB or T/TiB; at least 4 MiB",
        default: "none",
        doc: "A wall on the memory the heap may hold resident (pages handed out and not yet given back, page descriptors, huge blocks); past it, after reclaiming, malloc returns NULL with ENOMEM. Without it only the OS and the cgroup limit the heap, as for glibc.",
        apply: |v| match parse_size(v) {
            _ if v.eq_ignore_ascii_case(b"none") => {
                SETTINGS.memory_limit.store(0, Relaxed);
                Ok(())
            }
            None => Err("not a size (a number with K/KiB, M/MiB, G/GiB or T/TiB, or none)"),
            Some(n) if n < MEMORY_LIMIT_MIN => Err("below the minimum of 4 MiB"),
            Some(n) => {
                SETTINGS.memory_limit.store(n as usize, Relaxed);
                Ok(())
            }
        },
        show: |w, _| match SETTINGS.memory_limit.load(Relaxed) {
            0 => w.write_str("none"),
            n => write!(w, "{n}"),
        },
    },
    Tunable {
        name: "PCPALLOC_PCP",
        config: "pagesets",
        at_run_time: AtRunTime::Never,
        values: "cpu | thread",
        default: "cpu",
        doc: "Pagesets per CPU (entered as PCPALLOC_PCP_ENTRY says) or per thread.",
        apply: |v| {
            let m = match v {
                b"cpu" => PcpMode::Cpu,
                b"thread" => PcpMode::Thread,
                _ => return Err("neither cpu nor thread"),
            };
            SETTINGS.pcp_mode.store(m as u32, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(match SETTINGS.pcp_mode() { PcpMode::Cpu => "cpu", PcpMode::Thread => "thread" }),
    },
    Tunable {
        name: "PCPALLOC_PCP_ENTRY",
        config: "pcp_entry",
        at_run_time: AtRunTime::Never,
        values: "auto | rseq-glibc | rseq-own | getcpu",
        default: "getcpu",
        doc: "How a thread enters its CPU's pageset: a restartable sequence on glibc's rseq area or on one of its own (no atomic instruction), or sched_getcpu and a try-lock; auto takes the first that works (getcpu under valgrind). The default is getcpu: with rseq, every lock taken from another CPU (a thread's exit, the tick, a drain) costs a membarrier, which a storm of short threads pays (30% more CPU). The report's pcp_entry says which is live.",
        apply: |v| {
            let e = match v {
                b"auto" => 0,
                b"getcpu" => 1,
                b"rseq-glibc" => 2,
                b"rseq-own" => 3,
                _ => return Err("not auto, rseq-glibc, rseq-own or getcpu"),
            };
            SETTINGS.pcp_entry.store(e, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(match SETTINGS.pcp_entry() {
            WantEntry::Auto => "auto",
            WantEntry::Only(e) => e.name(),
        }),
    },
    Tunable {
        name: "PCPALLOC_BATCH_SCALE_MAX",
        config: "batch_scale_max",
        at_run_time: AtRunTime::Knobs,
        values: "0..=6",
        default: "5",
        doc: "Largest batch scale factor (\"mm: restrict the pcp batch scale factor to avoid too long latency\", Linux 6.7); bounds refill/drain latency.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number"),
            Some(n) if n > u64::from(MAX_BATCH_SCALE_MAX) => Err("above the maximum of 6"),
            Some(n) => {
                update_knobs(|k| k.batch_scale_max = n as u32);
                Ok(())
            }
        },
        show: |w, k| write!(w, "{}", k.batch_scale_max),
    },
    Tunable {
        name: "PCPALLOC_HIGH_FRACTION",
        config: "high_fraction",
        at_run_time: AtRunTime::Never,
        values: "0, or >= 8",
        default: "0 (auto-tune)",
        doc: "Fixed pageset high = managed / fraction / CPUs; turns auto-tuning off.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number"),
            Some(0) => {
                SETTINGS.high_fraction.store(0, Relaxed);
                update_knobs(|k| k.fixed_high = false);
                Ok(())
            }
            Some(n) if n < 8 => Err("between 1 and 7 (the kernel's minimum fraction is 8)"),
            Some(n) => {
                SETTINGS.high_fraction.store(n as usize, Relaxed);
                update_knobs(|k| k.fixed_high = true);
                Ok(())
            }
        },
        show: |w, _| write!(w, "{}", SETTINGS.high_fraction.load(Relaxed)),
    },
    Tunable {
        name: "PCPALLOC_HEURISTICS",
        config: "heuristics",
        at_run_time: AtRunTime::Knobs,
        values: "all | base | list of 1,3,5,7,8,9 or names, '-' to remove",
        default: "all",
        doc: "Which heuristics of the PCP auto-tuning series (Linux 6.7) run, by patch number or name: e.g. `base`, `1,3`, `all,-8`.",
        apply: |v| match parse_heuristics(v) {
            Some(h) => {
                update_knobs(|k| k.heuristics = h);
                Ok(())
            }
            None => Err("an item is not all, base, a patch number 1,3,5,7,8,9 or a heuristic's name"),
        },
        show: |w, k| write_heuristics(w, k.heuristics),
    },
    Tunable {
        name: "PCPALLOC_FREE_COUNT",
        config: "free_count",
        at_run_time: AtRunTime::Knobs,
        values: "halve | exact",
        default: "halve",
        doc: "What an allocation does to free_count: halve it (Linux 6.7) or subtract the pages taken (Nikhil Dhama's first fix).",
        apply: |v| {
            let m = match v {
                b"halve" => FreeCountMode::Halve,
                b"exact" => FreeCountMode::Exact,
                _ => return Err("neither halve nor exact"),
            };
            update_knobs(|k| k.free_count_mode = m);
            Ok(())
        },
        show: |w, k| w.write_str(match k.free_count_mode { FreeCountMode::Halve => "halve", FreeCountMode::Exact => "exact" }),
    },
    Tunable {
        name: "PCPALLOC_FREE_HIGH_THRESHOLD",
        config: "free_high_threshold",
        at_run_time: AtRunTime::Knobs,
        values: "batch | 5batch | batch+high_min/2",
        default: "batch+high_min/2",
        doc: "free_count needed before consecutive high-order frees drain: batch (Linux 6.7), 5 batch (Dhama's second fix), batch + high_min/2 (Linux 6.16).",
        apply: |v| {
            let t = match v {
                b"batch" => FreeHighThreshold::Batch,
                b"5batch" => FreeHighThreshold::FiveBatch,
                b"batch+high_min/2" => FreeHighThreshold::BatchPlusHalfHighMin,
                _ => return Err("not one of batch, 5batch, batch+high_min/2"),
            };
            update_knobs(|k| k.free_high_threshold = t);
            Ok(())
        },
        show: |w, k| w.write_str(match k.free_high_threshold { FreeHighThreshold::Batch => "batch", FreeHighThreshold::FiveBatch => "5batch", FreeHighThreshold::BatchPlusHalfHighMin => "batch+high_min/2" }),
    },
    Tunable {
        name: "PCPALLOC_DECAY_MS",
        config: "decay_ms",
        at_run_time: AtRunTime::Now,
        values: "10..=60000",
        default: "1000",
        doc: "Maintenance tick: pageset high decay and release of idle memory.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number of milliseconds"),
            Some(n) if n < u64::from(DECAY_MS_MIN) => Err("below the minimum of 10 ms"),
            Some(n) if n > u64::from(DECAY_MS_MAX) => Err("above the maximum of 60000 ms"),
            Some(n) => {
                SETTINGS.decay_ms.store(n as u32, Relaxed);
                Ok(())
            }
        },
        show: |w, _| write!(w, "{}", SETTINGS.decay_ms.load(Relaxed)),
    },
    Tunable {
        name: "PCPALLOC_DIRTY_RATIO",
        config: "dirty_ratio",
        at_run_time: AtRunTime::Never,
        values: "0..=1000",
        default: "90",
        doc: "Percent of the pages in use the heap's resident free memory may reach: past it, a free gives whole free 2 MiB pageblocks back to the OS at once (the rest waits for the tick); 0 leaves it all to the tick.",
        apply: |v| match parse_u64(v) {
            None => Err("not a number (percent)"),
            Some(n) if n > DIRTY_RATIO_MAX as u64 => Err("above the maximum of 1000 percent"),
            Some(n) => {
                SETTINGS.dirty_ratio.store(n as usize, Relaxed);
                Ok(())
            }
        },
        show: |w, _| write!(w, "{}", SETTINGS.dirty_ratio.load(Relaxed)),
    },
    Tunable {
        name: "PCPALLOC_BACKGROUND",
        config: "background_thread",
        at_run_time: AtRunTime::Never,
        values: "0 | 1",
        default: "0",
        doc: "Run the tick on a background thread (started once the heap passes 16 MiB or a second thread allocates); 0 runs it from the allocator's own calls and gives memory back as it is freed.",
        apply: |v| apply_bool(v, &SETTINGS.background),
        show: |w, _| show_bool(w, &SETTINGS.background),
    },
    Tunable {
        name: "PCPALLOC_STATS",
        config: "stats",
        at_run_time: AtRunTime::Now,
        values: "0 | 1 | json",
        default: "0",
        doc: "Print the stats report at exit, to stderr or PCPALLOC_STATS_FILE: a summary then `name value` lines, or one JSON object.",
        apply: |v| {
            let json = v.eq_ignore_ascii_case(b"json");
            if json {
                SETTINGS.stats_at_exit.store(true, Relaxed);
            } else {
                apply_bool(v, &SETTINGS.stats_at_exit).map_err(|_| "neither 0, 1 nor json")?;
            }
            SETTINGS.stats_json.store(json, Relaxed);
            Ok(())
        },
        show: |w, _| {
            if SETTINGS.stats_at_exit.load(Relaxed) && SETTINGS.stats_json.load(Relaxed) {
                w.write_str("json")
            } else {
                show_bool(w, &SETTINGS.stats_at_exit)
            }
        },
    },
    Tunable {
        name: "PCPALLOC_STATS_FILE",
        config: "stats_file",
        at_run_time: AtRunTime::Never,
        values: "a path; %p becomes the process id",
        default: "(stderr)",
        doc: "Write the report at exit to this file instead of stderr (implies PCPALLOC_STATS=1).",
        apply: |v| {
            SETTINGS.stats_file.set(v)?;
            SETTINGS.stats_at_exit.store(true, Relaxed);
            Ok(())
        },
        show: |w, _| SETTINGS.stats_file.show(w, "(stderr)"),
    },
    Tunable {
        name: "PCPALLOC_TRACE",
        config: "trace",
        at_run_time: AtRunTime::Never,
        values: "a path prefix",
        default: "(none)",
        doc: "Record every allocation event to PREFIX.<pid> for pcpalloc-replay (see the README's Replay section).",
        apply: |v| SETTINGS.trace_prefix.set(v),
        show: |w, _| SETTINGS.trace_prefix.show(w, "(none)"),
    },
    Tunable {
        name: "PCPALLOC_STEAL",
        config: "steal",
        at_run_time: AtRunTime::Never,
        values: "seed004 | baseline",
        default: "seed004",
        doc: "Page stealing rules: Vlastimil Babka's \"page stealing tweaks\" (Linux 4.0; seed 004), or the rules of Linux 3.19 before them.",
        apply: |v| {
            let on = match v {
                b"seed004" => true,
                b"baseline" => false,
                _ => return Err("neither seed004 nor baseline"),
            };
            SETTINGS.steal_seed_004.store(on, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(if SETTINGS.steal_seed_004.load(Relaxed) { "seed004" } else { "baseline" }),
    },
    Tunable {
        name: "PCPALLOC_GROUPING",
        config: "grouping",
        at_run_time: AtRunTime::Never,
        values: "lifetime | mobility",
        default: "lifetime",
        doc: "How small objects' slabs are grouped in pageblocks: by lifetime (a size class whose slabs keep coming back empty takes reclaimable pageblocks, the rest unmovable ones; under THP dense only the unmovable ones are huge pages), or by mobility alone (every slab unmovable, as the kernel's slabs).",
        apply: |v| {
            let on = match v {
                b"lifetime" => true,
                b"mobility" => false,
                _ => return Err("neither lifetime nor mobility"),
            };
            SETTINGS.group_by_lifetime.store(on, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(if SETTINGS.group_by_lifetime.load(Relaxed) { "lifetime" } else { "mobility" }),
    },
    Tunable {
        name: "PCPALLOC_THP",
        config: "huge_pages",
        at_run_time: AtRunTime::Never,
        values: "never | always | dense",
        default: "dense",
        doc: "Transparent huge pages for the heap's pageblocks: never (madvise NOHUGEPAGE), always (MADV_HUGEPAGE on every block), or dense: once the heap passes 64 MiB, the pageblocks of long-lived small objects, where a 2 MiB page is used and stays so.",
        apply: |v| {
            let p = match v {
                b"never" => ThpPolicy::Never,
                b"always" => ThpPolicy::Always,
                b"dense" => ThpPolicy::Dense,
                _ => return Err("neither never, always nor dense"),
            };
            SETTINGS.thp.store(p as u32, Relaxed);
            Ok(())
        },
        show: |w, _| w.write_str(ThpPolicy::from_u32(SETTINGS.thp.load(Relaxed)).name()),
    },
    Tunable {
        name: "PCPALLOC_CGROUP",
        config: "cgroup",
        at_run_time: AtRunTime::Never,
        values: "a cgroup directory, or `none`",
        default: "(own)",
        doc: "The memory cgroup whose limit the heap keeps clear of (v2 memory.max and memory.high, v1 memory.limit_in_bytes, with the usage beside them): by default the level of least limit from the process's own cgroup up; a directory to follow that one (a hierarchy mounted elsewhere); none for no cgroup.",
        apply: |v| SETTINGS.cgroup.set(v),
        show: |w, _| SETTINGS.cgroup.show(w, "(own)"),
    },
    Tunable {
        name: "PCPALLOC_PROFILE",
        config: "profile",
        at_run_time: AtRunTime::Now,
        values: "0, 1, or the mean bytes between samples (at least 4 KiB), each optionally followed by `,peak`",
        default: "0",
        doc: "Sample allocations for a heap profile: one per 2 MiB allocated on average with 1, or per the size given; written at exit (the sampled blocks still live are the leak report), on demand, and with `,peak` at each new peak of live bytes. See the README's heap profile section.",
        apply: |v| {
            crate::heap::set_profile(crate::heap_profile::parse(v)?);
            Ok(())
        },
        show: |w, _| crate::heap_profile::show(w),
    },
    Tunable {
        name: "PCPALLOC_PROFILE_FILE",
        config: "profile_file",
        at_run_time: AtRunTime::Never,
        values: "a path; %p becomes the process id",
        default: "pcpalloc.%p.pb",
        doc: "Where heap profiles go: the one at exit to the path, on-demand ones to the path with .1, .2... appended, the one at each new peak to the path with .peak.",
        apply: |v| SETTINGS.profile_file.set(v),
        show: |w, _| SETTINGS.profile_file.show(w, crate::heap_profile::DEFAULT_FILE),
    },
];
