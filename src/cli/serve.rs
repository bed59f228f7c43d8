//! `secondhit serve`: the configuration file with the flags over it, the logger, the signals,
//! and the proxy until a stop.

use super::args::ServeArgs;
use anyhow::Context;
use secondhit::config::Config;
use std::io::IsTerminal;

pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    args.overrides.clone().apply(&mut config)?;
    let config = config.validate()?;
    // What SIGHUP and POST /reload read: the same file with the same flags over it.
    let source: Option<secondhit::server::ConfigSource> = args.config.clone().map(|path| {
        let overrides = args.overrides.clone();
        std::sync::Arc::new(move || {
            let mut c = Config::from_file(&path)?;
            overrides.clone().apply(&mut c)?;
            c.validate()
        }) as secondhit::server::ConfigSource
    });
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(config.log.level.as_str()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    // Connections and the memory files of large stored bodies both take descriptors.
    secondhit::pages::raise_open_file_limit();
    // The public listeners have worker threads of their own (`workers`); this runtime has the
    // admin listener, reloads and snapshots.
    let control = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("secondhit-control")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    control.block_on(async move {
        // Before anything is served: a reload or a log rotation sent as soon as the ready line
        // is out must find its handler (the default action of each of these ends the process).
        let signals = Signals::install()?;
        let clock = std::sync::Arc::new(secondhit::clock::SystemClock::new());
        let running = secondhit::server::start_with_source(config, clock, source).await?;
        eprintln!(
            "secondhit: serving on {}://{} (admin http://{}/metrics); Ctrl-C to stop",
            if running.tls { "https" } else { "http" },
            running.addr,
            running.admin_addr
        );
        #[cfg(unix)]
        {
            let reloader = std::sync::Arc::clone(&running.reloader);
            let mut hup = signals.hangup;
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    let r = std::sync::Arc::clone(&reloader);
                    // Reads files: off the async threads. It logs its own outcome.
                    let _ = tokio::task::spawn_blocking(move || r.reload()).await;
                }
            });
            // Log rotation: the access log file is reopened under its configured name.
            let proxy = std::sync::Arc::clone(&running.proxy);
            let mut usr1 = signals.user1;
            tokio::spawn(async move {
                while usr1.recv().await.is_some() {
                    proxy.reopen_access_log();
                    tracing::info!("SIGUSR1: reopening the access log");
                }
            });
        }
        signals.stop.wait().await;
        tracing::info!("shutting down: finishing in-flight requests");
        running.shutdown().await;
        anyhow::Ok(())
    })
}

/// The signals `serve` handles, registered at once (before the ready line): SIGHUP reloads,
/// SIGUSR1 reopens the access log, SIGTERM and SIGINT stop.
struct Signals {
    stop: StopSignals,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
    #[cfg(unix)]
    user1: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers every handler; needs the runtime's context.
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                stop: StopSignals::install()?,
                hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
                user1: signal(SignalKind::user_defined1()).context("cannot handle SIGUSR1")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {
            stop: StopSignals::install()?,
        })
    }
}

/// SIGTERM and SIGINT (Ctrl-C), registered when made: a stop sent before [`StopSignals::wait`]
/// is polled is still seen, and never kills the process half-way.
pub(crate) struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Registers both handlers; needs the runtime's context.
    pub(crate) fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
                int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// Resolves on the first SIGTERM or SIGINT.
    pub(crate) async fn wait(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
