//! The event activation mask: which NCCL event types the plugin asks NCCL for.

use crate::abi::event::*;

/// What the plugin records when no variable says otherwise: the operations, their GPU
/// timing per channel (and, v7, per kernel phase: sync waits apart from work), and the
/// proxy operations (network progress per peer), which is what diagnosis needs. Proxy steps, proxy control and API events cost more and are opt-in.
pub const DEFAULT_MASK: u64 = GROUP | COLL | P2P | PROXY_OP | KERNEL_CH | CE_COLL | KERNEL_PHASE;

/// Event types a profiler API version can carry.
pub fn supported(version: u8) -> u64 {
    match version {
        1 | 2 => GROUP | COLL | P2P | PROXY_OP | PROXY_STEP | PROXY_CTRL,
        3 | 4 => GROUP | COLL | P2P | PROXY_OP | PROXY_STEP | PROXY_CTRL | KERNEL_CH | NET_PLUGIN,
        5 => (1 << 12) - 1,
        6 => (1 << 15) - 1,
        _ => (1 << 16) - 1,
    }
}

const NAMES: [(&str, u64); 16] = [
    ("group", GROUP),
    ("coll", COLL),
    ("p2p", P2P),
    ("proxyop", PROXY_OP),
    ("proxystep", PROXY_STEP),
    ("proxyctrl", PROXY_CTRL),
    ("kernelch", KERNEL_CH),
    ("netplugin", NET_PLUGIN),
    ("groupapi", GROUP_API),
    ("collapi", COLL_API),
    ("p2papi", P2P_API),
    ("kernellaunch", KERNEL_LAUNCH),
    ("cecoll", CE_COLL),
    ("cesync", CE_SYNC),
    ("cebatch", CE_BATCH),
    ("kernelphase", KERNEL_PHASE),
];

/// Parses a mask: a number (decimal, as NCCL's example plugin reads it, or `0x` hex) or
/// event names joined by `,`, `|` or `+` (`coll,p2p,kernel_ch`; also `all`, `default`,
/// `none`; case and `_` ignored).
pub fn parse(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty".into());
    }
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).map_err(|e| format!("{t:?}: {e}"));
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<u64>().map_err(|e| format!("{t:?}: {e}"));
    }
    let mut mask = 0;
    for word in t.split([',', '|', '+']) {
        let w: String = word
            .trim()
            .chars()
            .filter(|&c| c != '_' && c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        mask |= match w.as_str() {
            "all" => u64::MAX,
            "default" => DEFAULT_MASK,
            "none" => 0,
            _ => NAMES
                .iter()
                .find(|(n, _)| *n == w)
                .map(|(_, bit)| *bit)
                .ok_or_else(|| format!("unknown event type {:?} in {t:?}", word.trim()))?,
        };
    }
    Ok(mask)
}

/// The requested mask: `FLARE_NCCL_EVENT_MASK`, else `NCCL_PROFILE_EVENT_MASK` (the
/// variable of NCCL's example plugin), else [`DEFAULT_MASK`]; limited to what `version`
/// supports. An unparsable value is an error, naming the variable.
pub fn from_lookup(get: impl Fn(&str) -> Option<String>, version: u8) -> Result<u64, String> {
    let requested = ["FLARE_NCCL_EVENT_MASK", "NCCL_PROFILE_EVENT_MASK"]
        .iter()
        .find_map(|k| get(k).map(|v| (k, v)));
    let mask = match requested {
        None => DEFAULT_MASK,
        Some((k, v)) => parse(&v).map_err(|e| format!("{k}={v:?} is not an event mask: {e}"))?,
    };
    Ok(mask & supported(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn masks_parse_as_numbers_or_names() {
        assert_eq!(parse("18"), Ok(COLL | PROXY_STEP));
        assert_eq!(parse("0x12"), Ok(COLL | PROXY_STEP));
        assert_eq!(parse("coll, Proxy_Step"), Ok(COLL | PROXY_STEP));
        assert_eq!(parse("default|net_plugin"), Ok(DEFAULT_MASK | NET_PLUGIN));
        assert_eq!(parse("none"), Ok(0));
        assert!(parse("coll,banana").unwrap_err().contains("banana"));
        assert!(parse("").is_err());
        assert!(parse("-3").is_err());
    }

    #[test]
    fn the_mask_comes_from_the_environment_and_the_version() {
        assert_eq!(from_lookup(env(&[]), 7), Ok(DEFAULT_MASK));
        assert_eq!(from_lookup(env(&[]), 6), Ok(DEFAULT_MASK & !KERNEL_PHASE));
        assert_eq!(from_lookup(env(&[]), 1), Ok(GROUP | COLL | P2P | PROXY_OP));
        assert_eq!(
            from_lookup(env(&[("NCCL_PROFILE_EVENT_MASK", "4095")]), 4),
            Ok(0xFF)
        );
        assert_eq!(
            from_lookup(
                env(&[
                    ("NCCL_PROFILE_EVENT_MASK", "2"),
                    ("FLARE_NCCL_EVENT_MASK", "4")
                ]),
                6
            ),
            Ok(P2P)
        );
        let e = from_lookup(env(&[("NCCL_PROFILE_EVENT_MASK", "lots")]), 6).unwrap_err();
        assert!(e.contains("NCCL_PROFILE_EVENT_MASK=\"lots\""), "{e}");
    }
}
