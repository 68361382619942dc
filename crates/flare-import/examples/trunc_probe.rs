//! Prints the error for a few damaged native files (a manual check of the messages).
fn main() {
    let trace = flare_model::Trace {
        meta: Default::default(),
        job: flare_model::JobInfo {
            job_id: "x".into(),
            world_size: 1,
            cluster: flare_model::ClusterTopology::for_world(1, 8, 32),
            parallel: None,
            microbatches: None,
        },
        communicators: vec![],
        names: vec!["a".into()],
        ranks: vec![flare_model::RankTrace {
            rank: 0,
            ops: vec![],
            iterations: vec![],
        }],
    };
    let mut buf = Vec::new();
    flare_import::write_native(&trace, &mut buf).unwrap();
    println!("len {}", buf.len());
    for n in [0, 5, 10, 14, 20, 40, buf.len() - 9, buf.len() - 6, buf.len() - 2] {
        match flare_import::read_native(&buf[..n], "t.flare") {
            Ok(_) => println!("{n}: OK?!"),
            Err(e) => println!("{n}: {e}"),
        }
    }
    let mut t = buf.clone();
    t.extend_from_slice(b"extra");
    println!("{}", flare_import::read_native(&t[..], "t.flare").unwrap_err());
    let mut t = buf.clone();
    let k = t.len() - 12;
    t[k] ^= 4;
    println!("{}", flare_import::read_native(&t[..], "t.flare").unwrap_err());
}
