//! A collective timeout the job set short. PyTorch's process groups time out after 10
//! minutes (NCCL, in recent releases) or 30 (earlier ones, and Gloo); a job that passes a
//! shorter `timeout=` to `init_process_group` turns any longer stretch one rank spends
//! alone (rank 0's evaluation, a checkpoint write, a dataset's preparation) into what
//! looks like a hang to the others, with no fault anywhere. The watchdog's lines say the
//! timeout (`WorkNCCL(..., Timeout(ms)=60000)`).

use crate::collect::Hit;
use crate::signatures::Role;

/// The shortest timeout PyTorch has set by default, ms (NCCL's in recent releases).
const DEFAULT_MS: u64 = 600_000;

/// The timeout the effect lines state (the longest, if they differ), when every one they
/// state is below PyTorch's defaults; none when no line states one.
pub(super) fn short_collective_timeout(hits: &[Hit]) -> Option<u64> {
    let longest = hits
        .iter()
        .filter(|h| h.reading.role == Role::Cascade)
        .filter_map(|h| stated_ms(&h.text))
        .max()?;
    (longest < DEFAULT_MS).then_some(longest)
}

/// `Timeout(ms)=N` in a watchdog's line.
fn stated_ms(text: &str) -> Option<u64> {
    const KEY: &str = "Timeout(ms)=";
    let at = text.find(KEY)? + KEY.len();
    let digits = &text[at..];
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// A duration in ms as a person says it (`60 s`, `5 min`).
pub(super) fn describe_ms(ms: u64) -> String {
    if ms > 60_000 && ms.is_multiple_of(60_000) {
        format!("{} min", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_read_from_the_watchdogs_lines() {
        let cases = [
            ("[E ProcessGroupNCCL.cpp:567] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=60000) ran for 69479 milliseconds before timing out.", Some(60_000)),
            ("[Rank 3] Work WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=300000) timed out in blocking wait.", Some(300_000)),
            ("WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600060 milliseconds", Some(600_000)),
            ("Timeout(ms)=", None),
            ("connection reset by peer", None),
        ];
        for (line, want) in cases {
            assert_eq!(stated_ms(line), want, "{line}");
        }
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        for (ms, want) in [
            (60_000, "60 s"),
            (300_000, "5 min"),
            (1_500, "1.5 s"),
            (45_000, "45 s"),
        ] {
            assert_eq!(describe_ms(ms), want);
        }
    }
}
