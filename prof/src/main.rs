//! `pcpalloc-prof PROFILE [--svg OUT.svg] [--folded OUT.txt] [--top N]
//! [--alloc] [--title TEXT] [--depth N] [--min-width PCT] [--all-frames]`:
//! symbolises a heap
//! profile pcpalloc wrote (`PCPALLOC_PROFILE`) and prints the stacks that
//! hold the most bytes; `--svg` draws the flame graph, `--folded` writes
//! the folded stacks other flame-graph tools read. Live bytes by default
//! (at exit: the leak report), `--alloc` for the bytes ever allocated.

use std::path::PathBuf;
use std::process::ExitCode;

use pcpalloc_prof::{flame_graph, folded, human, top, Measure, Profile};

const USAGE: &str = "usage: pcpalloc-prof PROFILE [--svg OUT.svg] [--folded OUT.txt] [--top N] [--alloc] [--title TEXT] [--depth N] [--min-width PCT] [--all-frames]";

struct Args {
    profile: PathBuf,
    svg: Option<PathBuf>,
    folded: Option<PathBuf>,
    top: usize,
    depth: usize,
    measure: Measure,
    title: Option<String>,
    min_width: f64,
    trim: bool,
}

fn args() -> Result<Args, lexopt::Error> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_env();
    let mut a = Args {
        profile: PathBuf::new(),
        svg: None,
        folded: None,
        top: 20,
        depth: 6,
        measure: Measure::Live,
        title: None,
        min_width: 0.5,
        trim: true,
    };
    let mut profile = None;
    while let Some(arg) = p.next()? {
        match arg {
            Long("svg") => a.svg = Some(p.value()?.into()),
            Long("folded") => a.folded = Some(p.value()?.into()),
            Long("top") => a.top = p.value()?.parse()?,
            Long("depth") => a.depth = p.value()?.parse()?,
            Long("alloc") => a.measure = Measure::Allocated,
            Long("title") => a.title = Some(p.value()?.string()?),
            Long("min-width") => a.min_width = p.value()?.parse()?,
            Long("all-frames") => a.trim = false,
            Long("help") | Short('h') => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            Value(v) if profile.is_none() => profile = Some(PathBuf::from(v)),
            _ => return Err(arg.unexpected()),
        }
    }
    a.profile = profile.ok_or("a profile file is needed")?;
    Ok(a)
}

fn run(a: &Args) -> Result<(), pcpalloc_prof::Error> {
    let p = Profile::read(&a.profile)?;
    let stacks = p.symbolise(a.trim);
    let what = match a.measure {
        Measure::Live => "live",
        Measure::Allocated => "allocated",
    };
    for c in p.comments() {
        println!("# {c}");
    }
    println!(
        "# one sample per {} allocated on average; {what} bytes by stack",
        human(p.period)
    );
    print!("{}", top(&stacks, a.measure, a.top, a.depth));
    let title = a.title.clone().unwrap_or_else(|| {
        format!(
            "{what} bytes by stack: {}",
            a.profile.file_name().unwrap_or_default().to_string_lossy()
        )
    });
    if let Some(path) = &a.svg {
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        flame_graph(
            &stacks,
            a.measure,
            &title,
            a.min_width,
            std::io::BufWriter::new(f),
        )?;
        println!("# flame graph: {}", path.display());
    }
    if let Some(path) = &a.folded {
        let mut text = folded(&stacks, a.measure).join("\n");
        text.push('\n');
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("# folded stacks: {}", path.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("pcpalloc-prof: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pcpalloc-prof: {e}");
            ExitCode::FAILURE
        }
    }
}
