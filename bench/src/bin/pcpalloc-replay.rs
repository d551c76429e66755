//! pcpalloc-replay: drives traces recorded with `PCPALLOC_TRACE=PREFIX`
//! through pcpalloc's own slab, pageset and zone code on a virtual machine
//! of any CPU count, once per ablation row, and prints the seeds' counters
//! as markdown tables. The same inputs give byte-identical output.

use std::path::PathBuf;
use std::process::ExitCode;

use pcpalloc_bench::replay::{run, Options};
use pcpalloc_bench::rows;

const HELP: &str = "\
pcpalloc-replay: replay allocation traces on virtual CPUs, per ablation row.

Usage: pcpalloc-replay TRACE... [OPTIONS]

  TRACE               files written under PCPALLOC_TRACE=PREFIX (PREFIX.<pid>),
                      one per process; all share one virtual machine
Options:
  --cpus N[,N...]     virtual CPU counts, one table each (default: the
                      CPUs the trace was recorded on)
  --rows LIST         ablation rows: all, or ids from base,1,3,5,7,8,9,exact,
                      5batch,v6.16,exact+v6.16 (base is always included;
                      default all)
  --decay-ms MS       maintenance tick period in trace time (default 1000)
  --memory SIZE       the machine's memory, e.g. 256G (default 64G); it sets
                      batch, high_min and high_max as a zone of that size would
  --copies N          replay N instances of the traced run side by side, all
                      starting at once (the seeds ran 8 kbuild instances on
                      224 CPUs); default 1
  --no-free-high-batch  pagesets drain fully on free_high (a small cache slice)
  --plot PATH         draw `high` over time for the last row at the largest
                      CPU count (SVG)
  -h, --help          this text
";

fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let m = match &s[i..] {
                "K" | "KiB" => 1 << 10,
                "M" | "MiB" => 1 << 20,
                "G" | "GiB" => 1 << 30,
                "T" | "TiB" => 1 << 40,
                _ => return None,
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_args() -> Result<Options, lexopt::Error> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_env();
    let mut o = Options {
        traces: vec![],
        cpus: vec![],
        rows: rows::ROWS.to_vec(),
        decay_ms: 1000,
        memory: 64 << 30,
        copies: 1,
        free_high_batch: true,
        plot: None,
    };
    while let Some(arg) = p.next()? {
        match arg {
            Long("cpus") => {
                let v: String = p.value()?.parse()?;
                o.cpus = v
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|&n| (1..=4096).contains(&n))
                    })
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        lexopt::Error::Custom(format!("--cpus {v}: CPU counts are 1..=4096").into())
                    })?;
            }
            Long("rows") => {
                let v: String = p.value()?.parse()?;
                o.rows = rows::select(&v).map_err(|e| lexopt::Error::Custom(e.into()))?;
            }
            Long("decay-ms") => {
                o.decay_ms = p.value()?.parse()?;
                if o.decay_ms == 0 {
                    return Err(lexopt::Error::Custom("--decay-ms must be positive".into()));
                }
            }
            Long("memory") => {
                let v: String = p.value()?.parse()?;
                o.memory = parse_size(&v).filter(|&m| m >= 64 << 20).ok_or_else(|| {
                    lexopt::Error::Custom(format!("--memory {v}: a size of at least 64M").into())
                })?;
            }
            Long("copies") => {
                o.copies = p.value()?.parse()?;
                if !(1..=256).contains(&o.copies) {
                    return Err(lexopt::Error::Custom("--copies is 1..=256".into()));
                }
            }
            Long("no-free-high-batch") => o.free_high_batch = false,
            Long("plot") => o.plot = Some(p.value()?.into()),
            Short('h') | Long("help") => {
                print!("{HELP}");
                std::process::exit(0);
            }
            Value(v) => o.traces.push(PathBuf::from(v)),
            _ => return Err(arg.unexpected()),
        }
    }
    if o.traces.is_empty() {
        return Err(lexopt::Error::Custom(
            "no trace files given (see --help)".into(),
        ));
    }
    Ok(o)
}

fn main() -> ExitCode {
    let mut opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pcpalloc-replay: {e}");
            return ExitCode::from(2);
        }
    };
    if opts.cpus.is_empty() {
        let recorded = opts
            .traces
            .iter()
            .filter_map(|p| pcpalloc_bench::replay::reader::TraceFile::open(p).ok())
            .map(|f| f.header.nr_cpus as usize)
            .max()
            .unwrap_or(1);
        opts.cpus = vec![recorded.max(1)];
    }
    match run(&opts, |what| eprint!("\r\x1b[Kreplaying: {what}")) {
        Ok(text) => {
            eprint!("\r\x1b[K");
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("\npcpalloc-replay: {e}");
            ExitCode::FAILURE
        }
    }
}
