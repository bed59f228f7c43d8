//! The progress bar of long runs (simulate, replay, demo), on stderr when it is a terminal.

use secondhit::sim;
use std::io::IsTerminal;

/// A progress bar on stderr, shown only when stderr is a terminal.
pub(crate) struct Bar(indicatif::ProgressBar);

impl Bar {
    pub(crate) fn new() -> Bar {
        let bar = if std::io::stderr().is_terminal() {
            indicatif::ProgressBar::new(0)
        } else {
            indicatif::ProgressBar::hidden()
        };
        Bar(bar)
    }
}

impl sim::Progress for Bar {
    fn begin(&self, pass: &str, total: Option<u64>) {
        self.0.reset();
        let style = match total {
            Some(n) => {
                self.0.set_length(n);
                indicatif::ProgressStyle::with_template(
                    "{msg:>12} [{bar:30}] {human_pos}/{human_len} ({elapsed}, {eta} left)",
                )
            }
            None => indicatif::ProgressStyle::with_template(
                "{msg:>12} {spinner} {human_pos} ({elapsed})",
            ),
        };
        if let Ok(style) = style {
            self.0.set_style(style.progress_chars("=> "));
        }
        self.0.set_message(pass.to_string());
    }
    fn advance(&self, n: u64) {
        self.0.inc(n);
    }
    fn end(&self) {
        self.0.finish_and_clear();
    }
}
