//! What the heap profile costs the C programs (`--only profile_cost`):
//! each program of the `preload` section under libpcpalloc.so with
//! sampling off, on at the default rate (`PCPALLOC_PROFILE=1`, one sample
//! per 2 MiB allocated, the profile written at exit), and the system
//! malloc — each a fresh process, interleaved: every round runs each
//! program once in each way, and the figures are the medians of each
//! round's ratio to the same round's run with sampling off, so a slow
//! spell of the machine moves all three alike.

use std::ffi::OsStr;
use std::path::Path;

use crate::preload::{build_lib, compile, geomean, run_with, PROGRAMS};
use crate::{progress, Opts};
use pcpalloc_bench::runs::Runs;
use pcpalloc_bench::table::{mib, Table};

/// The three ways each program runs, in each round's order.
const WAYS: [&str; 3] = ["off", "on", "system"];

pub fn section(opts: &Opts, out: &Path) -> String {
    progress("profile_cost: building libpcpalloc.so");
    let Some(lib) = build_lib() else {
        return "### The heap profile's cost\n\nlibpcpalloc.so could not be built; section skipped.\n"
            .into();
    };
    let cdir = out.join("c");
    let pdir = out.join("profile_cost");
    std::fs::create_dir_all(&cdir).unwrap();
    std::fs::create_dir_all(&pdir).unwrap();
    let file = pdir.join("p.%p.pb");
    let progs: Vec<_> = PROGRAMS
        .iter()
        .filter_map(|p| compile(p.name, &cdir).map(|b| (p, b)))
        .collect();
    // Per program: each way's times and peaks, and each round's ratios of
    // on and of the system to off.
    let n = progs.len();
    let mut times = vec![[Runs::new(), Runs::new(), Runs::new()]; n];
    let mut peaks = vec![[Runs::new(), Runs::new(), Runs::new()]; n];
    let mut ratios = vec![[Runs::new(), Runs::new()]; n];
    for r in 0..opts.runs {
        for (pi, (p, bin)) in progs.iter().enumerate() {
            let args = if opts.quick { p.quick } else { p.full };
            let mut t = [f64::NAN; 3];
            for (wi, way) in WAYS.iter().enumerate() {
                progress(&format!(
                    "profile_cost: round {}/{}: {} {way}",
                    r + 1,
                    opts.runs,
                    p.name
                ));
                let on: [(&str, &OsStr); 2] = [
                    ("PCPALLOC_PROFILE", OsStr::new("1")),
                    ("PCPALLOC_PROFILE_FILE", file.as_os_str()),
                ];
                let (pre, env): (Option<&Path>, &[(&str, &OsStr)]) = match wi {
                    0 => (Some(&lib), &[]),
                    1 => (Some(&lib), &on),
                    _ => (None, &[]),
                };
                if let Some((secs, peak)) = run_with(bin, args, pre, env, p.timed) {
                    crate::record("profile_cost", p.name, way, r, "seconds", secs);
                    crate::record("profile_cost", p.name, way, r, "peak_bytes", peak);
                    times[pi][wi].push(secs);
                    peaks[pi][wi].push(peak);
                    t[wi] = secs;
                }
                // The exit's profile is not kept.
                for e in std::fs::read_dir(&pdir).into_iter().flatten().flatten() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
            if t[0].is_finite() {
                for k in 0..2 {
                    if t[k + 1].is_finite() {
                        ratios[pi][k].push(t[k + 1] / t[0]);
                    }
                }
            }
        }
    }
    let two = |v: f64| format!("{v:.3}");
    let mut tab = Table::new(
        "The heap profile's cost: C programs under LD_PRELOAD, sampling off and on",
        &[
            "program",
            "off (s)",
            "on / off",
            "system / off",
            "RSS off",
            "RSS on",
        ],
    );
    let mut on_med = vec![];
    let mut sys_med = vec![];
    for (pi, (p, _)) in progs.iter().enumerate() {
        on_med.push(ratios[pi][0].median());
        sys_med.push(ratios[pi][1].median());
        tab.row(vec![
            p.what.to_string(),
            times[pi][0].show(3),
            ratios[pi][0].show_with(two),
            ratios[pi][1].show_with(two),
            peaks[pi][0].show_with(mib),
            peaks[pi][1].show_with(mib),
        ]);
    }
    tab.row(vec![
        "geometric mean".into(),
        String::new(),
        two(geomean(&on_med)),
        two(geomean(&sys_med)),
        String::new(),
        String::new(),
    ]);
    tab.note = format!(
        "Time with sampling off in seconds, then each round's time ratio to it (lower is better): \
         with `PCPALLOC_PROFILE=1` (one sample per 2 MiB on average, the profile written at \
         exit, which the time includes), and under the system malloc; medians of {} interleaved \
         round(s), range in parentheses; the geometric mean is over the medians. Programs \
         printing `rtime` are timed by it, the others by wall time. RSS: peak resident set \
         (VmHWM). Sources in bench/c/.",
        opts.runs
    );
    tab.render()
}
