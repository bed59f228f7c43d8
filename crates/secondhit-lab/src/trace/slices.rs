//! `simulate --slice-size`: a trace's requests as the slices `serve --slice-size` looks up, so
//! that the simulator predicts the sliced cache. An object of one slice or less is one request
//! for the whole object, its range ignored (the cache stores it whole); a larger one becomes one
//! request per aligned slice its range covers (every slice without a range), each of the
//! slice's own length, keyed apart from the others. Slice 0 keeps the object's key and id, as
//! the proxy asks its policy about slice 0 by the object's id
//! ([`slice_id`](crate::hash::slice_id)). A range that starts past the object's end asks for
//! nothing and is dropped.

use super::{Request, TraceError};
use crate::hash::{slice_id, KeyHash};

/// The requests of `inner` as slices of `slice_size` bytes (`slice_size` > 0).
pub struct Slices<I> {
    inner: I,
    slice_size: u64,
    /// The request being cut, and the next and last slice of it to hand out.
    pending: Option<(Request, u64, u64)>,
}

impl<I> Slices<I> {
    /// Cuts the requests of `inner` into slices of `slice_size` bytes (at least 1).
    pub fn new(inner: I, slice_size: u64) -> Slices<I> {
        Slices {
            inner,
            slice_size: slice_size.max(1),
            pending: None,
        }
    }
}

/// Slice `index` of the object `r` asks for, as a request of its own: the slice's length, its
/// own key and id (slice 0: the object's).
pub fn slice_of(r: &Request, index: u64, slice_size: u64) -> Request {
    let start = index.saturating_mul(slice_size);
    let key = if index == 0 {
        r.key
    } else {
        let mut bytes = [0u8; 24];
        bytes[..16].copy_from_slice(&r.key.raw().to_le_bytes());
        bytes[16..].copy_from_slice(&index.to_le_bytes());
        KeyHash::of(&bytes)
    };
    Request {
        time: r.time,
        key,
        size: r.size.saturating_sub(start).min(slice_size),
        id: slice_id(r.id, index),
        range: None,
        recorded: None,
    }
}

impl<I: Iterator<Item = Result<Request, TraceError>>> Iterator for Slices<I> {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((r, next, last)) = self.pending.as_mut() {
                if *next <= *last {
                    let i = *next;
                    *next += 1;
                    return Some(Ok(slice_of(r, i, self.slice_size)));
                }
                self.pending = None;
            }
            let r = match self.inner.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            let (first, last) = r.range.unwrap_or((0, u64::MAX));
            if first >= r.size.max(1) {
                continue;
            }
            if r.size <= self.slice_size {
                return Some(Ok(Request { range: None, ..r }));
            }
            let last = last.min(r.size - 1);
            self.pending = Some((r, first / self.slice_size, last / self.slice_size));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn req(key: u64, size: u64, range: Option<(u64, u64)>) -> Result<Request, TraceError> {
        Ok(Request {
            time: Duration::from_secs(1),
            key: KeyHash::of_u64(key),
            size,
            id: key,
            range,
            recorded: None,
        })
    }

    fn cut(reqs: Vec<Result<Request, TraceError>>) -> Vec<(u64, u64)> {
        Slices::new(reqs.into_iter(), 10)
            .map(|r| r.map(|r| (r.id, r.size)).unwrap())
            .collect()
    }

    #[test]
    fn a_request_becomes_the_slices_its_range_covers() {
        let s = |i| slice_id(7, i);
        // Whole: every slice, the last one short.
        assert_eq!(
            cut(vec![req(7, 25, None)]),
            [(7, 10), (s(1), 10), (s(2), 5)]
        );
        // A range: only its slices; to the end.
        assert_eq!(
            cut(vec![req(7, 25, Some((12, 21)))]),
            [(s(1), 10), (s(2), 5)]
        );
        assert_eq!(cut(vec![req(7, 25, Some((20, u64::MAX)))]), [(s(2), 5)]);
        // One slice or less: the object, whatever the range; past the end: nothing.
        assert_eq!(cut(vec![req(3, 10, Some((4, 5)))]), [(3, 10)]);
        assert_eq!(cut(vec![req(7, 25, Some((25, 30)))]), []);
        // Slice keys differ from each other and from other objects'; slice 0 is the object.
        let all: Vec<Request> = Slices::new(vec![req(7, 25, None)].into_iter(), 10)
            .map(Result::unwrap)
            .collect();
        assert_eq!(all[0].key, KeyHash::of_u64(7));
        assert!(all[1].key != all[2].key && all[1].key != all[0].key);
    }

    #[test]
    fn errors_pass_through() {
        let e = TraceError::BadFormatName("x".into());
        let got: Vec<_> = Slices::new(vec![Err(e), req(1, 5, None)].into_iter(), 10).collect();
        assert!(got[0].is_err() && got[1].is_ok());
    }
}
