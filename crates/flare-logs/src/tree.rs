//! The fixed-depth parse tree: token count, then the first few tokens, then a leaf that
//! lists the clusters to compare the line with. Nodes are created only when a cluster is
//! created, so the tree is bounded by the cluster cap times the depth.

use crate::line::WILD;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Keys are already good 64-bit hashes; hashing them again would only cost time.
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<PassThrough>>;

#[derive(Default)]
struct Node {
    children: Map<u64, u32>,
    leaf: Vec<u32>,
}

/// The tree; leaves hold cluster indices.
pub struct Tree {
    by_len: Map<usize, u32>,
    nodes: Vec<Node>,
    depth: usize,
    max_children: usize,
}

impl Tree {
    pub fn new(depth: usize, max_children: usize) -> Self {
        Tree {
            by_len: Map::default(),
            nodes: Vec::new(),
            depth,
            max_children: max_children.max(1),
        }
    }

    /// The clusters in the leaf a line with these tokens descends to (empty when none).
    /// `route_wild[i]`: token `i` holds a wildcard, so it follows the wildcard branch.
    pub fn leaf(&self, hashes: &[u64], route_wild: &[bool]) -> &[u32] {
        let Some(&mut_node) = self.by_len.get(&hashes.len()) else {
            return &[];
        };
        let mut node = mut_node;
        for i in 0..self.levels(hashes.len()) {
            let children = &self.nodes[node as usize].children;
            let next = if route_wild[i] {
                children.get(&WILD)
            } else {
                children.get(&hashes[i]).or_else(|| children.get(&WILD))
            };
            match next {
                Some(&n) => node = n,
                None => return &[],
            }
        }
        &self.nodes[node as usize].leaf
    }

    /// Files cluster `id`, whose template is `hashes`, in its leaf (made as needed).
    pub fn insert(&mut self, hashes: &[u64], route_wild: &[bool], id: u32) {
        let len = hashes.len();
        let mut node = match self.by_len.get(&len) {
            Some(&n) => n,
            None => {
                let n = self.new_node();
                self.by_len.insert(len, n);
                n
            }
        };
        for i in 0..self.levels(len) {
            let children = &self.nodes[node as usize].children;
            // A full node sends new tokens down its wildcard branch, which bounds fan-out.
            let key = if route_wild[i]
                || (!children.contains_key(&hashes[i]) && children.len() >= self.max_children)
            {
                WILD
            } else {
                hashes[i]
            };
            node = match self.nodes[node as usize].children.get(&key) {
                Some(&n) => n,
                None => {
                    let n = self.new_node();
                    self.nodes[node as usize].children.insert(key, n);
                    n
                }
            };
        }
        self.nodes[node as usize].leaf.push(id);
    }

    /// Token layers used for a line of `len` tokens: never the last token, as in Drain,
    /// so a short line still has a token left to compare at the leaf.
    fn levels(&self, len: usize) -> usize {
        self.depth.min(len.saturating_sub(1))
    }

    fn new_node(&mut self) -> u32 {
        self.nodes.push(Node::default());
        (self.nodes.len() - 1) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_length_then_prefix_and_wildcards() {
        let mut t = Tree::new(2, 100);
        t.insert(&[1, 2, 3], &[false, false, false], 0);
        t.insert(&[1, WILD, 3], &[false, true, false], 1);
        t.insert(&[1, 2], &[false, false], 2);
        assert_eq!(t.leaf(&[1, 2, 9], &[false; 3]), &[0]);
        // an unknown second token falls back to the wildcard branch
        assert_eq!(t.leaf(&[1, 7, 9], &[false; 3]), &[1]);
        // a masked token goes down the wildcard branch only
        assert_eq!(t.leaf(&[1, 2, 9], &[false, true, false]), &[1]);
        assert_eq!(t.leaf(&[1, 5], &[false; 2]), &[2]);
        assert!(t.leaf(&[4, 2, 3], &[false; 3]).is_empty());
        assert!(t.leaf(&[1, 2, 3, 4], &[false; 4]).is_empty());
    }

    #[test]
    fn a_full_node_sends_new_tokens_to_the_wildcard_branch() {
        let mut t = Tree::new(1, 2);
        t.insert(&[1, 0], &[false; 2], 0);
        t.insert(&[2, 0], &[false; 2], 1);
        t.insert(&[3, 0], &[false; 2], 2);
        assert_eq!(t.leaf(&[3, 0], &[false; 2]), &[2]);
        assert_eq!(t.leaf(&[4, 0], &[false; 2]), &[2]);
        assert_eq!(t.leaf(&[1, 0], &[false; 2]), &[0]);
    }
}
