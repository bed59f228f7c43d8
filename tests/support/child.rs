//! `secondhit serve` as a child process: what a test measures of a process of its own (its
//! resident memory, its signals), apart from the test process and the tests beside it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// A child's stderr, line by line, read on a thread of its own.
pub fn stderr_lines(child: &mut Child) -> Receiver<String> {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    rx
}

/// What follows `marker` up to `end` on the first line that has it (20 s at most).
pub fn wait_for(lines: &Receiver<String>, marker: &str, end: char) -> String {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no line with {marker:?}"));
        if let Some(rest) = line.split(marker).nth(1) {
            return rest.split(end).next().unwrap_or_default().to_string();
        }
    }
}

/// A running `secondhit serve`, stopped (killed) when dropped.
pub struct ServeChild {
    pub child: Child,
    /// The public listener.
    pub addr: SocketAddr,
    /// The admin listener.
    pub admin: SocketAddr,
    config: PathBuf,
}

impl ServeChild {
    /// `serve` with `config` (TOML) as its file, once it said it is ready.
    pub fn start(test: &str, config: &str) -> ServeChild {
        let file = std::env::temp_dir().join(format!(
            "secondhit-child-{test}-{}.toml",
            std::process::id()
        ));
        std::fs::write(&file, config).unwrap();
        let mut child = Command::new(super::bin())
            .args(["serve", "--config"])
            .arg(&file)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = stderr_lines(&mut child);
        // Guarded before waiting: a child that never gets ready is killed too.
        let mut guard = ServeChild {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            config: file,
        };
        // `secondhit: serving on http://ADDR (admin http://ADMIN/metrics); Ctrl-C to stop`
        let ready = wait_for(&lines, "serving on http://", '\n');
        let (addr, rest) = ready.split_once(' ').expect("the ready line");
        let admin = rest
            .strip_prefix("(admin http://")
            .and_then(|r| r.split_once("/metrics"))
            .map(|(a, _)| a)
            .expect("the admin address on the ready line");
        (guard.addr, guard.admin) = (addr.parse().unwrap(), admin.parse().unwrap());
        // Keep reading stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        guard
    }

    /// The child's resident memory, in bytes (Linux).
    pub fn rss_bytes(&self) -> u64 {
        rss_of(
            &Path::new("/proc")
                .join(self.child.id().to_string())
                .join("status"),
        )
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// `VmRSS` of a `/proc/<pid>/status` file, in bytes.
fn rss_of(status: &Path) -> u64 {
    std::fs::read_to_string(status)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
