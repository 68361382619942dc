//! The online miner: each line is masked, routed down the tree to a leaf, compared with
//! the leaf's clusters and either joins the most similar one (whose template then turns
//! the positions where they differ into wildcards) or starts a new cluster. Clusters are
//! never merged or split afterwards, so the id a line gets is final: one pass. A line
//! that fits no template of its length may join one of another length whose constant
//! tokens are the same (a list of values of another length); the template keeps the
//! length it was made with.
//!
//! Ids are deterministic (the same stream gives the same ids) and a line fed again right
//! away gets the same id. A line seen long ago can, rarely, get another id: its template
//! may since have turned so many of the line's words into wildcards that the line no
//! longer reaches the similarity bar (a wildcard facing a word does not count as equal,
//! as in Drain). Counting it as equal (Drain3's include_params) makes that rarer but cost
//! GA: 0.959 against 0.964 on the 7 LogHub-2k systems, 0.812 against 0.832 on 9 others.

use crate::line::{MaskedLine, WILD};
use crate::mask::WILDCARD;
use crate::tree::Tree;
use std::collections::HashMap;
use thiserror::Error;

/// A template's id: dense, in order of first appearance, stable for a miner's lifetime.
pub type TemplateId = u32;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Token layers of the tree below the token-count layer.
    pub depth: usize,
    /// Least share of a line's tokens that must equal the template's for the line to
    /// join it (a masked variable facing a template wildcard counts as equal). Higher
    /// than Drain's 0.4 because masking already made the variables equal; 0.7 lets a
    /// line of 3 tokens join only a template it matches whole.
    pub similarity: f64,
    /// Children per tree node; tokens past it share the node's wildcard branch.
    pub max_children: usize,
    /// Clusters kept at most. Once reached, a line that matches no cluster gets
    /// [`Miner::overflow_id`] (template `<*>`) instead of a new cluster.
    pub max_clusters: usize,
    /// Tokens per line at most; the rest of a longer line is folded into the last token.
    pub max_tokens: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            depth: 2,
            similarity: 0.7,
            max_children: 100,
            max_clusters: 50_000,
            max_tokens: 256,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("similarity must lie in [0, 1], got {0}")]
    Similarity(f64),
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("max_clusters must be below 4294967295 (ids are u32), got {0}")]
    TooManyClusters(usize),
}

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.similarity) {
            return Err(ConfigError::Similarity(self.similarity));
        }
        for (name, v) in [
            ("max_children", self.max_children),
            ("max_clusters", self.max_clusters),
            ("max_tokens", self.max_tokens),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        // ids are u32, and the overflow id is max_clusters itself
        if self.max_clusters >= u32::MAX as usize {
            return Err(ConfigError::TooManyClusters(self.max_clusters));
        }
        Ok(())
    }
}

struct Cluster {
    hashes: Vec<u64>,
    text: Vec<Box<str>>,
    count: u64,
}

/// A template as reported: id, lines that joined it, text.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateView<'a> {
    pub id: TemplateId,
    pub count: u64,
    pub tokens: &'a [Box<str>],
}

impl TemplateView<'_> {
    pub fn text(&self) -> String {
        self.tokens.join(" ")
    }
}

pub struct Miner {
    config: Config,
    tree: Tree,
    clusters: Vec<Cluster>,
    overflow: Cluster,
    line: MaskedLine,
    /// Templates by [`skeleton`]: one entry per cluster and per generalisation, so
    /// bounded by the cluster cap times the tokens per template.
    by_skeleton: HashMap<u64, TemplateId>,
}

impl Miner {
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Miner {
            tree: Tree::new(config.depth, config.max_children),
            clusters: Vec::new(),
            overflow: Cluster {
                hashes: vec![WILD],
                text: vec![WILDCARD.into()],
                count: 0,
            },
            line: MaskedLine::default(),
            by_skeleton: HashMap::new(),
            config,
        })
    }

    /// The id lines get once the cluster cap is reached and they match no cluster.
    pub fn overflow_id(&self) -> TemplateId {
        self.config.max_clusters as TemplateId
    }

    /// Mines one content line (no header) and returns its template's id.
    pub fn add(&mut self, content: &str) -> TemplateId {
        self.line.fill(content, self.config.max_tokens);
        let line = &self.line;
        let leaf = self.tree.leaf(&line.hashes, &line.has_wild);
        if let Some(id) = best_match(&self.clusters, leaf, line, self.config.similarity) {
            let c = &mut self.clusters[id as usize];
            c.count += 1;
            let mut generalised = false;
            for i in 0..c.hashes.len() {
                if c.hashes[i] != line.hashes[i] && c.hashes[i] != WILD {
                    c.hashes[i] = WILD;
                    c.text[i] = WILDCARD.into();
                    generalised = true;
                }
            }
            if generalised {
                self.by_skeleton.entry(skeleton(&c.hashes)).or_insert(id);
            }
            return id;
        }
        // No template of this length fits. A list of values whose length varies
        // (`failed to resolve a b c`) makes the same event longer or shorter: join a
        // template of another length whose constant tokens are the very same, in the same
        // order, with runs of wildcards where the line has runs of masked values.
        let sk = skeleton(&line.hashes);
        if let Some(&id) = self.by_skeleton.get(&sk) {
            self.clusters[id as usize].count += 1;
            return id;
        }
        if self.clusters.len() >= self.config.max_clusters {
            self.overflow.count += 1;
            return self.overflow_id();
        }
        let id = self.clusters.len() as TemplateId;
        self.by_skeleton.insert(sk, id);
        self.tree.insert(&line.hashes, &line.has_wild, id);
        self.clusters.push(Cluster {
            hashes: line.hashes.clone(),
            text: (0..line.len()).map(|i| line.token(i).into()).collect(),
            count: 1,
        });
        id
    }

    /// The template `id` as it stands now (it generalises as lines join).
    pub fn template(&self, id: TemplateId) -> Option<TemplateView<'_>> {
        let c = if id == self.overflow_id() {
            &self.overflow
        } else {
            self.clusters.get(id as usize)?
        };
        Some(TemplateView {
            id,
            count: c.count,
            tokens: &c.text,
        })
    }

    /// All templates in id order, the overflow group last when it has lines.
    pub fn templates(&self) -> impl Iterator<Item = TemplateView<'_>> {
        let over = (self.overflow.count > 0).then_some(self.overflow_id());
        (0..self.clusters.len() as TemplateId)
            .chain(over)
            .filter_map(|id| self.template(id))
    }

    /// Lines that got the overflow id because the cluster cap was reached.
    pub fn overflowed(&self) -> u64 {
        self.overflow.count
    }
}

/// A template's or line's tokens with each run of wildcards as one: equal for lines of one
/// event whose variable lists differ in length.
fn skeleton(hashes: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut prev_wild = false;
    for &t in hashes {
        if t == WILD && prev_wild {
            continue;
        }
        prev_wild = t == WILD;
        h = (h.rotate_left(5) ^ t).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The leaf's most similar cluster, if similar enough. Similarity is the share of the
/// line's tokens equal to the template's, a masked variable facing a wildcard included;
/// a template wildcard facing a constant counts for nothing, as in Drain. Ties go to the
/// template with more wildcards (the more general one). A full match ends the search.
fn best_match(
    clusters: &[Cluster],
    leaf: &[u32],
    line: &MaskedLine,
    threshold: f64,
) -> Option<u32> {
    let n = line.len();
    if n == 0 {
        return leaf.first().copied();
    }
    let mut best: Option<(u32, usize, usize)> = None; // (id, equal, wildcards)
    for &id in leaf {
        let t = &clusters[id as usize].hashes;
        let (mut equal, mut wild) = (0usize, 0usize);
        for (a, b) in t.iter().zip(&line.hashes) {
            if a == b {
                // a masked variable where the template has one counts as agreement
                equal += 1;
            } else if *a == WILD {
                wild += 1;
            }
        }
        if best.is_none_or(|(_, e, w)| equal > e || (equal == e && wild > w)) {
            best = Some((id, equal, wild));
            if equal == n {
                break;
            }
        }
    }
    let (id, equal, _) = best?;
    (equal as f64 >= threshold * n as f64).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn miner() -> Miner {
        Miner::new(Config::default()).unwrap()
    }

    #[test]
    fn same_event_different_values_share_a_template() {
        let mut m = miner();
        let a = m.add("Receiving block blk_123 src: /10.0.0.1:50010 dest: /10.0.0.2:50010");
        let b = m.add("Receiving block blk_-99 src: /10.0.0.7:50010 dest: /10.0.0.9:50010");
        assert_eq!(a, b);
        assert_eq!(
            m.template(a).unwrap().text(),
            "Receiving block blk_<*> src: <*> dest: <*>"
        );
        assert_eq!(m.template(a).unwrap().count, 2);
    }

    #[test]
    fn differing_constant_words_are_merged_into_a_wildcard() {
        let mut m = miner();
        let a = m.add("session opened for user root by uid 0");
        let b = m.add("session opened for user alice by uid 1000");
        assert_eq!(a, b);
        assert_eq!(
            m.template(a).unwrap().text(),
            "session opened for user <*> by uid <*>"
        );
    }

    #[test]
    fn different_events_get_different_ids_in_order_of_appearance() {
        let mut m = miner();
        let a = m.add("Starting executor on host node-3");
        let b = m.add("Connection refused by peer");
        let c = m.add("Starting executor on host node-9");
        assert_eq!((a, b, c), (0, 1, 0));
        let ids: Vec<_> = m.templates().map(|t| (t.id, t.count)).collect();
        assert_eq!(ids, [(0, 2), (1, 1)]);
    }

    #[test]
    fn dissimilar_lines_of_one_length_stay_apart() {
        let mut m = miner();
        let a = m.add("disk full on volume data");
        let b = m.add("disk quota exceeded for alice");
        assert_ne!(a, b);
    }

    #[test]
    fn the_cluster_cap_sends_unmatched_lines_to_overflow() {
        let mut m = Miner::new(Config {
            max_clusters: 2,
            ..Config::default()
        })
        .unwrap();
        assert_eq!(m.add("alpha beta gamma delta"), 0);
        assert_eq!(m.add("one two"), 1);
        assert_eq!(m.add("completely different words here"), m.overflow_id());
        // lines that match an existing cluster still join it
        assert_eq!(m.add("alpha beta gamma epsilon"), 0);
        assert_eq!(m.overflowed(), 1);
        let last = m.templates().last().unwrap();
        assert_eq!(
            (last.id, last.count, last.text()),
            (2, 1, "<*>".to_string())
        );
    }

    #[test]
    fn a_variable_length_list_of_values_stays_one_event() {
        let mut m = miner();
        let a = m.add("failed to resolve data source name 10.0.0.1 10.0.0.2 10.0.0.3");
        let b = m.add("failed to resolve data source name 10.0.0.9");
        let c = m.add("failed to resolve data source file 10.0.0.9");
        assert_eq!(a, b);
        assert_ne!(a, c, "another constant word is another event");
        // a list that became wildcards by merging takes lines with masked values...
        let d = m.add("users now online in the main chat room: alice bob");
        let e = m.add("users now online in the main chat room: carol dave");
        let f = m.add("users now online in the main chat room: 10.0.0.7");
        assert_eq!((d, d), (e, f));
        // ...but a word the line does not mask is a constant to it: no skeleton match
        let g = m.add("users now online in the main chat room: erin");
        assert_ne!(g, d);
    }

    #[test]
    fn empty_lines_form_one_template() {
        let mut m = miner();
        let a = m.add("");
        let b = m.add("   ");
        assert_eq!(a, b);
        assert_eq!(m.template(a).unwrap().text(), "");
    }

    #[test]
    fn bad_config_is_refused() {
        let bad = Config {
            similarity: 1.5,
            ..Config::default()
        };
        assert_eq!(Miner::new(bad).err(), Some(ConfigError::Similarity(1.5)));
        let zero = Config {
            max_clusters: 0,
            ..Config::default()
        };
        assert_eq!(
            Miner::new(zero).err(),
            Some(ConfigError::Zero("max_clusters"))
        );
    }
}
