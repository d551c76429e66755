//! Pinning the calling thread to a CPU of the set this process may run on
//! (core_affinity reads it from `sched_getaffinity`).

/// Pins the calling thread to the `i`-th CPU this process may run on
/// (modulo how many there are). An error says why it could not.
pub fn pin(i: usize) -> Result<(), String> {
    let cores = core_affinity::get_core_ids().ok_or("cannot read the allowed CPU set")?;
    if cores.is_empty() {
        return Err("the allowed CPU set is empty".into());
    }
    let core = cores[i % cores.len()];
    if core_affinity::set_for_current(core) {
        Ok(())
    } else {
        Err(format!("sched_setaffinity to CPU {} failed", core.id))
    }
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> usize {
    core_affinity::get_core_ids().map_or(1, |c| c.len().max(1))
}
