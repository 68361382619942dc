use super::classes::quartiles;
use super::*;

#[test]
fn embedded_model_is_consistent() {
    let m = model();
    assert_eq!(m.format, "flare-abnormal-op-forest");
    assert_eq!(m.features, FEATURE_NAMES.map(String::from).to_vec());
    assert_eq!(m.forest.n_features, N_FEATURES);
    assert_eq!(m.drift_features, DRIFT_FEATURES.to_vec());
    assert!(!m.forest.trees.is_empty());
    for t in &m.forest.trees {
        for n in &t.nodes {
            assert!(n.0 == crate::forest::LEAF || (n.0 as usize) < N_FEATURES);
            assert!((n.2 as usize) < t.nodes.len() && (n.3 as usize) < t.nodes.len());
        }
    }
}

#[test]
fn quartiles_interpolate() {
    assert_eq!(quartiles(&mut [4.0, 1.0, 3.0, 2.0, 5.0]), (2.0, 3.0, 4.0));
    assert_eq!(quartiles(&mut []), (0.0, 0.0, 0.0));
    assert_eq!(
        AbnormalMethod::parse("three-sigma"),
        Some(AbnormalMethod::ThreeSigma)
    );
    assert_eq!(
        AbnormalMethod::parse("forest"),
        Some(AbnormalMethod::Forest)
    );
    assert_eq!(AbnormalMethod::parse("svm"), None);
}
