//! A job's parallel layout from how it was launched: the job's own statement in
//! `FLARE_PARALLEL` (`tp=2,pp=4`, see [`ParallelConfig::from_spec`]), or the sizes its
//! training program takes on its command line (Megatron-LM and the launchers built on
//! its arguments, torchtitan; see [`ParallelConfig::from_command_line`]). The
//! data-parallel size is what the world leaves.

use super::{Dim, ParallelConfig, ParallelConfigError};

/// The environment variable a job states its layout in.
pub const PARALLEL_ENV: &str = "FLARE_PARALLEL";

/// Command-line flags that carry one parallel size, by the dimension they size: the
/// Megatron-LM names (which Megatron-DeepSpeed and NeMo's Megatron launcher share) and
/// torchtitan's (`parallelism.*`, and the older `training.*`/`experimental.*`).
const SIZE_FLAGS: [(&str, Size); 9] = [
    ("--tensor-model-parallel-size", Size::Tp),
    ("--pipeline-model-parallel-size", Size::Pp),
    ("--context-parallel-size", Size::Cp),
    ("--expert-model-parallel-size", Size::Ep),
    ("--parallelism.tensor_parallel_degree", Size::Tp),
    ("--parallelism.pipeline_parallel_degree", Size::Pp),
    ("--parallelism.context_parallel_degree", Size::Cp),
    ("--training.tensor_parallel_degree", Size::Tp),
    ("--experimental.pipeline_parallel_degree", Size::Pp),
];

/// Megatron-LM's flag for its other rank order, pipeline before data (`tp-cp-ep-pp-dp`).
const TP_PP_DP_FLAG: &str = "--use-tp-pp-dp-mapping";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Size {
    Tp,
    Cp,
    Ep,
    Dp,
    Pp,
}

/// Sizes read so far; 1 where nothing said otherwise, `dp` from the world unless given.
struct Sizes {
    tp: u32,
    cp: u32,
    ep: u32,
    dp: Option<u32>,
    pp: u32,
}

impl Sizes {
    fn new() -> Sizes {
        Sizes {
            tp: 1,
            cp: 1,
            ep: 1,
            dp: None,
            pp: 1,
        }
    }

    fn set(&mut self, size: Size, v: u32) {
        match size {
            Size::Tp => self.tp = v,
            Size::Cp => self.cp = v,
            Size::Ep => self.ep = v,
            Size::Dp => self.dp = Some(v),
            Size::Pp => self.pp = v,
        }
    }

    /// The layout of a job of `world` ranks.
    fn layout(&self, order: &[Dim], world: u32) -> Result<ParallelConfig, ParallelConfigError> {
        let model = [self.tp, self.cp, self.pp]
            .iter()
            .try_fold(1u32, |acc, &v| acc.checked_mul(v))
            .ok_or_else(|| ParallelConfigError("tp x cp x pp overflows".into()))?;
        let dp = match self.dp {
            Some(dp) => dp,
            None if model > 0 && world.is_multiple_of(model) => world / model,
            None => {
                return Err(ParallelConfigError(format!(
                    "a job of {world} ranks cannot hold tp x cp x pp = {} x {} x {} = {model} ranks a whole number of times",
                    self.tp, self.cp, self.pp
                )))
            }
        };
        let c = ParallelConfig::with_order(self.tp, self.cp, self.ep, dp, self.pp, order)?;
        let total = u64::from(self.tp) * u64::from(self.cp) * u64::from(dp) * u64::from(self.pp);
        if total != u64::from(world) {
            return Err(ParallelConfigError(format!(
                "tp x cp x dp x pp = {total}, but the job has {world} ranks"
            )));
        }
        Ok(c)
    }
}

fn size_value(key: &str, v: &str) -> Result<u32, ParallelConfigError> {
    match v.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ParallelConfigError(format!(
            "{key} {v:?}: expected a size of at least 1"
        ))),
    }
}

impl ParallelConfig {
    /// A layout stated as `tp=2,pp=4`, with `cp`, `ep` and `dp` optional (`dp` defaults
    /// to what the world leaves) and `order=tp-cp-ep-pp-dp` for an order other than
    /// Megatron's, for a job of `world` ranks.
    pub fn from_spec(spec: &str, world: u32) -> Result<ParallelConfig, ParallelConfigError> {
        let mut sizes = Sizes::new();
        let mut order = ParallelConfig::MEGATRON_ORDER.to_vec();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(ParallelConfigError(format!(
                    "{part:?} in {spec:?}: expected key=value (tp, cp, ep, dp, pp or order)"
                )));
            };
            let key = key.trim().to_ascii_lowercase();
            let size = match key.as_str() {
                "order" => {
                    order = ParallelConfig::parse_order(value)?;
                    continue;
                }
                "tp" => Size::Tp,
                "cp" => Size::Cp,
                "ep" => Size::Ep,
                "dp" => Size::Dp,
                "pp" => Size::Pp,
                other => {
                    return Err(ParallelConfigError(format!(
                        "unknown key {other:?} in {spec:?}: expected tp, cp, ep, dp, pp or order"
                    )))
                }
            };
            sizes.set(size, size_value(&key, value)?);
        }
        sizes.layout(&order, world)
    }

    /// The layout a training program's command line (`argv`, the program first) gives a
    /// job of `world` ranks: `None` when it names no parallel size; an error when the
    /// sizes it names do not fit the world.
    pub fn from_command_line(
        args: &[String],
        world: u32,
    ) -> Option<Result<ParallelConfig, ParallelConfigError>> {
        let mut sizes = Sizes::new();
        let mut named = false;
        let mut order = ParallelConfig::MEGATRON_ORDER.to_vec();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_str();
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v)),
                _ => (arg, None),
            };
            if flag == TP_PP_DP_FLAG {
                order = vec![Dim::Tp, Dim::Cp, Dim::Pp, Dim::Dp];
            } else if let Some(&(_, size)) = SIZE_FLAGS.iter().find(|(f, _)| *f == flag) {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        i += 1;
                        args.get(i).map(String::as_str).unwrap_or("")
                    }
                };
                match size_value(flag, value) {
                    Ok(v) => sizes.set(size, v),
                    Err(e) => return Some(Err(e)),
                }
                named = true;
            }
            i += 1;
        }
        named.then(|| sizes.layout(&order, world))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_stated_layout_is_read_and_checked_against_the_world() {
        /// tp, cp, dp, pp; or the error's words.
        type Want = Result<(u32, u32, u32, u32), &'static str>;
        let cases: Vec<(&str, u32, Want)> = vec![
            ("tp=2,pp=4", 16, Ok((2, 1, 2, 4))),
            ("TP=8, PP=2, cp=2", 64, Ok((8, 2, 2, 2))),
            ("tp=2,dp=4,pp=2", 16, Ok((2, 1, 4, 2))),
            ("pp=4", 4, Ok((1, 1, 1, 4))),
            ("", 8, Ok((1, 1, 8, 1))),
            ("tp=3", 16, Err("cannot hold")),
            ("tp=2,dp=2", 16, Err("but the job has 16 ranks")),
            ("tp=0", 16, Err("at least 1")),
            ("tp=two", 16, Err("at least 1")),
            ("tp", 16, Err("expected key=value")),
            ("mp=2", 16, Err("unknown key")),
            ("tp=2,ep=3", 16, Err("must divide dp")),
        ];
        for (spec, world, want) in cases {
            let got = ParallelConfig::from_spec(spec, world);
            match (got, want) {
                (Ok(c), Ok(w)) => assert_eq!((c.tp, c.cp, c.dp, c.pp), w, "{spec}"),
                (Err(e), Err(w)) => assert!(e.0.contains(w), "{spec}: {e}"),
                (got, want) => panic!("{spec}: {got:?}, expected {want:?}"),
            }
        }
        let c = ParallelConfig::from_spec("tp=2,pp=2,order=tp-pp-dp-cp", 8).unwrap();
        assert_eq!(c.order, [Dim::Tp, Dim::Pp, Dim::Dp, Dim::Cp]);
        assert_eq!(c.coords(2).pp, 1, "pipeline before data in this order");
    }

    #[test]
    fn the_sizes_a_training_program_takes_are_read_from_its_command_line() {
        let megatron = argv(
            "python -u pretrain_gpt.py --num-layers 32 --tensor-model-parallel-size 4 --pipeline-model-parallel-size=2 --micro-batch-size 1",
        );
        let c = ParallelConfig::from_command_line(&megatron, 64)
            .unwrap()
            .unwrap();
        assert_eq!((c.tp, c.cp, c.dp, c.pp), (4, 1, 8, 2));
        assert_eq!(c.order, ParallelConfig::MEGATRON_ORDER);
        assert_eq!(c.coords(4).dp, 1, "TP varies fastest, then DP");

        let mapped = argv(
            "python pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping --context-parallel-size 1",
        );
        let c = ParallelConfig::from_command_line(&mapped, 8)
            .unwrap()
            .unwrap();
        assert_eq!(
            c.coords(2).pp,
            1,
            "pipeline before data with --use-tp-pp-dp-mapping"
        );

        let titan = argv(
            "python -m torchtitan.train --job.config_file llama3_8b.toml --parallelism.tensor_parallel_degree 8 --parallelism.pipeline_parallel_degree=2",
        );
        let c = ParallelConfig::from_command_line(&titan, 32)
            .unwrap()
            .unwrap();
        assert_eq!((c.tp, c.dp, c.pp), (8, 2, 2));

        let moe = argv("train.py --tensor-model-parallel-size 2 --expert-model-parallel-size 4");
        let c = ParallelConfig::from_command_line(&moe, 16)
            .unwrap()
            .unwrap();
        assert_eq!((c.tp, c.ep, c.dp), (2, 4, 8));

        // Plain DDP names no size; a size that does not fit the world is an error, as is
        // a flag with no value.
        assert!(ParallelConfig::from_command_line(&argv("python train.py --lr 3e-4"), 8).is_none());
        let e = ParallelConfig::from_command_line(&argv("x --tensor-model-parallel-size 3"), 8);
        assert!(e.unwrap().unwrap_err().0.contains("cannot hold"));
        let e = ParallelConfig::from_command_line(&argv("x --tensor-model-parallel-size"), 8);
        assert!(e.unwrap().unwrap_err().0.contains("at least 1"));
        // A value that only looks like a flag's is not read as one.
        let other = argv("x --name=--tensor-model-parallel-size --seed 4");
        assert!(ParallelConfig::from_command_line(&other, 8).is_none());
    }
}
