//! Who may do what: three kinds of token, and a bound on how fast one address posts.
//!
//! Agents hold an ingest token: it posts summaries and reads nothing, so a node that is
//! compromised cannot read other jobs' stacks and log lines. People and dashboards hold a
//! read token: it reads everything and writes nothing. The operator's token does both and
//! silences alerts. Tokens come only in the `Authorization` header, never in a URL (URLs
//! end up in proxy logs, shell history and `Referer` headers).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Everything.
    Operator,
    /// Post summaries.
    Ingest,
    /// The API's reads and the dashboard.
    Read,
}

/// What a route needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    Ingest,
    Read,
    Operate,
}

impl Role {
    pub(crate) fn may(self, need: Need) -> bool {
        matches!(
            (self, need),
            (Role::Operator, _) | (Role::Ingest, Need::Ingest) | (Role::Read, Need::Read)
        )
    }
}

impl Need {
    /// Why a token of another role is refused.
    pub(crate) fn refusal(self) -> &'static str {
        match self {
            Need::Ingest => {
                "this token may not post summaries: use an ingest token or the operator's"
            }
            Need::Read => "this token may not read: use a read token or the operator's",
            Need::Operate => "only the operator's token (--token) may change silences",
        }
    }
}

/// The configured tokens with their roles.
pub(crate) struct Tokens(Vec<(Box<[u8]>, Role)>);

impl Tokens {
    pub(crate) fn new(operator: &str, ingest: &[String], read: &[String]) -> Tokens {
        let mut v = vec![(operator.trim().as_bytes().into(), Role::Operator)];
        v.extend(
            ingest
                .iter()
                .map(|t| (t.trim().as_bytes().into(), Role::Ingest)),
        );
        v.extend(
            read.iter()
                .map(|t| (t.trim().as_bytes().into(), Role::Read)),
        );
        Tokens(v)
    }

    /// The role of a presented token. Every configured token is compared in full, so the
    /// time taken does not tell which one came close.
    pub(crate) fn role(&self, presented: &[u8]) -> Option<Role> {
        let mut found = None;
        for (token, role) in &self.0 {
            if constant_time_eq(presented, token) {
                found = Some(*role);
            }
        }
        found
    }
}

/// Compares without stopping at the first differing byte, so response time does not tell
/// an attacker how much of a guess was right. The length is not hidden: it says nothing
/// about the token's bytes.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Token buckets per client address (none kept when the rate is 0: no bound).
pub(crate) struct RateLimiter {
    per_s: f64,
    burst: f64,
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

/// Addresses tracked before full buckets are forgotten (a full bucket is the state of an
/// address never seen).
const TRACKED: usize = 65_536;

impl RateLimiter {
    pub(crate) fn new(rate: crate::IngestRate) -> Self {
        RateLimiter {
            per_s: rate.per_s,
            burst: f64::from(rate.burst),
            buckets: HashMap::new(),
        }
    }

    /// Takes one post from `ip`'s bucket at `now`; when empty, the seconds until it
    /// holds one again.
    pub(crate) fn take(&mut self, ip: IpAddr, now: Instant) -> Result<(), f64> {
        if self.per_s == 0.0 {
            return Ok(());
        }
        if self.buckets.len() >= TRACKED && !self.buckets.contains_key(&ip) {
            let (per_s, burst) = (self.per_s, self.burst);
            self.buckets.retain(|_, (level, at)| {
                *level + now.duration_since(*at).as_secs_f64() * per_s < burst
            });
        }
        let (level, at) = self.buckets.entry(ip).or_insert((self.burst, now));
        *level = (*level + now.duration_since(*at).as_secs_f64() * self.per_s).min(self.burst);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            Ok(())
        } else {
            Err((1.0 - *level) / self.per_s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret1", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }

    #[test]
    fn roles_table() {
        let t = Tokens::new("op", &["agent".into()], &["viewer".into()]);
        let cases = [
            ("op", Need::Ingest, true),
            ("op", Need::Read, true),
            ("op", Need::Operate, true),
            ("agent", Need::Ingest, true),
            ("agent", Need::Read, false),
            ("agent", Need::Operate, false),
            ("viewer", Need::Read, true),
            ("viewer", Need::Ingest, false),
            ("viewer", Need::Operate, false),
        ];
        for (token, need, allowed) in cases {
            let role = t.role(token.as_bytes()).unwrap();
            assert_eq!(role.may(need), allowed, "{token} {need:?}");
        }
        assert_eq!(t.role(b"nobody"), None);
    }

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let mut r = RateLimiter::new(crate::IngestRate {
            per_s: 2.0,
            burst: 3,
        });
        let (ip, other): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..3 {
            r.take(ip, t0).unwrap();
        }
        let wait = r.take(ip, t0).unwrap_err();
        assert!((wait - 0.5).abs() < 1e-9, "{wait}");
        // Another address has its own bucket.
        r.take(other, t0).unwrap();
        // Half a second later, one post again; not two.
        let t1 = t0 + Duration::from_millis(500);
        r.take(ip, t1).unwrap();
        assert!(r.take(ip, t1).is_err());
        // Rate 0: no bound, nothing kept.
        let mut off = RateLimiter::new(crate::IngestRate {
            per_s: 0.0,
            burst: 0,
        });
        for _ in 0..10_000 {
            off.take(ip, t0).unwrap();
        }
        assert!(off.buckets.is_empty());
    }
}
