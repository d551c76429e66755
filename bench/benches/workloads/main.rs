//! The workload benchmark: pcpalloc against the system malloc (and peers
//! with `--features peers`), the seeds' ablation table on our workloads,
//! per-CPU against per-thread pagesets, memory given back after a burst,
//! latency against BATCH_SCALE_MAX, plots of the auto-tuning, and the
//! drop-in library under LD_PRELOAD on C programs.
//!
//! `cargo bench --bench workloads`, or `-- --quick` for a first look (the
//! in-process sections only, shorter and fewer runs). Every figure is the
//! median of its runs with the range beside it; each section says how long
//! it took. Each section runs in a fresh process of its own (this program
//! with `--section`), so no section measures the allocator state or the
//! memory another one left, and this process stays small. Results go to
//! stdout and to a folder of their own per run, `bench/<UTC date-time>-
//! <commit>/` in the target directory (machine.txt, report.md, samples.csv
//! with every run's figures, *.svg), with `bench/latest` pointing at it.

mod allocs;
mod band;
mod machine;
mod measure;
mod preload;
mod profile_cost;
mod sections;
mod shapes;
mod thp;

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

/// Run parameters.
#[derive(Clone, Debug)]
pub struct Opts {
    pub quick: bool,
    /// Seconds per throughput run.
    pub secs: f64,
    /// Runs per measurement (the median is reported).
    pub runs: usize,
    /// Sections to run (empty: all).
    pub only: Vec<String>,
    /// An earlier libpcpalloc.so to run the C programs with too.
    pub baseline: Option<std::path::PathBuf>,
    /// Child mode: run this one section, writing its text and figures to
    /// `out` (set by the parent, which runs each section so).
    pub section: Option<String>,
    /// The run's folder (child mode).
    pub out: Option<std::path::PathBuf>,
}

/// The sections quick mode leaves out unless `--only` names them: they
/// build libpcpalloc.so and run programs for minutes.
pub const NOT_QUICK: [&str; 4] = ["preload", "band", "thp", "instructions"];

/// The sections that run only when `--only` names them: measurements for
/// one question, not the comparison.
pub const ON_REQUEST: [&str; 1] = ["profile_cost"];

impl Opts {
    pub fn wants(&self, section: &str) -> bool {
        if !self.only.is_empty() {
            return self.only.iter().any(|o| o == section);
        }
        let left_out =
            ON_REQUEST.contains(&section) || (self.quick && NOT_QUICK.contains(&section));
        !left_out
    }

    /// These options with at most `n` runs per point in quick mode (the
    /// secondary sections; the main comparison keeps its runs).
    pub fn quick_runs(&self, n: usize) -> Opts {
        let mut o = self.clone();
        if self.quick {
            o.runs = o.runs.min(n);
        }
        o
    }
}

/// Prints a progress line on stderr, over the last one — on a terminal
/// only: a log gets one line per section instead (see `main`).
pub fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K{msg}");
    }
}

/// Every run's figures, as CSV lines (written to samples.csv).
static SAMPLES: Mutex<String> = Mutex::new(String::new());

/// Records one run's figure: the section, what was run, on what, which
/// run, the figure's name and its value.
pub fn record(section: &str, case: &str, variant: &str, run: usize, metric: &str, value: f64) {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let line = format!(
        "{},{},{},{run},{},{value}\n",
        quote(section),
        quote(case),
        quote(variant),
        quote(metric)
    );
    SAMPLES.lock().unwrap().push_str(&line);
}

const HELP: &str = "\
The workload benchmark: pcpalloc against the system malloc (and peers).

Usage: cargo bench --bench workloads -- [OPTIONS]

Options:
  --quick             fewer and shorter runs, in-process sections only (a minute or two)
  --secs N            seconds per throughput run
  --runs N            runs per point (the median is reported)
  --only A,B          only these sections: compare ablation pcp burst latency plot preload band thp instructions
                      profile_cost (the heap profile's cost; runs only when named)
  --baseline SO       also run the C programs with this libpcpalloc.so (an earlier build) as \"before\"
  -h, --help          this text
";

/// The section names `--only` accepts.
const SECTION_NAMES: [&str; 11] = [
    "compare",
    "ablation",
    "pcp",
    "burst",
    "latency",
    "plot",
    "preload",
    "band",
    "thp",
    "instructions",
    "profile_cost",
];

fn parse_args() -> Result<Opts, lexopt::Error> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_env();
    let mut quick = false;
    let (mut secs, mut runs, mut only, mut baseline) = (None, None, vec![], None);
    let (mut section, mut out) = (None, None);
    while let Some(arg) = p.next()? {
        match arg {
            Long("quick") => quick = true,
            Long("secs") => secs = Some(p.value()?.parse()?),
            Long("runs") => runs = Some(p.value()?.parse()?),
            Long("only") => {
                let v: String = p.value()?.parse()?;
                for name in v.split(',') {
                    if !SECTION_NAMES.contains(&name) {
                        return Err(lexopt::Error::Custom(
                            format!(
                                "no section {name:?} (sections: {})",
                                SECTION_NAMES.join(" ")
                            )
                            .into(),
                        ));
                    }
                    only.push(name.to_string());
                }
            }
            Long("baseline") => baseline = Some(std::path::PathBuf::from(p.value()?)),
            Long("section") => section = Some(p.value()?.parse()?),
            Long("out") => out = Some(std::path::PathBuf::from(p.value()?)),
            // cargo bench passes --bench to the harness.
            Long("bench") => {}
            Short('h') | Long("help") => {
                print!("{HELP}");
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(Opts {
        quick,
        secs: secs.unwrap_or(if quick { 0.4 } else { 1.5 }),
        runs: runs.unwrap_or(if quick { 3 } else { 5 }),
        only,
        baseline,
        section,
        out,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        sections::child(&args[1..]);
        return;
    }
    if args.first().map(String::as_str) == Some("--child-burst") {
        sections::child_burst(&args[1..]);
        return;
    }
    if args.first().map(String::as_str) == Some("--profile") {
        sections::profile(&args[1..]);
        return;
    }
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("workloads: {e}\n\n{HELP}");
            std::process::exit(2);
        }
    };
    if let (Some(name), Some(out)) = (&opts.section, &opts.out) {
        run_section(name, &opts, out);
        return;
    }
    let quick = opts.quick;
    let t0 = Instant::now();
    let base = pcpalloc_bench::preload::target_dir().join("bench");
    let machine = machine::Machine::read();
    let out_dir = base.join(machine.run_name());
    std::fs::create_dir_all(out_dir.join("sections")).unwrap();
    let out_dir = std::fs::canonicalize(&out_dir).unwrap_or(out_dir);
    std::fs::write(out_dir.join("machine.txt"), machine.text()).unwrap();
    let latest = base.join("latest");
    let _ = std::fs::remove_file(&latest);
    let _ = std::os::unix::fs::symlink(out_dir.file_name().unwrap(), &latest);
    let tty = std::io::stderr().is_terminal();
    let mut md = String::new();
    md.push_str(&sections::header(&opts, &machine));
    if quick && opts.only.is_empty() {
        md.push_str(&format!(
            "Quick mode: {} left out (`--only {}` runs them).\n",
            NOT_QUICK.join(" and "),
            NOT_QUICK.join(",")
        ));
    }
    println!("{md}");
    let mut samples = String::from("section,case,variant,run,metric,value\n");
    let args: Vec<String> = std::env::args().skip(1).collect();
    for (name, _) in sections::SECTIONS {
        if !opts.wants(name) {
            continue;
        }
        if !tty {
            eprintln!("workloads: {name} ...");
        }
        let ts = Instant::now();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(&args)
            .envs(sections::section_env(name).iter().copied())
            .args(["--section", name, "--out"])
            .arg(&out_dir)
            .status();
        if tty {
            eprint!("\r\x1b[2K");
        }
        let file = |ext: &str| out_dir.join("sections").join(format!("{name}.{ext}"));
        let mut text = match status {
            Ok(s) if s.success() => std::fs::read_to_string(file("md")).unwrap_or_default(),
            s => format!("### {name}\n\nThe section's process failed ({s:?}).\n"),
        };
        samples.push_str(&std::fs::read_to_string(file("csv")).unwrap_or_default());
        text.push_str(&format!(
            "\n_The {name} section took {:.0} s{}._\n",
            ts.elapsed().as_secs_f64(),
            std::fs::read_to_string(file("rss"))
                .map(|r| format!("; its process held {r} at its end"))
                .unwrap_or_default()
        ));
        println!("{text}");
        md.push_str(&text);
        md.push('\n');
    }
    let took = format!(
        "Benchmark took {:.0} s ({} mode); load average at the end: {}.\n",
        t0.elapsed().as_secs_f64(),
        if quick { "quick" } else { "full" },
        machine::load_average()
    );
    println!("{took}");
    md.push_str(&took);
    std::fs::write(out_dir.join("report.md"), md).unwrap();
    std::fs::write(out_dir.join("samples.csv"), samples).unwrap();
    println!(
        "Report, every run's figures and plots written to {} (machine.txt, report.md, samples.csv, *.svg)",
        out_dir.display()
    );
}

/// Child mode: runs section `name` in this fresh process and leaves its
/// text, its figures and this process's RSS at its end in `out/sections/`.
fn run_section(name: &str, opts: &Opts, out: &std::path::Path) {
    let Some((_, f)) = sections::SECTIONS.iter().find(|(n, _)| *n == name) else {
        eprintln!("workloads: no section {name:?}");
        std::process::exit(2);
    };
    let text = f(opts, out);
    let file = |ext: &str| out.join("sections").join(format!("{name}.{ext}"));
    std::fs::write(file("md"), text).unwrap();
    std::fs::write(file("csv"), &*SAMPLES.lock().unwrap()).unwrap();
    let rss = pcpalloc_bench::table::mib(measure::rss() as f64);
    std::fs::write(file("rss"), rss).unwrap();
}
