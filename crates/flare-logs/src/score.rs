//! Grouping accuracy (GA), the usual LogHub figure: a line is correct when the set of
//! lines its parser group holds is exactly the set of lines of its true event.

use std::collections::HashMap;
use std::hash::Hash;

/// GA of `predicted` against `truth` (one label per line, same order). 1.0 for no lines.
///
/// # Panics
/// When the two slices differ in length: the caller paired them wrongly.
pub fn grouping_accuracy<P: Eq + Hash, T: Eq + Hash>(predicted: &[P], truth: &[T]) -> f64 {
    assert_eq!(
        predicted.len(),
        truth.len(),
        "one label per line on each side"
    );
    if predicted.is_empty() {
        return 1.0;
    }
    let mut pred_size: HashMap<&P, usize> = HashMap::new();
    let mut truth_size: HashMap<&T, usize> = HashMap::new();
    let mut pair: HashMap<(&P, &T), usize> = HashMap::new();
    for (p, t) in predicted.iter().zip(truth) {
        *pred_size.entry(p).or_default() += 1;
        *truth_size.entry(t).or_default() += 1;
        *pair.entry((p, t)).or_default() += 1;
    }
    // A group is right when one true event fills it whole and it holds that event whole.
    let correct: usize = pair
        .iter()
        .filter(|((p, t), n)| pred_size[p] == **n && truth_size[t] == **n)
        .map(|(_, n)| n)
        .sum();
    correct as f64 / predicted.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_groups_only_count() {
        // truth: A A B B C ; predicted: 1 1 2 2 2 -> A's group right (2 lines), the
        // group holding B and C is wrong for all three.
        let truth = ["A", "A", "B", "B", "C"];
        assert_eq!(grouping_accuracy(&[1, 1, 2, 2, 2], &truth), 0.4);
        // labels need not match, only the partition
        assert_eq!(grouping_accuracy(&[7, 7, 3, 3, 5], &truth), 1.0);
        // splitting a true group is as wrong as merging two
        assert_eq!(grouping_accuracy(&[1, 2, 3, 3, 4], &truth), 0.6);
        assert_eq!(grouping_accuracy::<u8, u8>(&[], &[]), 1.0);
    }
}
