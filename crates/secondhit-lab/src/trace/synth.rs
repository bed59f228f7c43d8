//! `secondhit gen-trace`: seeded synthetic traces. Zipf(alpha) popularity over a fixed set of
//! objects, plus a chosen share of requests to fresh objects requested only once, sizes from a
//! chosen distribution (fixed per object), and timestamps at a steady rate. The same spec and
//! seed give the same bytes on every run and machine.
//!
//! A media trace ([`Spec::write_media`], `gen-trace --media`) is the same popularity over large
//! objects, each request a byte range as a video player asks: a length drawn uniformly from a
//! span (1 to 8 MiB by default) starting nearer the beginning than the end (the start is the
//! object's length times `u^skew` for `u` uniform in [0, 1): viewers start at the beginning and
//! fewer watch to the end). Written as `time,key,size,range` (`*.ranges.csv`).

use super::oracle;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, LogNormal, Pareto, Zipf};
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::str::FromStr;

/// Object size distribution, in bytes (clamped to 1..=u32::MAX).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sizes {
    /// Every object has this size.
    Fixed(u64),
    /// Log-normal with this median and sigma (of the underlying normal).
    LogNormal {
        /// Median size in bytes.
        median: f64,
        /// Shape.
        sigma: f64,
    },
    /// Pareto with this minimum (scale) and tail index (shape).
    Pareto {
        /// Smallest size in bytes.
        scale: f64,
        /// Tail index; smaller is heavier.
        shape: f64,
    },
}

impl FromStr for Sizes {
    type Err = String;
    /// `fixed:N`, `lognormal:MEDIAN:SIGMA` or `pareto:SCALE:SHAPE`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |i: usize, what: &str| -> Result<f64, String> {
            parts
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| format!("sizes {s:?}: {what} must be a positive number"))
        };
        match (parts[0], parts.len()) {
            ("fixed", 2) => Ok(Sizes::Fixed(num(1, "the size")? as u64)),
            ("lognormal", 3) => Ok(Sizes::LogNormal {
                median: num(1, "the median")?,
                sigma: num(2, "sigma")?,
            }),
            ("pareto", 3) => Ok(Sizes::Pareto {
                scale: num(1, "the scale")?,
                shape: num(2, "the shape")?,
            }),
            _ => Err(format!(
                "sizes {s:?}: expected fixed:N, lognormal:MEDIAN:SIGMA or pareto:SCALE:SHAPE"
            )),
        }
    }
}

impl fmt::Display for Sizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sizes::Fixed(n) => write!(f, "fixed:{n}"),
            Sizes::LogNormal { median, sigma } => write!(f, "lognormal:{median}:{sigma}"),
            Sizes::Pareto { scale, shape } => write!(f, "pareto:{scale}:{shape}"),
        }
    }
}

/// The byte ranges of a media trace's requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranges {
    /// Shortest range, in bytes (at least 1).
    pub min: u64,
    /// Longest range, in bytes.
    pub max: u64,
    /// How strongly starts gather at the beginning: 1 is uniform over the object, larger
    /// gathers them nearer its start.
    pub skew: f64,
}

impl Default for Ranges {
    /// 1 to 8 MiB, skew 3 (half the requests start in the first eighth of the object).
    fn default() -> Self {
        Ranges {
            min: 1 << 20,
            max: 8 << 20,
            skew: 3.0,
        }
    }
}

impl Ranges {
    /// Checks the ranges, naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.min == 0 || self.max < self.min {
            return Err(format!(
                "range lengths must be at least 1 byte with min <= max, got {} to {}",
                self.min, self.max
            ));
        }
        if !(self.skew.is_finite() && self.skew >= 1.0) {
            return Err(format!(
                "range skew must be a number >= 1, got {}",
                self.skew
            ));
        }
        Ok(())
    }
}

/// One request of a media trace: `(time in s, id, size, first byte, last byte)`.
pub type MediaRequest = (u32, u64, u32, u64, u64);

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Objects with Zipf popularity.
    pub objects: u64,
    /// Requests in all.
    pub requests: u64,
    /// Zipf exponent (0 is uniform; CDN traces are often 0.6 to 1.0).
    pub alpha: f64,
    /// Share of requests, in [0, 1), that go to fresh objects requested only once.
    pub one_time_share: f64,
    /// Object sizes.
    pub sizes: Sizes,
    /// Requests per second of trace time.
    pub rate: f64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Sizes drawn below this are raised to it (bytes).
    pub min_size: u32,
    /// Sizes drawn above this are lowered to it (bytes).
    pub max_size: u32,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            objects: 100_000,
            requests: 1_000_000,
            alpha: 0.8,
            one_time_share: 0.3,
            sizes: Sizes::LogNormal {
                median: 8192.0,
                sigma: 1.5,
            },
            rate: 1000.0,
            seed: 1,
            min_size: 1,
            max_size: u32::MAX,
        }
    }
}

/// Output layout of a synthetic trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// `time id size` text lines.
    Webcachesim,
    /// libCacheSim's 24-byte binary records, with next-access times (holds the whole trace
    /// in memory, 16 bytes a request, to compute them).
    OracleGeneral,
}

impl Spec {
    /// Checks the spec, naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.objects == 0 {
            return Err("objects must be at least 1".into());
        }
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return Err(format!("alpha must be a number >= 0, got {}", self.alpha));
        }
        if !(0.0..1.0).contains(&self.one_time_share) {
            return Err(format!(
                "one-time share must be in [0, 1), got {}",
                self.one_time_share
            ));
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!("rate must be a positive number, got {}", self.rate));
        }
        if self.min_size == 0 || self.max_size < self.min_size {
            return Err(format!(
                "sizes must be clamped to at least 1 byte with min <= max, got {} to {}",
                self.min_size, self.max_size
            ));
        }
        Ok(())
    }

    /// The requests as `(time in s, id, size)`, in order. Lazily generated: constant memory
    /// apart from one size per Zipf object.
    pub fn requests(&self) -> Result<impl Iterator<Item = (u32, u64, u32)>, String> {
        self.validate()?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.seed);
        let sizes = self.sizes;
        let (lo, hi) = (f64::from(self.min_size), f64::from(self.max_size));
        let sample_size = move |rng: &mut Xoshiro256PlusPlus| -> u32 {
            let v = match sizes {
                Sizes::Fixed(n) => n as f64,
                Sizes::LogNormal { median, sigma } => LogNormal::new(median.ln(), sigma)
                    .map(|d| d.sample(rng))
                    .unwrap_or(median),
                Sizes::Pareto { scale, shape } => Pareto::new(scale, shape)
                    .map(|d| d.sample(rng))
                    .unwrap_or(scale),
            };
            v.round().clamp(lo, hi) as u32
        };
        let object_sizes: Vec<u32> = (0..self.objects).map(|_| sample_size(&mut rng)).collect();
        let zipf = Zipf::new(self.objects as f64, self.alpha).map_err(|e| e.to_string())?;
        let (one_time, rate, objects) = (self.one_time_share, self.rate, self.objects);
        let mut fresh = objects;
        Ok((0..self.requests).map(move |i| {
            let time = (i as f64 / rate).floor().min(u32::MAX as f64) as u32;
            if one_time > 0.0 && rng.random::<f64>() < one_time {
                let id = fresh;
                fresh += 1;
                (time, id, sample_size(&mut rng))
            } else {
                let rank = (zipf.sample(&mut rng) as u64).clamp(1, objects);
                (time, rank - 1, object_sizes[(rank - 1) as usize])
            }
        }))
    }

    /// The requests of a media trace, in order: each of [`Spec::requests`] with a byte range
    /// drawn from `ranges` (its own random stream, so the objects and times are the plain
    /// trace's).
    pub fn media_requests(
        &self,
        ranges: Ranges,
    ) -> Result<impl Iterator<Item = MediaRequest>, String> {
        ranges.validate()?;
        let requests = self.requests()?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.seed ^ 0x006d_6564_6961);
        Ok(requests.map(move |(t, id, size)| {
            let size64 = u64::from(size);
            let len = rng.random_range(ranges.min..=ranges.max);
            let u: f64 = rng.random();
            let first = ((size64 as f64) * u.powf(ranges.skew)).floor() as u64;
            let first = first.min(size64 - 1);
            let last = first.saturating_add(len - 1).min(size64 - 1);
            (t, id, size, first, last)
        }))
    }

    /// Writes a media trace to `out` as `time,key,size,range` lines (`*.ranges.csv`); returns
    /// the number of requests written.
    pub fn write_media(&self, ranges: Ranges, out: &mut dyn Write) -> io::Result<u64> {
        let requests = self
            .media_requests(ranges)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut n = 0;
        for (t, id, size, first, last) in requests {
            writeln!(out, "{t},{id},{size},{first}-{last}")?;
            n += 1;
        }
        out.flush()?;
        Ok(n)
    }

    /// Writes the trace to `out`; returns the number of requests written.
    pub fn write(&self, format: OutputFormat, out: &mut dyn Write) -> io::Result<u64> {
        let requests = self
            .requests()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut n = 0;
        match format {
            OutputFormat::Webcachesim => {
                for (t, id, size) in requests {
                    writeln!(out, "{t} {id} {size}")?;
                    n += 1;
                }
            }
            OutputFormat::OracleGeneral => {
                let all: Vec<(u32, u64, u32)> = requests.collect();
                let mut next = vec![-1i64; all.len()];
                let mut seen: HashMap<u64, usize> = HashMap::new();
                for (i, &(_, id, _)) in all.iter().enumerate().rev() {
                    if let Some(j) = seen.insert(id, i) {
                        next[i] = j as i64 + 1; // libCacheSim's vtime counts from 1
                    }
                }
                for (&(t, id, size), &nx) in all.iter().zip(&next) {
                    out.write_all(&oracle::encode(t, id, size, nx))?;
                    n += 1;
                }
            }
        }
        out.flush()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let spec = Spec {
            requests: 5_000,
            objects: 1_000,
            ..Spec::default()
        };
        let a: Vec<_> = spec.requests().unwrap().collect();
        let b: Vec<_> = spec.requests().unwrap().collect();
        assert_eq!(a, b);
        let c: Vec<_> = Spec {
            seed: 2,
            ..spec.clone()
        }
        .requests()
        .unwrap()
        .collect();
        assert_ne!(a, c);
    }

    #[test]
    fn shares_sizes_and_times_follow_the_spec() {
        let spec = Spec {
            requests: 20_000,
            objects: 500,
            one_time_share: 0.25,
            sizes: Sizes::Fixed(100),
            rate: 100.0,
            ..Spec::default()
        };
        let all: Vec<_> = spec.requests().unwrap().collect();
        let fresh = all.iter().filter(|r| r.1 >= 500).count();
        assert!((4_500..5_500).contains(&fresh), "{fresh}");
        assert!(all.iter().all(|r| r.2 == 100));
        assert_eq!(all.last().unwrap().0, 199);
        // Zipf: object 0 is the most popular.
        let zero = all.iter().filter(|r| r.1 == 0).count();
        let hundred = all.iter().filter(|r| r.1 == 100).count();
        assert!(zero > 10 * hundred.max(1), "{zero} vs {hundred}");
    }

    #[test]
    fn oracle_output_has_next_access_times() {
        let spec = Spec {
            requests: 200,
            objects: 10,
            one_time_share: 0.0,
            ..Spec::default()
        };
        let mut buf = Vec::new();
        assert_eq!(
            spec.write(OutputFormat::OracleGeneral, &mut buf).unwrap(),
            200
        );
        assert_eq!(buf.len(), 200 * 24);
        let rec = |i: usize| &buf[i * 24..(i + 1) * 24];
        let id = |i: usize| u64::from_le_bytes(rec(i)[4..12].try_into().unwrap());
        let next = |i: usize| i64::from_le_bytes(rec(i)[16..24].try_into().unwrap());
        for i in 0..200 {
            let n = next(i);
            if n > 0 {
                let j = (n - 1) as usize;
                assert_eq!(id(j), id(i));
                assert!((i + 1..j).all(|k| id(k) != id(i)));
            } else {
                assert!((i + 1..200).all(|k| id(k) != id(i)));
            }
        }
    }

    #[test]
    fn media_ranges_fall_inside_their_objects_and_gather_at_the_start() {
        let spec = Spec {
            requests: 20_000,
            objects: 500,
            sizes: Sizes::LogNormal {
                median: 200e6,
                sigma: 1.0,
            },
            min_size: 20 << 20,
            max_size: 1 << 31,
            ..Spec::default()
        };
        let all: Vec<_> = spec.media_requests(Ranges::default()).unwrap().collect();
        let plain: Vec<_> = spec.requests().unwrap().collect();
        let mut early = 0;
        for (r, p) in all.iter().zip(&plain) {
            let (_, id, size, first, last) = *r;
            assert_eq!(
                (r.0, id, size),
                *p,
                "the objects and times are the plain trace's"
            );
            assert!((20 << 20..=1 << 31).contains(&size));
            assert!(first <= last && last < u64::from(size));
            assert!(last - first < 8 << 20);
            early += usize::from(first < u64::from(size) / 8);
        }
        // u^3 < 1/8 when u < 1/2: about half start in the first eighth.
        assert!((9_000..11_000).contains(&early), "{early}");
        let mut text = Vec::new();
        spec.write_media(Ranges::default(), &mut text).unwrap();
        let first_line = String::from_utf8(text)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string();
        let (a, b) = (all[0].3, all[0].4);
        assert!(first_line.ends_with(&format!(",{a}-{b}")), "{first_line}");
        assert!(Ranges {
            min: 5,
            max: 4,
            skew: 3.0
        }
        .validate()
        .is_err());
    }

    #[test]
    fn bad_specs_name_the_field() {
        assert!("lognormal:0:1"
            .parse::<Sizes>()
            .unwrap_err()
            .contains("median"));
        assert!("gamma:1:2"
            .parse::<Sizes>()
            .unwrap_err()
            .contains("expected fixed:N"));
        assert_eq!(
            "pareto:1024:1.2".parse::<Sizes>().unwrap().to_string(),
            "pareto:1024:1.2"
        );
        let bad = Spec {
            one_time_share: 1.0,
            ..Spec::default()
        };
        assert!(bad.validate().unwrap_err().contains("one-time share"));
    }
}
