//! Purges by URL on the flash tier: one mark per purged URL, kept in memory and in a log file
//! beside the blocks.
//!
//! A URL whose responses vary is stored on disk under one key per variant (its primary key,
//! `\n`, the selecting fields' values), and neither foyer nor the memory store can list those
//! keys: foyer's index holds hashes, and memory forgets a variant once it has evicted it to disk.
//! So a purge cannot remove a URL's variants one by one. Instead it records when the URL was
//! purged, keyed by the hash of its primary key, and a disk object of that URL stored before
//! the mark is never served (the disk tier checks on every read). That reaches every variant,
//! those a later request will select as well as those memory still knows of.
//!
//! The marks are bounded: past [`KEPT`] the oldest is folded into a floor, a time before which
//! every disk object counts as purged (more is hidden than was purged, never less). Each mark is
//! appended to the log (`secondhit-purged-urls`: `u <hash> <nanos>` and `f <nanos>` lines) as
//! it is made, not synced: it survives a restart or a crash of the process, not a power cut.
//! The log is read and rewritten whole at start, and rewritten when it grows past twice the
//! marks it holds. A log that does not read hides everything stored before the start (logged).

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::Path;

/// The log file in the tier's directory.
pub(super) const LOG: &str = "secondhit-purged-urls";

/// How many URL marks are kept one by one (about 50 bytes each in memory, 30 in the log).
pub(super) const KEPT: usize = 65_536;

/// The marks and their log.
#[derive(Debug, Default)]
pub(super) struct UrlPurges {
    /// Primary key hash -> the latest purge of it, in nanoseconds on the proxy's clock.
    by_url: HashMap<u64, u64>,
    /// URLs in the order first marked (each once).
    order: VecDeque<(u64, u64)>,
    /// Every disk object stored before this counts as purged.
    floor: u64,
    /// The log, open for appending, once loaded.
    log: Option<std::fs::File>,
    /// Lines in the log.
    lines: usize,
    /// Upper bound on `order` (a parameter for the tests).
    kept: usize,
}

impl UrlPurges {
    /// Empty, keeping up to `kept` marks.
    pub(super) fn new(kept: usize) -> UrlPurges {
        UrlPurges {
            kept: kept.max(1),
            ..UrlPurges::default()
        }
    }

    /// Whether a disk object of the URL `url` (a primary key hash) stored at `stored` (nanoseconds)
    /// was purged since.
    pub(super) fn purged(&self, url: u64, stored: u64) -> bool {
        stored < self.floor || self.by_url.get(&url).is_some_and(|&at| stored < at)
    }

    /// Records a purge of `url` at `at`, in memory. A URL purged again keeps its one place in
    /// the order (its mark moves forward), so purging one URL over and over never pushes other
    /// marks into the floor.
    fn mark(&mut self, url: u64, at: u64) {
        match self.by_url.get_mut(&url) {
            Some(latest) => {
                *latest = (*latest).max(at);
                return;
            }
            None => {
                self.by_url.insert(url, at);
                self.order.push_back((url, at));
            }
        }
        while self.order.len() > self.kept {
            let Some((old, t)) = self.order.pop_front() else {
                break;
            };
            // The floor covers the URL's latest mark, whenever it was made.
            let latest = self.by_url.remove(&old).unwrap_or(t);
            self.floor = self.floor.max(latest);
        }
    }

    /// Records a purge of `url` at `at` and appends it to the log (rewritten when it has grown
    /// past twice what it needs). A log that cannot be written is logged; the mark holds for this
    /// run.
    pub(super) fn purge(&mut self, dir: &Path, url: u64, at: u64) {
        self.mark(url, at);
        if self.lines >= 2 * self.kept.max(16) {
            self.rewrite(dir);
            return;
        }
        let Some(log) = self.log.as_mut() else {
            return;
        };
        match writeln!(log, "u {url:x} {at}") {
            Ok(()) => self.lines += 1,
            Err(e) => {
                tracing::warn!(path = %dir.join(LOG).display(), error = %e, "appending a URL purge")
            }
        }
    }

    /// Loads the log a previous run left, then rewrites it whole. One that does not read (a line
    /// cut short by a crash, a disk error) sets the floor to `now`: nothing stored before is
    /// served.
    pub(super) fn load(&mut self, dir: &Path, now: u64) {
        let path = dir.join(LOG);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines() {
                    if !self.replay(line) {
                        tracing::warn!(path = %path.display(), line, "an unreadable URL purge log: everything on disk stored before now is treated as purged");
                        self.floor = self.floor.max(now);
                        break;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "an unreadable URL purge log: everything on disk stored before now is treated as purged");
                self.floor = self.floor.max(now);
            }
        }
        self.rewrite(dir);
    }

    /// Applies one log line; `false` if it is not one.
    fn replay(&mut self, line: &str) -> bool {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("f"), Some(at), None, None) => match at.parse::<u64>() {
                Ok(at) => {
                    self.floor = self.floor.max(at);
                    true
                }
                Err(_) => false,
            },
            (Some("u"), Some(url), Some(at), None) => {
                match (u64::from_str_radix(url, 16), at.parse::<u64>()) {
                    (Ok(url), Ok(at)) => {
                        self.mark(url, at);
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }

    /// Writes the floor and the marks to a new log, synced, renames it into place, and appends to
    /// it from now on. On failure (logged) the old log stays and is appended to.
    fn rewrite(&mut self, dir: &Path) {
        let path = dir.join(LOG);
        let tmp = dir.join(format!("{LOG}.tmp"));
        let mut text = format!("f {}\n", self.floor);
        let mut lines = 1;
        for (&url, &at) in &self.by_url {
            text.push_str(&format!("u {url:x} {at}\n"));
            lines += 1;
        }
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(dir)?.sync_all()?;
            std::fs::OpenOptions::new().append(true).open(&path)
        })();
        match written {
            Ok(f) => {
                self.log = Some(f);
                self.lines = lines;
                // The map is the truth now; the order only has to bound it.
                self.order = self.by_url.iter().map(|(&u, &t)| (u, t)).collect();
                self.order.make_contiguous().sort_by_key(|&(_, t)| t);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "rewriting the URL purge log");
                // Tried again only after as many more marks: a failing disk is not retried
                // (with its syncs) on every purge.
                self.lines = 0;
                if self.log.is_none() {
                    self.log = open_append(&path);
                }
            }
        }
    }
}

fn open_append(path: &Path) -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("secondhit-urlpurge-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_mark_hides_what_was_stored_before_it_only_for_its_url() {
        let d = dir("mark");
        let mut p = UrlPurges::new(8);
        p.load(&d, 0);
        p.purge(&d, 7, 100);
        assert!(p.purged(7, 99));
        assert!(!p.purged(7, 100), "stored at the purge or after: served");
        assert!(!p.purged(8, 50), "another URL");
        // A second purge moves the mark on.
        p.purge(&d, 7, 200);
        assert!(p.purged(7, 150));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn purging_one_url_over_and_over_folds_no_other_mark() {
        let d = dir("repeat");
        let mut p = UrlPurges::new(3);
        p.load(&d, 0);
        p.purge(&d, 1, 10);
        p.purge(&d, 2, 20);
        for i in 0..100_000u64 {
            p.purge(&d, 3, 30 + i);
        }
        assert_eq!(p.floor, 0, "nothing folded");
        assert_eq!(p.order.len(), 3);
        assert!(p.purged(1, 9) && !p.purged(1, 10) && !p.purged(99, 0));
        assert!(p.purged(3, 100_000) && !p.purged(3, 100_029));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn past_the_bound_the_oldest_marks_fold_into_the_floor() {
        let d = dir("bound");
        let mut p = UrlPurges::new(3);
        p.load(&d, 0);
        for url in 1..=5u64 {
            p.purge(&d, url, url * 10);
        }
        assert!(p.by_url.len() <= 3 && p.order.len() <= 3);
        // URLs 1 and 2 folded: the floor is 20, so anything stored before is hidden (more than
        // was purged), never less.
        assert!(p.purged(1, 5) && p.purged(2, 15) && p.purged(99, 19));
        assert!(!p.purged(99, 20));
        assert!(p.purged(5, 49) && !p.purged(5, 50));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_log_survives_a_restart_and_a_bad_one_fails_closed() {
        let d = dir("log");
        let mut p = UrlPurges::new(4);
        p.load(&d, 0);
        for url in 1..=6u64 {
            p.purge(&d, url, url * 10);
        }
        p.purge(&d, 6, 70);
        drop(p);
        let mut again = UrlPurges::new(4);
        again.load(&d, 1_000);
        assert!(again.purged(6, 65) && !again.purged(6, 70));
        assert!(again.purged(1, 5), "a folded mark is still covered");
        assert!(!again.purged(42, 1_000), "no more than was purged");
        // Many purges of one URL: the log is rewritten, not grown without bound.
        for i in 0..200 {
            again.purge(&d, 9, 2_000 + i);
        }
        let lines = std::fs::read_to_string(d.join(LOG))
            .unwrap()
            .lines()
            .count();
        assert!(lines <= 2 * 16 + 1, "{lines} lines");
        drop(again);
        // A line cut short: everything stored before the start is hidden.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.join(LOG))
            .unwrap();
        f.write_all(b"u 1").unwrap();
        drop(f);
        let mut bad = UrlPurges::new(4);
        bad.load(&d, 5_000);
        assert!(bad.purged(42, 4_999) && !bad.purged(42, 5_000));
        // ... and stays so after the next start (the rewritten log keeps the floor).
        drop(bad);
        let mut next = UrlPurges::new(4);
        next.load(&d, 9_000);
        assert!(next.purged(42, 4_999) && !next.purged(42, 5_000));
        let _ = std::fs::remove_dir_all(&d);
    }
}
