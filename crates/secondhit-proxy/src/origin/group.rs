//! Origin groups at run time: a group's servers with their health, and the choice of a server
//! for one attempt of a request ([`Group::pick`]).
//!
//! A server is available when its active probes say it is up (always, without probes) and
//! passive health has not ejected it. A request picks among the available servers it has not
//! tried yet, the primaries first and the backups only when no primary is left
//! ([`crate::config::Balance`]: weighted round-robin, least outstanding, or a consistent hash
//! of the cache key). Each attempt's result feeds passive health ([`Group::finish`]): a server
//! whose attempts fail `outlier.consecutive` times in a row is ejected for a time that doubles
//! at each ejection that follows its return within `max_ejection`, never more than
//! `max_ejected_percent` of the group at once. Time is the proxy's clock, passed in: tests move
//! it by hand.
//!
//! A server's health lives in an `Arc` that a reload hands to the new group when the server
//! stays ([`Group::new`] with the previous groups), so ejections and probe states survive it.

use crate::config::{Balance, GroupConfig, HealthConfig, OriginUrl, OutlierConfig, RetryOn};
use crate::hash::object_id;
use crate::metrics::LatencyHistogram;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A group's place in [`Origins`](super::Origins): what a checked request carries.
pub type GroupId = usize;

/// Why an attempt on a server failed, as its health counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The connection could not be made or broke before the response head.
    Connect,
    /// No response head in time.
    Timeout,
    /// A response head with a 5xx status.
    Status5xx,
    /// Anything else (a response head the proxy refused).
    Other,
}

impl Failure {
    /// Every kind, for metrics.
    pub const ALL: [Failure; 4] = [
        Failure::Connect,
        Failure::Timeout,
        Failure::Status5xx,
        Failure::Other,
    ];

    /// The metric label and the JSON key.
    pub const fn as_str(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Timeout => "timeout",
            Failure::Status5xx => "5xx",
            Failure::Other => "other",
        }
    }
}

/// One server's health and counts, shared by every worker (and kept across reloads).
#[derive(Default)]
pub struct ServerHealth {
    /// The active probes' word: down after `fall` failed probes, up after `rise` good ones.
    probe_down: AtomicBool,
    /// Ejected until this time (nanoseconds on the proxy's clock; 0: never ejected).
    ejected_until: AtomicU64,
    /// How many ejections in a row (the next one lasts `ejection` times 2^this).
    streak: AtomicU32,
    /// Failed attempts in a row.
    consecutive: AtomicU32,
    /// Attempts under way now.
    outstanding: AtomicU64,
    /// Attempts made.
    requests: AtomicU64,
    /// Failed attempts by kind ([`Failure::ALL`]'s order).
    failures: [AtomicU64; 4],
    /// Ejections made.
    ejections: AtomicU64,
    /// Times the probes took it down or brought it up.
    probe_changes: AtomicU64,
    /// Time to the response head of its attempts.
    latency: LatencyHistogram,
    /// The probes' counts of successes or failures in a row (the task's own state).
    probe_streak: Mutex<(bool, u32)>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ServerHealth {
    /// Whether passive health holds it out at `now`.
    pub fn ejected(&self, now: Duration) -> bool {
        self.ejected_until.load(Relaxed) > nanos(now)
    }

    /// Whether the probes say it is down.
    pub fn probe_down(&self) -> bool {
        self.probe_down.load(Relaxed)
    }

    /// Whether requests may go to it at `now`.
    pub fn available(&self, now: Duration) -> bool {
        !self.probe_down() && !self.ejected(now)
    }

    /// Attempts under way now.
    pub fn outstanding(&self) -> u64 {
        self.outstanding.load(Relaxed)
    }

    /// Attempts made so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Relaxed)
    }

    /// Failed attempts of kind `f` so far.
    pub fn failures(&self, f: Failure) -> u64 {
        self.failures[f as usize].load(Relaxed)
    }

    /// Ejections so far.
    pub fn ejections(&self) -> u64 {
        self.ejections.load(Relaxed)
    }

    /// Probe state changes so far.
    pub fn probe_changes(&self) -> u64 {
        self.probe_changes.load(Relaxed)
    }

    /// The latency of its attempts.
    pub fn latency(&self) -> &LatencyHistogram {
        &self.latency
    }

    /// One probe's result: `Some(up)` when it changes the probes' word (`rise` good probes in a
    /// row bring a down server up, `fall` failed ones take an up server down).
    pub fn probed(&self, ok: bool, rise: u32, fall: u32) -> Option<bool> {
        let mut streak = self.probe_streak.lock().unwrap_or_else(|p| p.into_inner());
        if streak.0 == ok {
            streak.1 = streak.1.saturating_add(1);
        } else {
            *streak = (ok, 1);
        }
        let down = self.probe_down();
        let change = match (down, ok) {
            (true, true) if streak.1 >= rise => Some(true),
            (false, false) if streak.1 >= fall => Some(false),
            _ => None,
        };
        if let Some(up) = change {
            self.probe_down.store(!up, Relaxed);
            self.probe_changes.fetch_add(1, Relaxed);
        }
        change
    }
}

/// One server of a group.
pub struct Server {
    /// Where it is.
    pub url: OriginUrl,
    /// Its weight.
    pub weight: u32,
    /// Used only when no primary is available.
    pub backup: bool,
    /// Its health.
    pub health: Arc<ServerHealth>,
}

/// A consistent-hash ring over some of a group's servers: 160 points per unit of weight.
#[derive(Default)]
struct Ring {
    /// (position, server index), sorted.
    points: Vec<(u64, u16)>,
}

/// Points a server owns per unit of weight (ketama's and nginx's figure).
const POINTS_PER_WEIGHT: u32 = 160;

impl Ring {
    fn over(servers: &[Server], members: &[usize]) -> Ring {
        let mut points = Vec::new();
        for &i in members {
            let s = &servers[i];
            for p in 0..s.weight * POINTS_PER_WEIGHT {
                let name = format!("{}-{p}", s.url);
                points.push((object_id(name.as_bytes()), i as u16));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// The servers in ring order from `key`'s place (each as often as it has points).
    fn from(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        let at = mix(key);
        let start = self.points.partition_point(|&(p, _)| p < at);
        let n = self.points.len();
        (0..n).map(move |j| self.points[(start + j) % n].1 as usize)
    }
}

/// A key's place on a ring: its bits mixed (MurmurHash3's 64-bit finaliser, a bijection).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Smooth weighted round-robin (nginx's): the order in which `members` take their turns over
/// one cycle of the sum of their weights.
fn schedule(servers: &[Server], members: &[usize]) -> Box<[u16]> {
    let total: i64 = members.iter().map(|&i| i64::from(servers[i].weight)).sum();
    let mut current = vec![0i64; members.len()];
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for _ in 0..total {
        let mut best = 0;
        for (j, &i) in members.iter().enumerate() {
            current[j] += i64::from(servers[i].weight);
            if current[j] > current[best] {
                best = j;
            }
        }
        current[best] -= total;
        out.push(members[best] as u16);
    }
    out.into_boxed_slice()
}

/// A group of servers, as a request sees it.
pub struct Group {
    /// Its name (a plain URL's group is named by the URL).
    pub name: String,
    /// Its servers, as configured.
    pub servers: Box<[Server]>,
    /// How a request picks one.
    pub balance: Balance,
    retry_on: Vec<RetryOn>,
    /// Servers tried for one request, the first included.
    pub tries: u32,
    /// The time all tries of one request may take.
    pub try_timeout: Duration,
    /// The most servers passive health holds out at once.
    max_ejected: usize,
    outlier: OutlierConfig,
    /// Active probes.
    pub health: Option<HealthConfig>,
    /// The group behind a group of parent caches.
    pub fallback: Option<GroupId>,
    /// Its name, for the admin view.
    fallback_name: Option<String>,
    cursor: AtomicU64,
    /// Primaries and backups: their round-robin turns and their rings.
    turns: [Box<[u16]>; 2],
    rings: [Ring; 2],
    tiers: [Vec<usize>; 2],
}

/// The servers of a group a request has tried (a bit each).
pub type Tried = u64;

impl Group {
    /// The group `name` of `config`, its servers' health taken from `previous` (by URL) when
    /// they were there before a reload; `fallback` resolved by the caller.
    pub fn new(
        name: &str,
        config: &GroupConfig,
        previous: Option<&Group>,
        fallback: Option<GroupId>,
    ) -> Group {
        let servers: Box<[Server]> = config
            .servers
            .iter()
            .map(|s| Server {
                url: s.url.clone(),
                weight: s.weight,
                backup: s.backup,
                health: previous
                    .and_then(|g| g.servers.iter().find(|o| o.url == s.url))
                    .map_or_else(Arc::default, |o| Arc::clone(&o.health)),
            })
            .collect();
        let tier = |backup: bool| -> Vec<usize> {
            (0..servers.len())
                .filter(|&i| servers[i].backup == backup)
                .collect()
        };
        let tiers = [tier(false), tier(true)];
        let max_ejected = servers.len() * config.max_ejected_percent as usize / 100;
        Group {
            name: name.to_string(),
            balance: config.balance,
            retry_on: config.retry_on.clone(),
            tries: config.tries,
            try_timeout: config.try_timeout,
            max_ejected,
            outlier: config.outlier.clone(),
            health: config.health.clone(),
            fallback,
            fallback_name: config.fallback.clone(),
            cursor: AtomicU64::new(0),
            turns: [schedule(&servers, &tiers[0]), schedule(&servers, &tiers[1])],
            rings: [
                Ring::over(&servers, &tiers[0]),
                Ring::over(&servers, &tiers[1]),
            ],
            tiers,
            servers,
        }
    }

    /// The server for the next attempt of a request whose cache key's object id is `key`, among
    /// those available at `now` and not in `tried`: a primary if any is left, else a backup.
    /// `None` when no server is left.
    pub fn pick(&self, key: u64, tried: Tried, now: Duration) -> Option<usize> {
        let usable = |i: usize| tried & (1 << i) == 0 && self.servers[i].health.available(now);
        // A group of one (every plain URL): no turn to take, no cursor shared by the workers.
        if self.servers.len() == 1 {
            return usable(0).then_some(0);
        }
        for t in 0..2 {
            if !self.tiers[t].iter().any(|&i| usable(i)) {
                continue;
            }
            return match self.balance {
                // A turn of a server that cannot be used is spent, not passed to the next
                // server in line: the servers left share the requests by their weights.
                Balance::RoundRobin => {
                    let turns = &self.turns[t];
                    (0..turns.len())
                        .map(|_| {
                            let c = self.cursor.fetch_add(1, Relaxed) as usize;
                            turns[c % turns.len()] as usize
                        })
                        .find(|&i| usable(i))
                }
                Balance::LeastOutstanding => {
                    let members = &self.tiers[t];
                    let start = self.cursor.fetch_add(1, Relaxed) as usize;
                    (0..members.len())
                        .map(|j| members[(start + j) % members.len()])
                        .filter(|&i| usable(i))
                        .min_by_key(|&i| {
                            let s = &self.servers[i];
                            // Outstanding per unit of weight, in thousandths.
                            s.health.outstanding().saturating_mul(1000) / u64::from(s.weight)
                        })
                }
                Balance::Hash => self.rings[t].from(key).find(|&i| usable(i)),
            };
        }
        None
    }

    /// Whether an attempt that failed as `f` (or answered `status`) may be tried again.
    pub fn retries_on(&self, failure: Option<Failure>, status: Option<u16>) -> bool {
        self.retry_on.iter().any(|r| match (r, failure, status) {
            (RetryOn::Connect, Some(Failure::Connect), _) => true,
            (RetryOn::Timeout, Some(Failure::Timeout), _) => true,
            (RetryOn::Status(s), _, Some(got)) => *s == got,
            _ => false,
        })
    }

    /// An attempt on server `i` begins.
    pub fn begin(&self, i: usize) {
        let h = &self.servers[i].health;
        h.outstanding.fetch_add(1, Relaxed);
        h.requests.fetch_add(1, Relaxed);
    }

    /// An attempt on server `i` ended at `now` after `took`: `None` for success, else how it
    /// failed. Passive health ejects the server after enough failures in a row.
    pub fn finish(&self, i: usize, failed: Option<Failure>, took: Duration, now: Duration) {
        let h = &self.servers[i].health;
        h.outstanding.fetch_sub(1, Relaxed);
        h.latency.observe(took);
        let Some(f) = failed else {
            h.consecutive.store(0, Relaxed);
            return;
        };
        h.failures[f as usize].fetch_add(1, Relaxed);
        let n = h.consecutive.fetch_add(1, Relaxed) + 1;
        if self.outlier.consecutive > 0 && n >= self.outlier.consecutive {
            self.eject(i, now);
        }
    }

    /// Ejects server `i` at `now`, unless it is ejected already or the group has as many out as
    /// it may: for `ejection` times 2^(ejections in a row), at most `max_ejection`; a server
    /// back for longer than `max_ejection` starts again from `ejection`.
    fn eject(&self, i: usize, now: Duration) {
        let h = &self.servers[i].health;
        if h.ejected(now) {
            return;
        }
        let out = self
            .servers
            .iter()
            .filter(|s| s.health.ejected(now))
            .count();
        if out >= self.max_ejected {
            return;
        }
        let last_until = h.ejected_until.load(Relaxed);
        let back_since = nanos(now).saturating_sub(last_until);
        let streak = if last_until == 0 || back_since > nanos(self.outlier.max_ejection) {
            0
        } else {
            h.streak.load(Relaxed).saturating_add(1)
        };
        h.streak.store(streak, Relaxed);
        let length = self
            .outlier
            .ejection
            .saturating_mul(1u32.checked_shl(streak.min(20)).unwrap_or(u32::MAX))
            .min(self.outlier.max_ejection);
        h.ejected_until.store(nanos(now + length), Relaxed);
        h.consecutive.store(0, Relaxed);
        h.ejections.fetch_add(1, Relaxed);
        tracing::warn!(group = %self.name, server = %self.servers[i].url, for_secs = length.as_secs_f64(), "origin server ejected after failing requests in a row");
    }

    /// Whether any server is available at `now`.
    pub fn any_available(&self, now: Duration) -> bool {
        self.servers.iter().any(|s| s.health.available(now))
    }
}

impl Group {
    /// The group and its servers as `/origins` shows them.
    pub fn view(&self, now: Duration) -> serde_json::Value {
        let servers: Vec<serde_json::Value> = self
            .servers
            .iter()
            .map(|s| {
                let h = &s.health;
                let errors: serde_json::Map<String, serde_json::Value> = Failure::ALL
                    .iter()
                    .map(|f| (f.as_str().to_string(), h.failures(*f).into()))
                    .collect();
                let until = h.ejected_until.load(Relaxed);
                serde_json::json!({
                    "url": s.url.to_string(),
                    "weight": s.weight,
                    "backup": s.backup,
                    "up": h.available(now),
                    "probe_up": !h.probe_down(),
                    "ejected_for_secs": Duration::from_nanos(until.saturating_sub(nanos(now))).as_secs_f64(),
                    "outstanding": h.outstanding(),
                    "requests": h.requests(),
                    "errors": Failure::ALL.iter().map(|f| h.failures(*f)).sum::<u64>(),
                    "errors_by_kind": errors,
                    "ejections": h.ejections(),
                    "probe_changes": h.probe_changes(),
                })
            })
            .collect();
        serde_json::json!({
            "name": self.name,
            "balance": self.balance.as_str(),
            "fallback": self.fallback_name,
            "tries": self.tries,
            "probes": self.health.as_ref().map(|h| h.path.clone()),
            "servers": servers,
        })
    }
}

/// Every server's families: up, outstanding, requests, failures by kind, ejections, probe state
/// changes and latency, labelled by group and server.
pub fn collect(groups: &[Arc<Group>], out: &mut crate::metrics::Families, now: Duration) {
    use crate::metrics::labels;
    let each = || {
        groups
            .iter()
            .flat_map(|g| g.servers.iter().map(move |s| (g, s)))
    };
    let l = |g: &Group, s: &Server| {
        let url = s.url.to_string();
        labels([("group", g.name.as_str()), ("server", url.as_str())])
    };
    out.gauges(
        "origin_server_up",
        "Whether an origin server takes requests now (probes up, not ejected): 1 or 0",
        each().map(|(g, s)| (l(g, s), u64::from(s.health.available(now)).into())),
    );
    out.gauges(
        "origin_server_outstanding",
        "Requests under way now on an origin server",
        each().map(|(g, s)| (l(g, s), s.health.outstanding().into())),
    );
    out.counters(
        "origin_server_requests",
        "Attempts made on an origin server",
        each().map(|(g, s)| (l(g, s), s.health.requests())),
    );
    out.counters(
        "origin_server_errors",
        "Failed attempts on an origin server by kind (connect, timeout, 5xx, other)",
        each().flat_map(|(g, s)| {
            Failure::ALL.iter().map(move |f| {
                let mut labels = l(g, s);
                labels.push(("kind", f.as_str().to_string()));
                (labels, s.health.failures(*f))
            })
        }),
    );
    out.counters(
        "origin_server_ejections",
        "Times passive health ejected an origin server",
        each().map(|(g, s)| (l(g, s), s.health.ejections())),
    );
    out.counters(
        "origin_server_probe_changes",
        "Times active probes took an origin server down or brought it up",
        each().map(|(g, s)| (l(g, s), s.health.probe_changes())),
    );
    out.histograms(
        "origin_server_latency_seconds",
        "Time to the response head of attempts on an origin server",
        each().map(|(g, s)| (l(g, s), s.health.latency().snapshot())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    fn group(toml: &str) -> Group {
        let c: GroupConfig = toml::from_str(toml).unwrap();
        c.check("g").unwrap();
        Group::new("g", &c, None, None)
    }

    const T0: Duration = Duration::from_secs(1000);

    fn split(g: &Group, n: usize) -> Vec<usize> {
        let mut count = vec![0; g.servers.len()];
        for k in 0..n {
            let i = g.pick(k as u64, 0, T0).unwrap();
            count[i] += 1;
        }
        count
    }

    #[test]
    fn round_robin_follows_the_weights_smoothly() {
        let g =
            group(r#"servers = [{ url = "http://a:1", weight = 5 }, "http://b:1", "http://c:1"]"#);
        assert_eq!(split(&g, 700), [500, 100, 100]);
        // Smooth: never five of a in a row.
        let seq: Vec<usize> = (0..7).map(|_| g.pick(0, 0, T0).unwrap()).collect();
        assert!(seq.windows(5).all(|w| w.iter().any(|&i| i != 0)), "{seq:?}");
    }

    #[test]
    fn backups_only_when_no_primary_is_left() {
        let g = group(
            r#"servers = ["http://a:1", "http://b:1", { url = "http://c:1", backup = true }]"#,
        );
        assert_eq!(split(&g, 100)[2], 0);
        // Tried both primaries: the backup.
        assert_eq!(g.pick(0, 0b011, T0), Some(2));
        assert_eq!(g.pick(0, 0b111, T0), None);
        // Both primaries down: the backup takes everything.
        for i in 0..2 {
            g.servers[i].health.probe_down.store(true, Relaxed);
        }
        assert_eq!(split(&g, 50), [0, 0, 50]);
    }

    #[test]
    fn least_outstanding_prefers_the_idlest_for_its_weight() {
        let g = group(
            r#"servers = ["http://a:1", { url = "http://b:1", weight = 2 }]
               balance = "least-outstanding""#,
        );
        g.begin(0);
        assert_eq!(g.pick(0, 0, T0), Some(1));
        g.begin(1);
        // 1 outstanding for weight 2 is less than 1 for weight 1.
        assert_eq!(g.pick(0, 0, T0), Some(1));
        g.begin(1);
        g.begin(1);
        assert_eq!(g.pick(0, 0, T0), Some(0));
    }

    #[test]
    fn hash_keeps_keys_and_moves_only_a_removed_servers_share() {
        let servers = |n: usize| -> String {
            let list: Vec<String> = (0..n).map(|i| format!("\"http://p{i}:1\"")).collect();
            format!("servers = [{}]\nbalance = \"hash\"", list.join(", "))
        };
        let four = group(&servers(4));
        let five = group(&servers(5));
        let keys: Vec<u64> = (0..20_000u64)
            .map(|k| object_id(&k.to_le_bytes()))
            .collect();
        let at = |g: &Group, k: u64| g.servers[g.pick(k, 0, T0).unwrap()].url.to_string();
        assert!(keys.iter().all(|&k| at(&four, k) == at(&four, k)));
        // Adding a fifth server moves about a fifth of the keys, all of them to it.
        let moved: Vec<u64> = keys
            .iter()
            .copied()
            .filter(|&k| at(&four, k) != at(&five, k))
            .collect();
        let share = moved.len() as f64 / keys.len() as f64;
        assert!((0.15..0.25).contains(&share), "{share}");
        assert!(moved.iter().all(|&k| at(&five, k) == "http://p4:1"));
        // Each of four gets about a quarter.
        let count = split(&four, 20_000);
        assert!(
            count.iter().all(|&c| (4_000..6_000).contains(&c)),
            "{count:?}"
        );
        // A server ejected: its keys go to the next on the ring, the others stay.
        let k = keys[0];
        let owner = four.pick(k, 0, T0).unwrap();
        let next = four.pick(k, 1 << owner, T0).unwrap();
        assert_ne!(owner, next);
    }

    #[test]
    fn ejection_after_failures_in_a_row_grows_and_is_bounded_by_the_share() {
        let g = group(
            r#"servers = ["http://a:1", "http://b:1", "http://c:1", "http://d:1"]
               [outlier]
               consecutive = 3
               ejection = "10s"
               max_ejection = "40s""#,
        );
        let fail = |i: usize, now: Duration| {
            g.begin(i);
            g.finish(i, Some(Failure::Connect), Duration::from_millis(1), now);
        };
        // Two failures and a success: not in a row.
        fail(0, T0);
        fail(0, T0);
        g.begin(0);
        g.finish(0, None, Duration::ZERO, T0);
        fail(0, T0);
        assert!(g.servers[0].health.available(T0));
        fail(0, T0);
        fail(0, T0);
        assert!(!g.servers[0].health.available(T0));
        assert!(!g.servers[0].health.available(T0 + Duration::from_secs(9)));
        let back = T0 + Duration::from_secs(10);
        assert!(g.servers[0].health.available(back));
        // Ejected again soon after: twice as long, then four times, capped at 40 s.
        for (n, length) in [(2u64, 20u64), (3, 40), (4, 40)] {
            let at = g.servers[0].health.ejected_until.load(Relaxed);
            let now = Duration::from_nanos(at);
            for _ in 0..3 {
                fail(0, now);
            }
            assert_eq!(g.servers[0].health.ejections(), n);
            assert!(g.servers[0]
                .health
                .ejected(now + Duration::from_secs(length - 1)));
            assert!(!g.servers[0]
                .health
                .ejected(now + Duration::from_secs(length)));
        }
        // A second server ejected: 50 % of four is two; a third is not ejected.
        let now = Duration::from_nanos(g.servers[0].health.ejected_until.load(Relaxed))
            - Duration::from_secs(1);
        for _ in 0..3 {
            fail(1, now);
            fail(2, now);
        }
        let out: Vec<bool> = g.servers.iter().map(|s| s.health.ejected(now)).collect();
        assert_eq!(out, [true, true, false, false]);
        assert_eq!(g.servers[2].health.failures(Failure::Connect), 3);
    }

    #[test]
    fn probes_take_down_after_fall_and_bring_up_after_rise() {
        let h = ServerHealth::default();
        assert_eq!(h.probed(false, 2, 3), None);
        assert_eq!(h.probed(false, 2, 3), None);
        assert_eq!(h.probed(false, 2, 3), Some(false));
        assert!(h.probe_down());
        assert_eq!(h.probed(true, 2, 3), None);
        assert_eq!(h.probed(false, 2, 3), None);
        assert_eq!(h.probed(true, 2, 3), None);
        assert_eq!(h.probed(true, 2, 3), Some(true));
        assert_eq!(h.probe_changes(), 2);
    }

    #[test]
    fn a_reload_keeps_the_health_of_servers_that_stay() {
        let c: GroupConfig = toml::from_str(r#"servers = ["http://a:1", "http://b:1"]"#).unwrap();
        let old = Group::new("g", &c, None, None);
        old.servers[0].health.probe_down.store(true, Relaxed);
        let mut c2 = c.clone();
        c2.servers.push(ServerConfig {
            url: "http://c:1".parse().unwrap(),
            weight: 1,
            backup: false,
        });
        let new = Group::new("g", &c2, Some(&old), None);
        assert!(Arc::ptr_eq(&old.servers[0].health, &new.servers[0].health));
        assert!(new.servers[0].health.probe_down());
        assert!(!new.servers[2].health.probe_down());
    }

    #[test]
    fn retries_follow_retry_on() {
        let g = group(
            r#"servers = ["http://a:1"]
                         retry_on = ["timeout", "503"]"#,
        );
        assert!(g.retries_on(Some(Failure::Timeout), None));
        assert!(!g.retries_on(Some(Failure::Connect), None));
        assert!(g.retries_on(None, Some(503)));
        assert!(!g.retries_on(None, Some(502)));
    }
}
