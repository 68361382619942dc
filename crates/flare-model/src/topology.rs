//! Physical placement: nodes of GPUs, one NIC per GPU (rail-optimised), leaf switches per
//! rail and pod, and a spine layer above them.

use serde::{Deserialize, Serialize};

/// Where a GPU sits: its node and its index inside the node (which is also its rail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuLoc {
    pub node: u32,
    pub local: u32,
}

/// The cluster fabric a job runs on.
///
/// Every GPU has its own NIC on rail `local`; the NICs of rail `r` of the nodes of one pod
/// hang off one leaf switch; leaves meet at the spine. Inside a node GPUs talk over NVLink.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterTopology {
    /// Nodes of the cluster (node ids are below this).
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Nodes under one set of leaf switches (a "pod" or scalable unit).
    pub nodes_per_pod: u32,
    /// Where the scheduler put the job: the node id of each block of `gpus_per_node`
    /// consecutive ranks (ranks 0..8 on `placement[0]`, ...). `None`: densely, rank r on
    /// node r / gpus_per_node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Vec<u32>>,
}

/// One shared piece of the fabric that a transfer may cross.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PathElement {
    /// The NVLink/NVSwitch domain of one node.
    NvLink { node: u32 },
    /// One GPU's NIC and its cable to the leaf switch.
    Nic { node: u32, rail: u32 },
    /// The leaf switch of one rail in one pod.
    Leaf { pod: u32, rail: u32 },
    /// The spine layer.
    Spine,
}

impl PathElement {
    /// A short stable name, e.g. `node17/nic3`, `pod2/leaf-rail3`.
    pub fn label(&self) -> String {
        match self {
            PathElement::NvLink { node } => format!("node{node}/nvlink"),
            PathElement::Nic { node, rail } => format!("node{node}/nic{rail}"),
            PathElement::Leaf { pod, rail } => format!("pod{pod}/leaf-rail{rail}"),
            PathElement::Spine => "spine".to_string(),
        }
    }
}

impl ClusterTopology {
    /// A topology just big enough for `world_size` GPUs.
    pub fn for_world(world_size: u32, gpus_per_node: u32, nodes_per_pod: u32) -> Self {
        let gpus_per_node = gpus_per_node.max(1);
        ClusterTopology {
            nodes: world_size.div_ceil(gpus_per_node).max(1),
            gpus_per_node,
            nodes_per_pod: nodes_per_pod.max(1),
            placement: None,
        }
    }

    /// The same cluster with the job's rank blocks on the given nodes (see
    /// [`ClusterTopology::placement`]); the cluster grows to hold the highest node id.
    pub fn with_placement(mut self, nodes: Vec<u32>) -> Self {
        let top = nodes.iter().copied().max().map_or(0, |m| m + 1);
        self.nodes = self.nodes.max(top);
        self.placement = Some(nodes);
        self
    }

    /// The rank on GPU `local` of `node`, if the job has one there.
    pub fn rank_at(&self, node: u32, local: u32) -> Option<u32> {
        if local >= self.gpus_per_node {
            return None;
        }
        let block = match &self.placement {
            Some(p) => p.iter().position(|&n| n == node)? as u32,
            None => node,
        };
        Some(block * self.gpus_per_node + local)
    }

    pub fn world_size(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// Where a rank runs: densely (rank r on node r / gpus_per_node) unless the job has a
    /// placement.
    pub fn loc(&self, rank: u32) -> GpuLoc {
        let block = rank / self.gpus_per_node;
        GpuLoc {
            node: match &self.placement {
                Some(p) => p.get(block as usize).copied().unwrap_or(block),
                None => block,
            },
            local: rank % self.gpus_per_node,
        }
    }

    pub fn pod_of(&self, node: u32) -> u32 {
        node / self.nodes_per_pod
    }

    pub fn pods(&self) -> u32 {
        self.nodes.div_ceil(self.nodes_per_pod)
    }

    /// The shared elements a transfer from GPU `a` to GPU `b` crosses, in order.
    pub fn path(&self, a: GpuLoc, b: GpuLoc, out: &mut Vec<PathElement>) {
        out.clear();
        if a.node == b.node {
            out.push(PathElement::NvLink { node: a.node });
            return;
        }
        let (pa, pb) = (self.pod_of(a.node), self.pod_of(b.node));
        out.push(PathElement::Nic {
            node: a.node,
            rail: a.local,
        });
        out.push(PathElement::Leaf {
            pod: pa,
            rail: a.local,
        });
        if pa != pb || a.local != b.local {
            out.push(PathElement::Spine);
            out.push(PathElement::Leaf {
                pod: pb,
                rail: b.local,
            });
        }
        out.push(PathElement::Nic {
            node: b.node,
            rail: b.local,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_fabric() {
        let t = ClusterTopology {
            nodes: 8,
            gpus_per_node: 8,
            nodes_per_pod: 4,
            placement: None,
        };
        let mut p = Vec::new();
        t.path(t.loc(0), t.loc(7), &mut p);
        assert_eq!(p, vec![PathElement::NvLink { node: 0 }]);
        t.path(t.loc(3), t.loc(11), &mut p);
        assert_eq!(p.len(), 3, "same rail, same pod: NIC, leaf, NIC");
        assert_eq!(p[1], PathElement::Leaf { pod: 0, rail: 3 });
        t.path(t.loc(3), t.loc(8 * 5 + 3), &mut p);
        assert_eq!(p.len(), 5, "other pod crosses the spine");
        assert_eq!(p[3], PathElement::Leaf { pod: 1, rail: 3 });
        // A scattered job: rank block 1 on node 6 (pod 1).
        let s = ClusterTopology::for_world(16, 8, 4).with_placement(vec![0, 6]);
        assert_eq!(s.loc(9).node, 6);
        assert_eq!(s.rank_at(6, 1), Some(9));
        assert_eq!(s.rank_at(3, 1), None);
        assert_eq!(s.nodes, 7);
        s.path(s.loc(3), s.loc(11), &mut p);
        assert!(p.contains(&PathElement::Spine), "{p:?}");
    }
}
