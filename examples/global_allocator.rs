//! pcpalloc as a Rust program's global allocator, configured in code, with
//! its statistics read at the end.
//!
//! ```sh
//! cargo run --release --example global_allocator
//! PCPALLOC_DECAY_MS=100 cargo run --release --example global_allocator   # the environment wins
//! ```

use std::collections::HashMap;
use std::thread;

use pcpalloc::{Config, PcpAlloc};

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc::with_config(Config::new().decay_ms(500));

fn main() {
    // Some work: four threads build maps of strings, and hand them back.
    let maps: Vec<HashMap<u32, String>> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                (0..50_000u32)
                    .map(|i| (i, format!("thread {t} item {i}")))
                    .collect::<HashMap<_, _>>()
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    let entries: usize = maps.iter().map(HashMap::len).sum();

    let s = pcpalloc::stats();
    println!("{entries} entries live in 4 maps");
    println!("allocated {:>8} KiB", s.bytes.allocated >> 10);
    println!("active    {:>8} KiB", s.bytes.active >> 10);
    println!("resident  {:>8} KiB", s.bytes.resident >> 10);
    println!("mapped    {:>8} KiB", s.bytes.mapped >> 10);
    println!(
        "charged   {:>8} KiB (peak {} KiB)",
        s.bytes.charged >> 10,
        s.bytes.peak_charged >> 10
    );
    println!(
        "pagesets: {} refills, {} drains, {} free_high; zone lock taken {} times",
        s.pcp_total.refills, s.pcp_total.drains, s.pcp_total.free_high, s.zone.lock_acquisitions
    );

    drop(maps);
    let released = pcpalloc::trim();
    println!(
        "after drop and trim: allocated {} KiB, {} KiB given back to the OS",
        pcpalloc::stats().bytes.allocated >> 10,
        released >> 10
    );
}
