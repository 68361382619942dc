//! The miner must take any text: no panic, and it is deterministic.

use flare_logs::{header::strip_header, Config, Miner};
use proptest::prelude::*;

fn small() -> Config {
    // small caps so the cap and fold paths run too
    Config {
        max_clusters: 8,
        max_tokens: 6,
        max_children: 3,
        ..Config::default()
    }
}

proptest! {
    #[test]
    fn any_lines_never_panic_and_repeat_to_the_same_id(
        lines in prop::collection::vec(
            prop_oneof![
                any::<String>(),
                "[ a-z0-9=:/._\\-\t]{0,80}",
                Just(String::new()),
                Just(" \t  ".to_string()),
                "\\PC{200,400}",
            ],
            1..40,
        )
    ) {
        for cfg in [Config::default(), small()] {
            let mut a = Miner::new(cfg.clone()).unwrap();
            let mut b = Miner::new(cfg).unwrap();
            for l in &lines {
                let id = a.add(l);
                // the same line again, at once, maps to the same template
                prop_assert_eq!(a.add(l), id, "line {:?}", l);
                prop_assert!(a.template(id).is_some());
                // another miner fed the same stream agrees (no hidden state)
                prop_assert_eq!(b.add(l), id);
                prop_assert_eq!(b.add(l), id);
                let _ = strip_header(l);
            }
        }
    }
}

#[test]
fn a_very_long_line_is_bounded() {
    let line = "tok ".repeat(100_000) + "end 42";
    let mut m = Miner::new(Config::default()).unwrap();
    let id = m.add(&line);
    assert_eq!(m.add(&line), id);
    assert!(m.template(id).unwrap().tokens.len() <= Config::default().max_tokens);
}
