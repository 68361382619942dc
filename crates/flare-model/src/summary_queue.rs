//! Where window summaries travel through NATS JetStream, agreed by the agents that
//! publish them and the servers that consume them.

/// The stream summaries are published to.
pub const STREAM: &str = "FLARE_SUMMARIES";
/// Summaries go to `<SUBJECT_PREFIX>.<job>` (see [`subject`]).
pub const SUBJECT_PREFIX: &str = "flare.summaries";

/// The subject a job's summaries are published to: the job id with what NATS subjects
/// cannot hold (`.`, `*`, `>`, spaces, controls, anything not ASCII) replaced by `_`.
/// The summary itself carries the exact id.
pub fn subject(job_id: &str) -> String {
    let token: String = job_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{SUBJECT_PREFIX}.{}",
        if token.is_empty() { "_" } else { &token }
    )
}

/// The message id that lets the stream drop a summary published twice: one summary per
/// job, window and node.
pub fn message_id(job_id: &str, window: u64, node: &str) -> String {
    format!("{job_id}/{window}/{node}")
}

/// A NATS or HTTP URL for logs and errors: the user part's password replaced by `***`,
/// and a user part without one (a NATS token) hidden whole.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let hidden = match user_info.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_string(),
            };
            format!("{scheme}://{hidden}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_hold_any_job_id_as_one_token() {
        for (job, want) in [
            ("llama-70b", "flare.summaries.llama-70b"),
            ("slurm.1234", "flare.summaries.slurm_1234"),
            ("a b*c>d", "flare.summaries.a_b_c_d"),
            ("", "flare.summaries._"),
            ("\u{30b8}\u{30e7}\u{30d6}", "flare.summaries.___"),
        ] {
            assert_eq!(subject(job), want);
        }
        assert_eq!(message_id("j", 7, "host-1"), "j/7/host-1");
    }
}
