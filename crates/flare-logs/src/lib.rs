//! Online log template mining for Flare: a Drain-style fixed-depth parse tree over lines
//! whose variables (numbers, ids, addresses, paths, `key=value` values, sizes...) are
//! masked by general rules, one pass, bounded memory; and the grouping-accuracy scorer
//! used to measure it on LogHub. Pure computation: lines in, template ids out.

pub mod csv;
pub mod header;
pub mod line;
pub mod mask;
pub mod miner;
pub mod score;
mod tree;

pub use miner::{Config, ConfigError, Miner, TemplateId, TemplateView};
pub use score::grouping_accuracy;
