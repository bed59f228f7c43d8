//! The admission filter's state on disk (`--state-dir`): written whole to a temporary file,
//! synced, then renamed over the previous snapshot (and the directory synced), so a crash at any
//! moment leaves the previous snapshot whole; read at start, where a missing, corrupt, truncated
//! or mismatched file is ignored with one log line and never stops the start. The bytes are the
//! plugin crate's [`snapshot`](crate::admission::snapshot) format; `simulate --save-state`
//! writes the same file, so a filter can be warmed offline from a trace and shipped to an edge.

use crate::admission::{Admission, RestoreError};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The snapshot's file name inside the state directory.
pub const FILE_NAME: &str = "admission.snapshot";

/// The time since the Unix epoch, as snapshots are stamped.
pub fn wall_now() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// The snapshot file in `dir`.
pub fn file_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Writes `bytes` as `dir`'s snapshot atomically: a temporary file, synced, renamed over the old
/// one, then the directory synced so the rename itself is durable.
pub fn save(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, file_in(dir))?;
    // A directory opened read-only can be synced on Unix; elsewhere this may fail harmlessly.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// What loading the state at start found.
#[derive(Debug)]
pub enum Loaded {
    /// Loaded: this many bytes.
    Restored(usize),
    /// No snapshot in the directory yet.
    Missing,
    /// A snapshot that could not be read, and why (the start goes on with an empty filter).
    Unreadable(io::Error),
    /// A snapshot that was refused, and why (the start goes on with an empty filter).
    Refused(RestoreError),
}

/// Loads `dir`'s snapshot into `admission` as of `now` (its clock) and the wall clock.
pub fn load(dir: &Path, admission: &dyn Admission, now: Duration) -> Loaded {
    let path = file_in(dir);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Loaded::Missing,
        Err(e) => return Loaded::Unreadable(e),
    };
    match admission.restore(&bytes, now, wall_now()) {
        Ok(()) => Loaded::Restored(bytes.len()),
        Err(e) => Loaded::Refused(e),
    }
}

/// Loads and logs the outcome, one line, naming the file.
pub fn load_and_log(dir: &Path, admission: &dyn Admission, now: Duration) -> Loaded {
    let loaded = load(dir, admission, now);
    let file = file_in(dir);
    match &loaded {
        Loaded::Restored(n) => {
            tracing::info!(file = %file.display(), bytes = n, "admission filter state loaded")
        }
        Loaded::Missing => {
            tracing::info!(file = %file.display(), "no admission filter state yet; starting empty")
        }
        Loaded::Unreadable(e) => {
            tracing::warn!(file = %file.display(), error = %e, "admission filter state unreadable; starting empty")
        }
        Loaded::Refused(e) => {
            tracing::warn!(file = %file.display(), reason = %e, "admission filter state ignored; starting empty")
        }
    }
    loaded
}

/// Takes a snapshot of `admission` and writes it to `dir` (nothing for a policy without state).
pub fn snapshot_to(dir: &Path, admission: &dyn Admission, now: Duration) -> io::Result<bool> {
    match admission.snapshot(now, wall_now()) {
        Some(bytes) => save(dir, &bytes).map(|()| true),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Decision, Policy, Settings};
    use crate::KeyHash;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("secondhit-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_saved_state_loads_and_a_broken_one_is_ignored() {
        let d = dir("roundtrip");
        let s = Duration::from_secs;
        let a = Settings::default().build(Policy::SecondHit).unwrap();
        let key = KeyHash::of(b"k");
        a.on_miss(key, s(10));
        assert!(snapshot_to(&d, &*a, s(11)).unwrap());
        assert!(
            !d.join(format!("{FILE_NAME}.tmp")).exists(),
            "renamed into place"
        );
        let b = Settings::default().build(Policy::SecondHit).unwrap();
        assert!(matches!(load(&d, &*b, s(12)), Loaded::Restored(_)));
        assert_eq!(b.on_miss(key, s(13)), Decision::Admit);
        // Truncated: refused, nothing loaded, no panic.
        let bytes = fs::read(file_in(&d)).unwrap();
        fs::write(file_in(&d), &bytes[..bytes.len() / 2]).unwrap();
        let c = Settings::default().build(Policy::SecondHit).unwrap();
        assert!(matches!(load(&d, &*c, s(12)), Loaded::Refused(_)));
        assert_eq!(c.on_miss(key, s(13)), Decision::Defer);
        fs::remove_file(file_in(&d)).unwrap();
        assert!(matches!(load(&d, &*c, s(12)), Loaded::Missing));
        // Admit-all keeps nothing and writes nothing.
        let all = Settings::default().build(Policy::AdmitAll).unwrap();
        assert!(!snapshot_to(&d, &*all, s(1)).unwrap());
        assert!(!file_in(&d).exists());
        fs::remove_dir_all(d).unwrap();
    }
}
