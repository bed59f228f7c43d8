//! One 128-bit hash per key, computed once and shared by every structure that looks the key up.
//!
//! The hash is XXH3-128 with a fixed seed, so a key maps to the same Bloom positions on every run
//! and every machine: the simulator is deterministic and a filter's contents mean the same thing
//! wherever it is read. Integers are hashed as their little-endian bytes for the same reason.

use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64_with_seed};

/// The fixed seed of [`KeyHash`]. Changing it changes every Bloom position (and so every simulated
/// false positive); it is part of the crate's reproducibility contract.
pub const SEED: u64 = 0x5ec0_4d41_7b10_0f17;

/// A key's 128-bit hash: the only thing the Bloom filters and admission policies see of a key.
///
/// Hash once per request with [`KeyHash::of`] and pass the value to every generation of a
/// filter; the Bloom positions come from it by double hashing, whatever the number of hashes.
///
/// # Example
/// ```
/// use secondhit_admission::KeyHash;
/// let a = KeyHash::of(b"GET http://example.com/logo.png");
/// assert_eq!(a, KeyHash::of(b"GET http://example.com/logo.png"));
/// assert_ne!(a, KeyHash::of_u64(7));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyHash(u128);

impl KeyHash {
    /// Hashes a key given as bytes (a URL, a cache key, ...).
    #[inline]
    pub fn of(key: &[u8]) -> Self {
        KeyHash(xxh3_128_with_seed(key, SEED))
    }

    /// Hashes a key through its 64-bit [`object_id`]: `KeyHash::of_u64(object_id(key))`. A
    /// host that records its traffic as a trace of object ids (oracleGeneral keeps 64 bits)
    /// and keys its policy this way gets, from a simulator reading that trace with
    /// [`KeyHash::of_u64`], the very hashes it decided on: the same Bloom positions, so the
    /// same false positives and the same decisions.
    ///
    /// ```
    /// use secondhit_admission::hash::{object_id, KeyHash};
    /// let url = b"GET http://example.com/logo.png";
    /// let recorded: u64 = object_id(url); // what the host writes in its trace
    /// // ... and what a simulator reading the trace hashes, for the same decisions:
    /// assert_eq!(KeyHash::of_u64(recorded), KeyHash::of_key(url));
    /// // Not the direct hash of the key: a host keys one way or the other, consistently.
    /// assert_ne!(KeyHash::of_key(url), KeyHash::of(url));
    /// ```
    #[inline]
    pub fn of_key(key: &[u8]) -> Self {
        Self::of_u64(object_id(key))
    }

    /// Hashes an integer key (a trace's object id) as its 8 little-endian bytes.
    #[inline]
    pub fn of_u64(key: u64) -> Self {
        Self::of(&key.to_le_bytes())
    }

    /// Wraps a hash computed elsewhere (for example by another proxy that already hashes keys).
    /// The value should be uniformly distributed over all 128 bits.
    #[inline]
    pub const fn from_raw(raw: u128) -> Self {
        KeyHash(raw)
    }

    /// The raw 128-bit value.
    #[inline]
    pub const fn raw(self) -> u128 {
        self.0
    }

    /// The low and high 64-bit halves: `h1` and `h2` of Kirsch–Mitzenmacher double hashing.
    #[inline]
    pub(crate) const fn halves(self) -> (u64, u64) {
        (self.0 as u64, (self.0 >> 64) as u64)
    }
}

/// A key's 64-bit object id: XXH3-64 with [`SEED`]. What a recorded trace stores instead of the
/// key itself (a URL never leaves the host), and what [`KeyHash::of_key`] hashes.
#[inline]
pub fn object_id(key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, SEED)
}

/// The object id of slice `index` of the object `object` (a large object stored in aligned
/// slices, each admitted on its own). Slice 0 is the object's own id: a miss asks the policy
/// about the object's first slice before the origin has said how long the object is, and an
/// object of one slice is then the object itself. Any other slice: XXH3-64 of the two,
/// little-endian, with [`SEED`]. A function of the object's id, not of its key, so that a
/// simulator replaying a trace of object ids decides on the very same slice ids as the proxy.
#[inline]
pub fn slice_id(object: u64, index: u64) -> u64 {
    if index == 0 {
        return object;
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&object.to_le_bytes());
    bytes[8..].copy_from_slice(&index.to_le_bytes());
    xxh3_64_with_seed(&bytes, SEED)
}

/// A hasher for maps keyed by a [`KeyHash`]'s raw `u128`: the key is already uniform, so it is
/// folded to 64 bits instead of hashed again. Deterministic (no random state), which keeps the
/// simulator's moka store reproducible.
#[derive(Default, Clone, Copy, Debug)]
pub struct Fold(u64);

impl std::hash::Hasher for Fold {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = self.0.rotate_left(32) ^ x;
    }
    fn write_u128(&mut self, x: u128) {
        self.0 = (x as u64) ^ ((x >> 64) as u64);
    }
}

/// `BuildHasher` for [`Fold`].
pub type BuildFold = std::hash::BuildHasherDefault<Fold>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_seed_gives_the_same_value_on_every_run() {
        // Pinned: if this changes, every simulated figure in the README changes with it.
        let h = KeyHash::of_u64(1);
        assert_eq!(h, KeyHash::of(&1u64.to_le_bytes()));
        assert_eq!(h.raw(), xxh3_128_with_seed(&[1, 0, 0, 0, 0, 0, 0, 0], SEED));
        let (lo, hi) = h.halves();
        assert_eq!(((hi as u128) << 64) | lo as u128, h.raw());
    }

    #[test]
    fn slice_zero_is_the_object_and_the_others_are_distinct() {
        let object = object_id(b"GET http://example.test/video.mp4");
        assert_eq!(slice_id(object, 0), object);
        let ids: std::collections::HashSet<u64> = (0..1000).map(|i| slice_id(object, i)).collect();
        assert_eq!(ids.len(), 1000);
        // Pinned: a recording's slice ids and the simulator's must agree across builds.
        assert_eq!(
            slice_id(1, 1),
            xxh3_64_with_seed(&[1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], SEED)
        );
    }
}
