//! Consistent hashing of keys over nodes, as a CDN's balancer spreads an edge's keys (nginx's
//! `hash ... consistent` is a ketama ring of 160 points per unit of weight; haproxy's
//! `hash-type consistent` one of 16 per unit, so `weight 10` matches): each node owns
//! [`POINTS_PER_NODE`] points on a 64-bit ring, and a key goes to the node of the first
//! point at or after the key's position. Taking a node out moves only the keys it owned (about
//! 1/N of them), each to the node of the next point, and every other key stays where it was.
//!
//! The points and the key positions are this crate's own hashes, not the balancers' (which hash
//! URLs and server names with CRC32 or their own functions, neither of which a trace has): the
//! simulated cluster splits keys the way a real one does, not key for key as a given nginx.

use crate::hash::{object_id, KeyHash};
use serde::{Deserialize, Serialize};

/// Points each node owns on the ring (ketama's and nginx's figure: 160 per unit of weight).
pub const POINTS_PER_NODE: usize = 160;

/// A ring of nodes `0..n`.
///
/// # Example
/// ```
/// use secondhit_lab::sim::Ring;
/// use secondhit_lab::KeyHash;
/// let three = Ring::new(3);
/// let k = KeyHash::of_u64(42);
/// assert_eq!(three.node_of(k), three.node_of(k));
/// assert!(three.node_of(k) < 3);
/// ```
#[derive(Clone, Debug)]
pub struct Ring {
    /// (position, node), sorted by position.
    points: Vec<(u64, u32)>,
}

impl Ring {
    /// Nodes `0..n` (at least one).
    pub fn new(n: usize) -> Ring {
        Self::of_nodes(&(0..n.max(1)).collect::<Vec<_>>())
    }

    /// A ring of the given node numbers only: the ring of `0..n` with some taken out, where
    /// every key of a remaining node stays on it.
    pub fn of_nodes(nodes: &[usize]) -> Ring {
        let mut points = Vec::with_capacity(nodes.len() * POINTS_PER_NODE);
        for &node in nodes {
            for point in 0..POINTS_PER_NODE {
                let name = format!("node-{node}-{point}");
                points.push((object_id(name.as_bytes()), node as u32));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// The node a key goes to.
    #[inline]
    pub fn node_of(&self, key: KeyHash) -> usize {
        let at = position(key);
        let i = self.points.partition_point(|&(p, _)| p < at);
        let (_, node) = self
            .points
            .get(i)
            .or(self.points.first())
            .copied()
            .unwrap_or((0, 0));
        node as usize
    }
}

/// A key's place on the ring: its low 64 bits, mixed (the high bits decide `--sample`, and a
/// sample must spread over the nodes as the whole trace does).
#[inline]
fn position(key: KeyHash) -> u64 {
    // MurmurHash3's 64-bit finaliser: a bijection that spreads every input bit.
    let mut x = key.raw() as u64;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// How a cache's capacity is shared by a simulated cluster's nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeCapacity {
    /// Each node has capacity / N: the same total memory as one cache.
    #[default]
    Split,
    /// Each node has the whole capacity: N times the memory.
    Each,
}

impl std::str::FromStr for NodeCapacity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "split" => Ok(NodeCapacity::Split),
            "each" => Ok(NodeCapacity::Each),
            _ => Err(format!(
                "{s:?}: node capacity is split (capacity / N each) or each (capacity each)"
            )),
        }
    }
}

/// A simulated cluster: how many nodes and how they share the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nodes {
    /// Nodes (1: one cache, no ring).
    pub count: usize,
    /// How they share each run's capacity.
    pub capacity: NodeCapacity,
}

impl Default for Nodes {
    fn default() -> Self {
        Nodes {
            count: 1,
            capacity: NodeCapacity::Split,
        }
    }
}

impl Nodes {
    /// One node's capacity in a run of `capacity` bytes.
    pub fn node_capacity(&self, capacity: u64) -> u64 {
        match self.capacity {
            NodeCapacity::Split => capacity / self.count.max(1) as u64,
            NodeCapacity::Each => capacity,
        }
    }
}

/// One node's figures in a simulated cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    /// Requests the ring sent it.
    pub requests: u64,
    /// Of those, hits.
    pub hits: u64,
    /// Bytes it served from its cache.
    pub hit_bytes: u64,
    /// Its cache writes.
    pub admissions: u64,
    /// `hits / requests`.
    pub hit_ratio: f64,
}

impl NodeResult {
    pub(super) fn of(c: &secondhit_store::Counts) -> NodeResult {
        NodeResult {
            requests: c.requests,
            hits: c.hits,
            hit_bytes: c.hit_bytes,
            admissions: c.admissions,
            hit_ratio: if c.requests == 0 {
                0.0
            } else {
                c.hits as f64 / c.requests as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_lands_on_the_same_node() {
        let ring = Ring::new(5);
        let again = Ring::new(5);
        for k in 0..10_000u64 {
            let key = KeyHash::of_u64(k);
            assert_eq!(ring.node_of(key), again.node_of(key));
        }
    }

    #[test]
    fn nodes_share_keys_about_evenly() {
        let ring = Ring::new(4);
        let mut per = [0u32; 4];
        for k in 0..100_000u64 {
            per[ring.node_of(KeyHash::of_u64(k))] += 1;
        }
        // 160 points per node: each share within 20 % of a quarter.
        for n in per {
            assert!((20_000..=30_000).contains(&n), "{per:?}");
        }
    }

    #[test]
    fn removing_one_of_n_nodes_moves_only_its_keys_about_one_in_n() {
        for n in [2usize, 3, 4, 8] {
            let all = Ring::new(n);
            let gone = n - 1;
            let rest = Ring::of_nodes(&(0..gone).collect::<Vec<_>>());
            let keys = 50_000u64;
            let mut moved = 0u64;
            for k in 0..keys {
                let key = KeyHash::of_u64(k);
                let before = all.node_of(key);
                let after = rest.node_of(key);
                if before == gone {
                    moved += 1;
                    assert_ne!(after, gone);
                } else {
                    assert_eq!(before, after, "a key of a remaining node moved");
                }
            }
            let share = moved as f64 / keys as f64;
            let expected = 1.0 / n as f64;
            assert!(
                (share - expected).abs() < 0.25 * expected,
                "n={n}: {share:.3} of keys moved, expected about {expected:.3}"
            );
        }
    }

    #[test]
    fn a_sample_spreads_over_every_node() {
        let ring = Ring::new(3);
        let mut per = [0u32; 3];
        for k in 0..200_000u64 {
            let key = KeyHash::of_u64(k);
            if crate::sim::sampled(key, 0.05) {
                per[ring.node_of(key)] += 1;
            }
        }
        assert!(per.iter().all(|&n| n > 2_000), "{per:?}");
    }
}
