use flare_log_diagnosis::origin::{parse, TaskPrefix};
use std::time::Instant;
fn main() {
    let lines = [
        "[rank0]:[titan] 2026-11-25 10:23:26,141 - root - INFO - step:   987  loss: 2.9890  memory: 61.02GiB(77.58%)  tps: 3,818  tflops: 182.86  mfu: 58.46%",
        "gpu-node-0000:20000:20000 [0] NCCL INFO Bootstrap : Using ib0:10.16.0.0<0>",
        "W1125 10:00:00.000000 10000 torch/distributed/run.py:793] *****************************************",
        "[    9.500000] mlx5_core 0000:18:00.1: firmware version: 28.39.1002",
        "step 12 loss 3.2",
    ];
    let only: Option<usize> = std::env::args().nth(1).map(|a| a.parse().unwrap());
    for (i, l) in lines.iter().enumerate() {
        if only.is_some_and(|k| k != i) {
            continue;
        }
        let n = 5_000_000;
        let t = Instant::now();
        let mut acc = 0usize;
        for _ in 0..n {
            let o = parse(std::hint::black_box(l), TaskPrefix::Allowed);
            acc += o.message.len();
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        println!("{ns:6.1} ns  {acc} {}", &l[..l.len().min(16)]);
    }
}
