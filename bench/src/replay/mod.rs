//! The replay: traces recorded with `PCPALLOC_TRACE` driven through the
//! real slab, large-block, pageset and zone code on a virtual machine of
//! any CPU count (`machine.rs`), once per ablation row, giving the counters
//! the seeds argue with — exactly, and the same on every run. A row's knobs
//! reach every cache level, as in the allocator (the one tuner,
//! `page_alloc/pcp/tuner.rs`): the order lists, the class lists, the block
//! bins and the parked slabs; huge blocks are not replayed.

pub mod machine;
pub mod reader;

use std::fmt::Write;
use std::io;
use std::path::PathBuf;

use crate::chart::{line_chart, Series, COLORS};
use crate::rows::Row;
use crate::table::Table;
use machine::{Machine, Outcome, Setup};
use reader::{Item, Merge, TraceFile};

/// What to replay and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The trace files (one per process), merged into one machine.
    pub traces: Vec<PathBuf>,
    /// Virtual CPU counts, one table each.
    pub cpus: Vec<usize>,
    /// The rows.
    pub rows: Vec<Row>,
    /// Tick period in milliseconds of virtual time.
    pub decay_ms: u64,
    /// The machine's memory in bytes.
    pub memory: usize,
    /// Instances of the traced run replayed side by side (each a copy of
    /// every process, starting at the same time), as the seeds ran 8
    /// kbuild instances at once.
    pub copies: usize,
    /// Pagesets keep a batch before a free_high drain.
    pub free_high_batch: bool,
    /// Where to draw `high` over time (the last row at the largest CPU
    /// count), if anywhere.
    pub plot: Option<PathBuf>,
}

/// Replays every row at every CPU count; returns the markdown report.
/// `progress` hears about each run as it starts.
pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> io::Result<String> {
    let files: Vec<TraceFile> = opts
        .traces
        .iter()
        .map(|p| TraceFile::open(p))
        .collect::<io::Result<_>>()?;
    let events: u64 = files.iter().map(|f| f.events).sum();
    let recorded_cpus = files.iter().map(|f| f.header.nr_cpus).max().unwrap_or(0);
    let mut text = String::new();
    let copies = if opts.copies > 1 {
        format!(", {} instances side by side", opts.copies)
    } else {
        String::new()
    };
    let _ = writeln!(
        text,
        "Replay of {} trace file(s), {events} events, recorded on {recorded_cpus} CPU(s){copies}; \
         tick every {} ms of trace time; memory {} GiB.\n",
        files.len(),
        opts.decay_ms,
        opts.memory >> 30
    );
    drop(files);
    let biggest = *opts.cpus.iter().max().unwrap_or(&1);
    for &cpus in &opts.cpus {
        let mut t = Table::new(
            &format!("{cpus} virtual CPUs"),
            &[
                "row",
                "page allocs",
                "alloc_zone",
                "% of base",
                "free_high",
                "zone locks / 1000 allocs",
                "peak pcp pages",
                "largest refill",
                "largest drain",
                "list / bin free_high",
                "slabs retired",
            ],
        );
        let mut base: Option<u64> = None;
        let mut last: Option<Outcome> = None;
        for (i, row) in opts.rows.iter().enumerate() {
            progress(&format!("{cpus} CPUs, {}", row.label));
            let sample = cpus == biggest && i + 1 == opts.rows.len() && opts.plot.is_some();
            let o = replay_once(opts, cpus, row, sample)?;
            let b = *base.get_or_insert(o.alloc_zone);
            t.row(vec![
                row.label.to_string(),
                o.page_allocs.to_string(),
                o.alloc_zone.to_string(),
                percent(o.alloc_zone, b),
                o.free_high.to_string(),
                per_thousand(o.zone_locks, o.page_allocs),
                o.peak_pcp_pages.to_string(),
                o.refill_max.to_string(),
                o.drain_max.to_string(),
                format!("{} / {}", o.list_free_high, o.bin_free_high),
                o.slabs_retired.to_string(),
            ]);
            last = Some(o);
        }
        if let Some(o) = &last {
            t.note = format!(
                "{} threads in {} processes over {:.1} s of trace; {} frees of blocks allocated \
                 before the trace (or before a fork), {} huge allocations (own mappings, not \
                 replayed); {} ticks.",
                o.threads, o.processes, o.seconds, o.unknown_frees, o.huge, o.ticks
            );
        }
        text.push_str(&t.render());
        text.push('\n');
        if let (Some(o), Some(path), true) = (&last, &opts.plot, cpus == biggest) {
            let row = opts.rows.last().map_or("", |r| r.label);
            std::fs::write(path, plot_highs(o, cpus, row))?;
        }
    }
    text.push_str(
        "page allocs: pages allocated by slabs and large blocks. alloc_zone: pages taken from \
         the zone to refill pagesets (% of the base row). free_high: drains for consecutive \
         high-order frees. list / bin free_high: free_high drains of the pagesets' class lists \
         and of the threads' block bins. slabs retired: emptied slabs given back rather than \
         parked. zone locks: zone lock acquisitions per 1000 pages allocated. peak \
         pcp pages: the most pages all pagesets held at once. largest refill / drain: pages \
         moved by one refill / one bulk free.\n",
    );
    Ok(text)
}

fn replay_once(opts: &Options, cpus: usize, row: &Row, sample_high: bool) -> io::Result<Outcome> {
    let one: Vec<TraceFile> = opts
        .traces
        .iter()
        .map(|p| TraceFile::open(p))
        .collect::<io::Result<_>>()?;
    // Copy k of file i is file k * n + i: its own process.
    let files: Vec<TraceFile> = (0..opts.copies.max(1))
        .flat_map(|_| one.iter().cloned())
        .collect();
    let mut m = Machine::new(
        Setup {
            cpus,
            knobs: row.knobs,
            decay_ns: opts.decay_ms * 1_000_000,
            memory: opts.memory,
            free_high_batch: opts.free_high_batch,
            sample_high,
        },
        files.len(),
    );
    let mut merge = Merge::new(files)?;
    while let Some(item) = merge.next_item()? {
        match item {
            Item::Event { file, tid, event } => m.event(file, tid, &event),
            Item::FileEnd(file) => m.end_process(file),
        }
    }
    Ok(m.finish())
}

fn percent(v: u64, base: u64) -> String {
    if base == 0 {
        "-".into()
    } else {
        format!("{:.1}", v as f64 * 100.0 / base as f64)
    }
}

fn per_thousand(v: u64, per: u64) -> String {
    if per == 0 {
        "-".into()
    } else {
        format!("{:.2}", v as f64 * 1000.0 / per as f64)
    }
}

/// `high` over virtual time: the three busiest virtual CPUs, and the mean
/// and the maximum over all of them.
fn plot_highs(o: &Outcome, cpus: usize, row: &str) -> String {
    let mut busiest: Vec<usize> = (0..cpus).collect();
    busiest.sort_by_key(|&c| {
        (
            std::cmp::Reverse(o.pgalloc_per_cpu.get(c).copied().unwrap_or(0)),
            c,
        )
    });
    busiest.truncate(3);
    let mut series: Vec<Series> = busiest
        .iter()
        .enumerate()
        .map(|(i, &c)| Series {
            name: format!("CPU {c}"),
            color: COLORS[i],
            points: o.highs.iter().map(|(t, h)| (*t, f64::from(h[c]))).collect(),
        })
        .collect();
    series.push(Series {
        name: "mean of all".into(),
        color: COLORS[3],
        points: o
            .highs
            .iter()
            .map(|(t, h)| {
                (
                    *t,
                    h.iter().map(|&x| f64::from(x)).sum::<f64>() / h.len().max(1) as f64,
                )
            })
            .collect(),
    });
    series.push(Series {
        name: "max of all".into(),
        color: COLORS[4],
        points: o
            .highs
            .iter()
            .map(|(t, h)| (*t, f64::from(h.iter().copied().max().unwrap_or(0))))
            .collect(),
    });
    line_chart(
        &format!("pageset high at each tick, {cpus} virtual CPUs, {row}"),
        "seconds of trace",
        "high (pages)",
        &series,
        &[],
    )
}
