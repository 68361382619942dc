//! Pipeline stages: from the job's parallel layout where the source states it, otherwise
//! read from who sends to whom. Adjacent pipeline stages exchange activations forward and
//! gradients backward by point-to-point transfers and nothing else does, so ranks linked
//! by transfers form chains, one per data-parallel (and tensor-parallel) position, each
//! as long as the pipeline is deep. Activations flow from the first stage: its first
//! transfer of an iteration is a send, the last stage's a receive.

use flare_model::{OpKind, ParallelConfig, Trace};
use std::collections::{BTreeMap, BTreeSet};

/// Each rank's pipeline stage (by rank index) and the pipeline's depth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stages {
    pub of: Vec<u32>,
    pub depth: u32,
    /// Read from the transfers rather than stated by the source.
    pub inferred: bool,
}

impl Stages {
    /// Stages as the layout states them (`None` without a pipeline).
    pub fn from_layout(par: &ParallelConfig, ranks: &[u32]) -> Option<Stages> {
        (par.pp > 1).then(|| Stages {
            of: ranks
                .iter()
                .map(|&r| {
                    if r < par.world_size() {
                        par.coords(r).pp
                    } else {
                        0
                    }
                })
                .collect(),
            depth: par.pp,
            inferred: false,
        })
    }

    /// Whether rank index `ri` is on the first or the last stage (the ones that carry the
    /// embedding, the loss and the output layer by design).
    pub fn at_end(&self, ri: usize) -> bool {
        let s = self.of[ri];
        s == 0 || s + 1 == self.depth
    }

    /// How many of the ranks are on each stage, by stage.
    pub fn sizes(&self) -> Vec<usize> {
        let mut n = vec![0; self.depth as usize];
        for &s in &self.of {
            if let Some(x) = n.get_mut(s as usize) {
                *x += 1;
            }
        }
        n
    }
}

/// A rank's point-to-point partners and the kind of its first transfer.
#[derive(Clone, Debug, Default)]
pub struct Links {
    pub peers: BTreeSet<u32>,
    pub first: Option<OpKind>,
}

/// Each traced rank's transfers (by rank index), read from its ops.
pub fn links_of(trace: &Trace) -> Vec<Links> {
    trace
        .ranks
        .iter()
        .map(|r| {
            let mut l = Links::default();
            for op in r
                .ops
                .iter()
                .filter(|o| o.kind.is_p2p() && o.peer != u32::MAX)
            {
                if op.peer != r.rank {
                    l.peers.insert(op.peer);
                }
                l.first.get_or_insert(op.kind);
            }
            l
        })
        .collect()
}

/// The stages the transfers show, when they form equal chains of 2 or more ranks covering
/// every traced rank; `None` otherwise (no transfers, a ring, a rank linked to three
/// others, chains of different lengths, partners outside the trace).
pub fn infer(ranks: &[u32], links: &[Links]) -> Option<Stages> {
    let index: BTreeMap<u32, usize> = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    // Undirected adjacency by rank index (a partner missing from the trace ends it).
    let mut adj: Vec<Vec<usize>> = Vec::with_capacity(ranks.len());
    for l in links {
        let mut v = Vec::with_capacity(l.peers.len());
        for p in &l.peers {
            v.push(*index.get(p)?);
        }
        if v.is_empty() || v.len() > 2 {
            return None;
        }
        adj.push(v);
    }
    // Links are symmetric: a rank that sent to another received from it (or sent back).
    for (i, v) in adj.iter().enumerate() {
        if v.iter().any(|&j| !adj[j].contains(&i)) {
            return None;
        }
    }
    let mut of = vec![u32::MAX; ranks.len()];
    let mut depth = None;
    for start in 0..ranks.len() {
        if of[start] != u32::MAX || adj[start].len() != 1 {
            continue;
        }
        let mut chain = vec![start];
        let mut prev = usize::MAX;
        let mut cur = start;
        while let Some(&next) = adj[cur].iter().find(|&&n| n != prev) {
            prev = cur;
            cur = next;
            chain.push(cur);
        }
        // Orient: the end whose first transfer is a send is the first stage; where the
        // kinds do not say, the lower rank (every framework numbers stages that way).
        let (head, tail) = (&links[chain[0]], &links[*chain.last()?]);
        let reverse = match (head.first, tail.first) {
            (Some(OpKind::Recv), Some(OpKind::Send)) => true,
            (Some(OpKind::Send), Some(OpKind::Recv)) => false,
            _ => ranks[chain[0]] > ranks[*chain.last()?],
        };
        if reverse {
            chain.reverse();
        }
        if *depth.get_or_insert(chain.len()) != chain.len() {
            return None;
        }
        for (s, &ri) in chain.iter().enumerate() {
            of[ri] = s as u32;
        }
    }
    // A rank left without a stage sits on a ring (interleaved schedules close the loop).
    if of.contains(&u32::MAX) {
        return None;
    }
    Some(Stages {
        of,
        depth: depth? as u32,
        inferred: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(spec: &[(&[u32], Option<OpKind>)]) -> Vec<Links> {
        spec.iter()
            .map(|(peers, first)| Links {
                peers: peers.iter().copied().collect(),
                first: *first,
            })
            .collect()
    }

    #[test]
    fn chains_of_transfers_are_pipelines() {
        use OpKind::{Recv, Send};
        type Spec<'a> = &'a [(&'a [u32], Option<OpKind>)];
        type Want<'a> = Option<(&'a [u32], u32)>;
        let cases: &[(&str, &[u32], Spec, Want)] = &[
            (
                "4 stages, one rank each",
                &[0, 1, 2, 3],
                &[
                    (&[1], Some(Send)),
                    (&[0, 2], Some(Recv)),
                    (&[1, 3], Some(Recv)),
                    (&[2], Some(Recv)),
                ],
                Some((&[0, 1, 2, 3], 4)),
            ),
            (
                "2 replicas of 2 stages, Megatron's numbering (stride 2)",
                &[0, 1, 2, 3],
                &[
                    (&[2], Some(Send)),
                    (&[3], Some(Send)),
                    (&[0], Some(Recv)),
                    (&[1], Some(Recv)),
                ],
                Some((&[0, 0, 1, 1], 2)),
            ),
            (
                "activations flow from the higher rank",
                &[0, 1, 2],
                &[
                    (&[1], Some(Recv)),
                    (&[0, 2], Some(Recv)),
                    (&[1], Some(Send)),
                ],
                Some((&[2, 1, 0], 3)),
            ),
            (
                "no kinds: the lower rank first",
                &[5, 6],
                &[(&[6], None), (&[5], None)],
                Some((&[0, 1], 2)),
            ),
            (
                "a ring (interleaved stages)",
                &[0, 1, 2],
                &[(&[1, 2], None), (&[0, 2], None), (&[0, 1], None)],
                None,
            ),
            (
                "chains of different lengths",
                &[0, 1, 2, 3, 4],
                &[
                    (&[1], None),
                    (&[0], None),
                    (&[3], None),
                    (&[2, 4], None),
                    (&[3], None),
                ],
                None,
            ),
            (
                "a rank without transfers",
                &[0, 1, 2],
                &[(&[1], None), (&[0], None), (&[], None)],
                None,
            ),
            (
                "a partner outside the trace",
                &[0, 1],
                &[(&[1], None), (&[0, 7], None)],
                None,
            ),
            (
                "a hub (all-to-all by P2P)",
                &[0, 1, 2, 3],
                &[(&[1, 2, 3], None), (&[0], None), (&[0], None), (&[0], None)],
                None,
            ),
        ];
        for (name, ranks, spec, want) in cases {
            let got = infer(ranks, &links(spec));
            match want {
                Some((of, depth)) => {
                    let got = got.unwrap_or_else(|| panic!("{name}: no stages"));
                    assert_eq!((got.of.as_slice(), got.depth), (*of, *depth), "{name}");
                    assert!(got.inferred);
                }
                None => assert_eq!(got, None, "{name}"),
            }
        }
    }
}
