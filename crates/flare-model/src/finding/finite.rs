//! Serde for `f64` fields that may hold NaN or infinity: JSON has neither, so they are
//! written as `null` (as serde_json does anyway) and `null` reads back as NaN, which makes
//! the document round-trip.

use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_none()
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}
