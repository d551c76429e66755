//! Helpers shared by the benchmarks: tables, plots, pinning, percentiles —
//! thin wrappers over well-kept crates, so the harness stays about the
//! measurements.

pub mod chart;
pub mod pages;
pub mod pin;
pub mod preload;
pub mod replay;
pub mod rows;
pub mod runs;
pub mod table;
