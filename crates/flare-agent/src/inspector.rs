//! NCCL Inspector's output, written by the agent from Flare's NCCL plugin's events, so a
//! user who loads Flare's plugin instead of NVIDIA's Inspector (NCCL loads one profiler
//! plugin) keeps what Inspector gave them: per process `<hostname>-pid<pid>.log`, one JSON
//! line per completed collective or P2P operation (Inspector's output format v4.0: the
//! communicator header, the writer's metadata, `coll_perf` or `p2p_perf` with the longest
//! kernel channel's GPU time and the bandwidths), and per rank
//! `nccl_inspector_metrics_rank<R>.prom`, the Prometheus text Inspector writes for
//! node-exporter's textfile collector (per communicator, operation, message-size bucket
//! and algorithm: the mean execution time and the geometric mean of the bus bandwidth of
//! the operations since the last write). Flare's own importer reads the JSON lines back
//! (`flare diagnose --format nccl-inspector`).

use flare_model::OpKind;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Inspector's output format version this writer follows.
pub const FORMAT_VERSION: &str = "v4.0";

/// One completed operation, names resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct InspectorRecord {
    pub rank: u32,
    pub pid: u32,
    pub comm_hash: u64,
    pub comm_name: Option<String>,
    /// This process's rank in the communicator, its size and its nodes.
    pub comm_rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
    pub func: String,
    pub kind: OpKind,
    /// `RING/SIMPLE` for a collective.
    pub algo_proto: Option<String>,
    /// A P2P op's peer (rank in the communicator).
    pub peer: Option<u32>,
    pub seq: u32,
    pub bytes: u64,
    pub exec_ns: u64,
    pub dump_unix_us: u64,
}

impl InspectorRecord {
    /// Algorithm and bus bandwidth in GB/s (bytes per ns), NCCL's convention.
    fn bandwidths(&self) -> (f64, f64) {
        if self.exec_ns == 0 {
            return (0.0, 0.0);
        }
        let alg = self.bytes as f64 / self.exec_ns as f64;
        let bus = if self.peer.is_some() {
            alg
        } else {
            alg * self.kind.bus_factor(self.nranks)
        };
        (alg, bus)
    }

    /// The JSON line Inspector writes for it.
    pub fn json_line(&self, hostname: &str) -> String {
        let (alg, bus) = self.bandwidths();
        // Inspector writes whole microseconds.
        let exec_us = (self.exec_ns + 500) / 1_000;
        let mut header = json!({
            "id": format!("0x{:x}", self.comm_hash),
            "rank": self.comm_rank,
            "n_ranks": self.nranks,
            "nnodes": self.nnodes,
        });
        if let Some(n) = &self.comm_name {
            header["comm_name"] = json!(n);
        }
        let metadata = json!({
            "inspector_output_format_version": FORMAT_VERSION,
            "git_rev": concat!("flare-", env!("CARGO_PKG_VERSION")),
            "rec_mechanism": "flare_nccl_profiler",
            "dump_timestamp_us": self.dump_unix_us,
            "hostname": hostname,
            "pid": self.pid,
        });
        let line = match self.peer {
            Some(peer) => json!({
                "header": header,
                "metadata": metadata,
                "p2p_perf": {
                    "p2p": self.func,
                    "p2p_sn": self.seq,
                    "p2p_peer": peer,
                    "p2p_msg_size_bytes": self.bytes,
                    "p2p_exec_time_us": exec_us,
                    "p2p_timing_source": "kernel_gpu",
                    "p2p_algobw_gbs": alg,
                    "p2p_busbw_gbs": bus,
                }
            }),
            None => json!({
                "header": header,
                "metadata": metadata,
                "coll_perf": {
                    "coll": self.func,
                    "coll_sn": self.seq,
                    "coll_msg_size_bytes": self.bytes,
                    "coll_exec_time_us": exec_us,
                    "coll_timing_source": "kernel_gpu",
                    "coll_algobw_gbs": alg,
                    "coll_busbw_gbs": bus,
                }
            }),
        };
        line.to_string()
    }
}

/// Inspector's message-size bucket label: the size in the largest unit that keeps it at
/// least 1, floored, and the next integer (`1-2MB`).
fn size_bucket(bytes: u64) -> String {
    if bytes == 0 {
        return "0B".into();
    }
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    let lower = v.floor().max(1.0);
    format!("{lower:.0}-{:.0}{}", lower + 1.0, units[u])
}

/// A Prometheus series' labels (what Inspector keys its buckets by).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct BucketKey {
    comm_name: String,
    nnodes: u32,
    nranks: u32,
    op: String,
    p2p: bool,
    size: String,
    algo_proto: String,
}

#[derive(Default)]
struct Agg {
    n: u64,
    exec_us: f64,
    bus_n: u64,
    bus_log: f64,
}

/// The agent's Inspector output directory.
pub struct InspectorOut {
    dir: PathBuf,
    node: String,
    job: String,
    logs: HashMap<u32, BufWriter<File>>,
    /// Per rank, its buckets since the last Prometheus write.
    buckets: BTreeMap<u32, BTreeMap<BucketKey, Agg>>,
}

impl InspectorOut {
    pub fn new(dir: &Path, node: &str, job: Option<&str>) -> std::io::Result<InspectorOut> {
        std::fs::create_dir_all(dir)?;
        Ok(InspectorOut {
            dir: dir.to_path_buf(),
            node: node.to_string(),
            job: job.unwrap_or("unknown").to_string(),
            logs: HashMap::new(),
            buckets: BTreeMap::new(),
        })
    }

    /// Appends the records' JSON lines to their processes' logs and adds them to the
    /// Prometheus buckets.
    pub fn write(&mut self, records: &[InspectorRecord]) -> std::io::Result<()> {
        if records.is_empty() {
            // Called every poll: nothing to flush then.
            return Ok(());
        }
        for r in records {
            let f = match self.logs.entry(r.pid) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    let path = self.dir.join(format!("{}-pid{}.log", self.node, r.pid));
                    let file = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)?;
                    v.insert(BufWriter::new(file))
                }
            };
            writeln!(f, "{}", r.json_line(&self.node))?;
            let key = BucketKey {
                comm_name: r
                    .comm_name
                    .clone()
                    .unwrap_or_else(|| format!("0x{:x}", r.comm_hash)),
                nnodes: r.nnodes,
                nranks: r.nranks,
                op: r.func.clone(),
                p2p: r.peer.is_some(),
                size: size_bucket(r.bytes),
                algo_proto: r.algo_proto.clone().unwrap_or_else(|| "unknown".into()),
            };
            let a = self
                .buckets
                .entry(r.rank)
                .or_default()
                .entry(key)
                .or_default();
            a.n += 1;
            a.exec_us += r.exec_ns as f64 / 1e3;
            let (_, bus) = r.bandwidths();
            if bus > 0.0 {
                a.bus_n += 1;
                a.bus_log += bus.ln();
            }
        }
        for f in self.logs.values_mut() {
            f.flush()?;
        }
        Ok(())
    }

    /// Closes a process's log (it exited): an agent that outlives many jobs keeps no file
    /// open for processes that are gone.
    pub fn close(&mut self, pid: u32) {
        if let Some(mut f) = self.logs.remove(&pid) {
            let _ = f.flush();
        }
    }

    /// Rewrites each rank's Prometheus file with the buckets since the last call (written
    /// to a temporary file and renamed, so a collector never reads half a file).
    pub fn write_prometheus(&mut self) -> std::io::Result<()> {
        for (rank, buckets) in std::mem::take(&mut self.buckets) {
            let mut text = String::new();
            for (k, a) in &buckets {
                let (bus_name, exec_name, op_label) = if k.p2p {
                    (
                        "nccl_p2p_bus_bandwidth_gbs",
                        "nccl_p2p_exec_time_microseconds",
                        "p2p_operation",
                    )
                } else {
                    (
                        "nccl_bus_bandwidth_gbs",
                        "nccl_collective_exec_time_microseconds",
                        "collective",
                    )
                };
                let mut labels = format!(
                    "version=\"{FORMAT_VERSION}\",slurm_job_id=\"{}\",node=\"{}\",gpu=\"rank{rank}\",comm_name=\"{}\",n_nodes=\"{}\",nranks=\"{}\",{op_label}=\"{}\",message_size=\"{}\"",
                    escape(&self.job),
                    escape(&self.node),
                    escape(&k.comm_name),
                    k.nnodes,
                    k.nranks,
                    escape(&k.op),
                    k.size
                );
                if !k.p2p {
                    labels.push_str(&format!(",algo_proto=\"{}\"", escape(&k.algo_proto)));
                }
                let exec = a.exec_us / a.n.max(1) as f64;
                let bus = if a.bus_n > 0 {
                    (a.bus_log / a.bus_n as f64).exp()
                } else {
                    0.0
                };
                text.push_str(&format!("{bus_name}{{{labels}}} {bus:.6}\n"));
                text.push_str(&format!("{exec_name}{{{labels}}} {exec:.6}\n"));
            }
            let path = self
                .dir
                .join(format!("nccl_inspector_metrics_rank{rank}.prom"));
            let tmp = path.with_extension("prom.tmp");
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, &path)?;
        }
        Ok(())
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(func: &str, kind: OpKind, peer: Option<u32>) -> InspectorRecord {
        InspectorRecord {
            rank: 5,
            pid: 4242,
            comm_hash: 0xabc,
            comm_name: Some("tp\"0".into()),
            comm_rank: 1,
            nranks: 4,
            nnodes: 2,
            func: func.into(),
            kind,
            algo_proto: peer.is_none().then(|| "RING/SIMPLE".into()),
            peer,
            seq: 7,
            bytes: 3 << 20,
            exec_ns: 1_000_000,
            dump_unix_us: 1_700_000_000_000_000,
        }
    }

    #[test]
    fn size_buckets_follow_inspector() {
        for (bytes, label) in [
            (0, "0B"),
            (512, "512-513B"),
            (3 << 20, "3-4MB"),
            (1 << 30, "1-2GB"),
        ] {
            assert_eq!(size_bucket(bytes), label);
        }
    }

    #[test]
    fn lines_carry_inspector_fields_and_bus_bandwidth() {
        let v: serde_json::Value =
            serde_json::from_str(&record("AllReduce", OpKind::AllReduce, None).json_line("h"))
                .unwrap();
        assert_eq!(v["header"]["id"], "0xabc");
        assert_eq!(v["header"]["comm_name"], "tp\"0");
        assert_eq!(
            (
                v["header"]["rank"].as_u64(),
                v["header"]["n_ranks"].as_u64()
            ),
            (Some(1), Some(4))
        );
        assert_eq!(
            v["metadata"]["inspector_output_format_version"],
            FORMAT_VERSION
        );
        assert_eq!(
            (
                v["metadata"]["hostname"].as_str(),
                v["metadata"]["pid"].as_u64()
            ),
            (Some("h"), Some(4242))
        );
        let p = &v["coll_perf"];
        assert_eq!(
            (p["coll"].as_str(), p["coll_sn"].as_u64()),
            (Some("AllReduce"), Some(7))
        );
        assert_eq!(p["coll_exec_time_us"].as_u64(), Some(1000));
        // 3 MiB in 1 ms: 3.146 GB/s; all-reduce over 4 ranks: x 1.5 on the bus.
        let alg = p["coll_algobw_gbs"].as_f64().unwrap();
        assert!((alg - 3.145728).abs() < 1e-9, "{alg}");
        assert!((p["coll_busbw_gbs"].as_f64().unwrap() - alg * 1.5).abs() < 1e-9);
        let v: serde_json::Value =
            serde_json::from_str(&record("Send", OpKind::Send, Some(3)).json_line("h")).unwrap();
        assert_eq!(v["p2p_perf"]["p2p_peer"], 3);
        assert_eq!(
            v["p2p_perf"]["p2p_busbw_gbs"],
            v["p2p_perf"]["p2p_algobw_gbs"]
        );
    }

    #[test]
    fn files_are_named_and_written_as_inspector_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = InspectorOut::new(dir.path(), "node7", Some("job1")).unwrap();
        out.write(&[
            record("AllReduce", OpKind::AllReduce, None),
            record("Send", OpKind::Send, Some(2)),
        ])
        .unwrap();
        let log = std::fs::read_to_string(dir.path().join("node7-pid4242.log")).unwrap();
        assert_eq!(log.lines().count(), 2);
        // Closed when its process is gone; a later line (a reused pid) appends.
        out.close(4242);
        assert!(out.logs.is_empty());
        out.write(&[record("AllReduce", OpKind::AllReduce, None)])
            .unwrap();
        let log = std::fs::read_to_string(dir.path().join("node7-pid4242.log")).unwrap();
        assert_eq!(log.lines().count(), 3);
        out.write_prometheus().unwrap();
        let prom =
            std::fs::read_to_string(dir.path().join("nccl_inspector_metrics_rank5.prom")).unwrap();
        assert!(prom.contains("nccl_bus_bandwidth_gbs{version=\"v4.0\",slurm_job_id=\"job1\",node=\"node7\",gpu=\"rank5\",comm_name=\"tp\\\"0\",n_nodes=\"2\",nranks=\"4\",collective=\"AllReduce\",message_size=\"3-4MB\",algo_proto=\"RING/SIMPLE\"} 4.718592"), "{prom}");
        assert!(
            prom.contains("nccl_collective_exec_time_microseconds{"),
            "{prom}"
        );
        assert!(
            prom.contains("nccl_p2p_exec_time_microseconds{")
                && prom.contains("p2p_operation=\"Send\""),
            "{prom}"
        );
    }
}
