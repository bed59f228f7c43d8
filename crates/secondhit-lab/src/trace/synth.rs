//! `secondhit gen-trace`: seeded synthetic traces. Zipf(alpha) popularity over a fixed set of
//! objects, plus a chosen share of requests to fresh objects requested only once, sizes from a
//! chosen distribution (fixed per object), and timestamps at a steady rate. The same spec and
//! seed give the same bytes on every run and machine.

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
        Ok(())
    }

    /// The requests as `(time in s, id, size)`, in order. Lazily generated: constant memory
    /// apart from one size per Zipf object.
    pub fn requests(&self) -> Result<impl Iterator<Item = (u32, u64, u32)>, String> {
        self.validate()?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.seed);
        let sizes = self.sizes;
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
            v.round().clamp(1.0, u32::MAX as f64) as u32
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
