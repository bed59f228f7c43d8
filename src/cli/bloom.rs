//! `secondhit bloom`: a Bloom filter generation's size, optionally measured.

use super::args::BloomArgs;
use super::progress::Bar;
use anyhow::Context;
use secondhit::bloom::Layout;
use secondhit::plan::Plan;
use secondhit::sim;
use std::io::Write;

pub(crate) fn bloom(args: BloomArgs) -> anyhow::Result<()> {
    let mut plan =
        Plan::new(args.items, args.fpr, args.layout).context("cannot size the filter")?;
    if args.measure {
        use sim::Progress;
        let bar = Bar::new();
        bar.begin("measuring", Some(2 * args.items));
        let mut reported = 0;
        plan.measure(|done| {
            bar.advance(done - reported);
            reported = done;
        });
        bar.end();
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &plan)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", plan.to_text())?;
        if args.layout == Layout::Standard {
            if let Ok(b) = Plan::new(args.items, args.fpr, Layout::Blocked) {
                writeln!(
                    out,
                    "  (blocked layout: {:.2} bits per item, k = {}, {} per generation; one cache miss per lookup)",
                    b.bits_per_item,
                    b.hashes,
                    secondhit::units::bytes(b.memory_bytes)
                )?;
            }
        }
    }
    Ok(())
}
