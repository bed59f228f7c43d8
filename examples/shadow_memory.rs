//! Memory a shadow policy's store takes per object it tracks: fills one lane per eviction with
//! a million objects of one byte each (so the capacity never evicts), each in a process of its
//! own, and prints the growth of the resident memory per object, as the shadows' documentation
//! quotes it (`secondhit::lab::shadow::bytes_per_object`).
//!
//! ```text
//! cargo run --release --example shadow_memory
//! ```

use secondhit::admission::{Policy, Settings};
use secondhit::sim::Lane;
use secondhit::store::{Access, Eviction, StoreKind};
use std::time::Duration;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

const OBJECTS: u64 = 1_000_000;

/// One eviction, in this process: prints its row.
fn measure(eviction: Eviction) {
    let store = if eviction.is_exact() {
        StoreKind::Exact
    } else {
        StoreKind::Moka
    };
    let before = rss_bytes();
    let mut lane = match Lane::new(
        Policy::AdmitAll,
        eviction,
        store,
        OBJECTS * 2,
        &Settings::default(),
        false,
    ) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{eviction}: {e}");
            return;
        }
    };
    for id in 0..OBJECTS {
        lane.step(&Access::new(id, 1, id), Duration::ZERO);
    }
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "{:<10} {:<6} {:>10} {:>17} {:>10}",
        eviction.to_string(),
        store.to_string(),
        lane.counts().admissions,
        grown / OBJECTS,
        secondhit::lab::shadow::bytes_per_object(eviction)
    );
}

fn main() {
    if let Some(name) = std::env::args().nth(1) {
        match name.parse::<Eviction>() {
            Ok(e) => measure(e),
            Err(e) => eprintln!("{e}"),
        }
        return;
    }
    println!(
        "{:<10} {:<6} {:>10} {:>17} {:>10}",
        "eviction", "store", "objects", "bytes per object", "documented"
    );
    let me = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot find this program to run it per eviction: {e}");
            return;
        }
    };
    // Every store a shadow may use: all but Belady's, which need the future.
    for e in Eviction::ALL.iter().filter(|e| !e.needs_future()) {
        let _ = std::process::Command::new(&me).arg(e.to_string()).status();
    }
}
