//! The live lab's commands: `demo`, `origin` and `replay`.

use super::args::{DemoArgs, OriginArgs, ReplayArgs};
use super::progress::Bar;
use super::serve::StopSignals;
use super::{print_report, runtime, source};
use anyhow::Context;
use std::io::Write;

pub(crate) fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let options = secondhit::demo::DemoOptions {
        requests: args.requests,
        capacity_fraction: args.capacity_fraction,
        policies: args.policy,
        concurrency: usize::try_from(args.concurrency).unwrap_or(1),
        lab_mode: args.lab_mode,
    };
    let report = runtime()?.block_on(secondhit::demo::run(
        &source(None, None),
        &options,
        &Bar::new(),
    ))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        out.write_all(report.to_text().as_bytes())?;
    }
    Ok(())
}

pub(crate) fn origin(args: OriginArgs) -> anyhow::Result<()> {
    let options = secondhit::origin_server::OriginOptions {
        listen: args.listen,
        max_age: args.max_age,
        latency: args.latency.unwrap_or_default(),
        error_rate: args.error_rate,
        reset_rate: args.reset_rate,
        short_rate: args.short_rate,
        drip_rate: args.drip_rate,
        seed: args.seed,
        ..Default::default()
    };
    runtime()?.block_on(async move {
        let stop = StopSignals::install()?;
        let running = secondhit::origin_server::start(options)
            .await
            .map_err(anyhow::Error::msg)?;
        eprintln!(
            "secondhit origin on http://{} (GET /<key>?size=N; stats at /_stats); Ctrl-C to stop",
            running.addr
        );
        stop.wait().await;
        let stats = running.stats();
        running.shutdown().await;
        eprintln!(
            "served {} requests, {} body bytes",
            stats.requests, stats.bytes
        );
        anyhow::Ok(())
    })
}

pub(crate) fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let target: http::Uri = args
        .target
        .parse()
        .with_context(|| format!("--target {:?} is not a URL", args.target))?;
    let mut options = secondhit::replay::ReplayOptions::new(target);
    options.concurrency = args.concurrency;
    options.rate = args.rate;
    options.speed = args.speed;
    options.limit = args.limit;
    options.skip = args.skip;
    options.warmup = args.warmup;
    options.duration = args.duration.and_then(|d| d.0);
    options.origin_stats = match &args.origin_stats {
        Some(u) => Some(
            u.parse()
                .with_context(|| format!("--origin-stats {u:?} is not a URL"))?,
        ),
        None => None,
    };
    let reader = source(args.trace.as_deref(), args.input.format()?).open()?;
    let report = runtime()?.block_on(secondhit::replay::run(reader, &options, &Bar::new()))?;
    print_report(&report.to_text(), &report, args.json.as_deref())?;
    Ok(())
}
