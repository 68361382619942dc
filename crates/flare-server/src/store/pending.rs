//! Windows stored but not analysed yet: what a server keeps of them, and what the
//! database says of them, for a server that starts after another stopped and for
//! servers sharing one database, so that each job's windows are analysed in order
//! whichever server stored them.

use super::db::{params, Db};
use super::{to_i64, StoreError};
use flare_model::WindowSummary;
use std::collections::BTreeMap;

/// Time without a new summary after which a window that does not hold every rank is
/// analysed as it is (a node that died, a rank without an agent).
pub const ANALYSIS_DELAY_NS: u64 = 1_000_000_000;

/// Summaries received this long before a server starts are looked at for windows left
/// pending by the server before it (stopped or crashed between storing and analysing).
const RECOVER_NS: u64 = 3_600_000_000_000;

/// How many windows before the one it analyses a server sharing its database looks back
/// for windows another server stored and left unanalysed. A summary delivered again after
/// a server died with it comes one `ACK_WAIT` (10 s) late: a window or two.
pub(super) const ORDER_LOOKBACK: u64 = 32;

/// A window stored but not analysed since.
#[derive(Clone, Debug, Default)]
pub(super) struct Pending {
    /// When its latest summary came.
    pub(super) last_post_ns: u64,
    /// Ranks per node of the summaries this server stored since the window's ranks
    /// were last counted (a re-sent one counts once).
    nodes: BTreeMap<String, usize>,
    /// Ranks of the other nodes' stored summaries, when last counted.
    base_ranks: usize,
    /// The job's world size as its summaries declare it.
    world_size: u32,
}

impl Pending {
    /// One more summary; `stored_ranks`: the window's ranks as now stored, where they
    /// were counted (this one included).
    pub(super) fn posted(&mut self, s: &WindowSummary, stored_ranks: Option<usize>, now_ns: u64) {
        self.last_post_ns = now_ns;
        self.world_size = self.world_size.max(s.world_size);
        if let Some(stored) = stored_ranks {
            self.nodes.clear();
            self.base_ranks = stored.saturating_sub(s.ranks.len());
        }
        self.nodes.insert(s.node.clone(), s.ranks.len());
    }

    /// The window's ranks stored, as this server counts them.
    fn ranks(&self) -> usize {
        self.base_ranks + self.nodes.values().sum::<usize>()
    }

    /// Every rank is in, or no summary came for `delay_ns`.
    pub(super) fn due(&self, now_ns: u64, delay_ns: u64) -> bool {
        (self.world_size > 0 && self.ranks() >= self.world_size as usize)
            || now_ns.saturating_sub(self.last_post_ns) >= delay_ns
    }

    pub(super) fn arriving(&self, window: u64) -> ArrivingWindow {
        ArrivingWindow {
            window,
            ranks: self.ranks(),
            world_size: self.world_size,
        }
    }
}

/// A window whose summaries are coming in, not analysed yet: what the dashboard says of
/// it while it shows the windows analysed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrivingWindow {
    pub window: u64,
    /// Its ranks stored so far.
    pub ranks: usize,
    pub world_size: u32,
}

/// Per job, its pending windows.
pub(super) type PendingJobs = BTreeMap<String, BTreeMap<u64, Pending>>;

/// The windows with summaries received in the last [`RECOVER_NS`] after their diagnosis
/// (or with none): pending, as the server that stored them left them.
pub(super) fn recover(db: &Db, now_ns: u64) -> Result<PendingJobs, StoreError> {
    let since = i64::try_from(now_ns.saturating_sub(RECOVER_NS)).unwrap_or(i64::MAX);
    unanalysed(db, "s.received_unix_ns >= ?1", params![since])
}

/// The job's windows `from..=to` with summaries stored after their diagnosis (or with
/// none), by whichever server.
pub(super) fn unanalysed_windows(
    db: &Db,
    job_id: &str,
    from: u64,
    to: u64,
) -> Result<BTreeMap<u64, Pending>, StoreError> {
    let mut jobs = unanalysed(
        db,
        "s.job_id = ?1 AND s.window_index BETWEEN ?2 AND ?3",
        params![job_id, to_i64("window", from)?, to_i64("window", to)?],
    )?;
    Ok(jobs.remove(job_id).unwrap_or_default())
}

/// The windows of stored summaries matching `filter` (over `summaries s`) whose latest
/// summary came after their diagnosis was made, or that have none.
fn unanalysed(
    db: &Db,
    filter: &str,
    params: &[super::db::Param],
) -> Result<PendingJobs, StoreError> {
    let rows = db.query(
        &format!(
            "SELECT s.job_id, s.window_index, max(s.received_unix_ns), CAST(SUM(s.ranks) AS BIGINT),
                    max(j.world_size), max(f.created_unix_ns)
             FROM summaries s
             JOIN jobs j ON j.job_id = s.job_id
             LEFT JOIN findings f ON f.job_id = s.job_id AND f.window_index = s.window_index
             WHERE {filter}
             GROUP BY s.job_id, s.window_index"
        ),
        params,
    )?;
    let mut out = PendingJobs::new();
    for mut r in rows {
        let (last_post_ns, analysed) = (r.uint(2)?, r.opt_int(5)?);
        if analysed.is_some_and(|a| a.max(0) as u64 >= last_post_ns) {
            continue;
        }
        let pending = Pending {
            last_post_ns,
            nodes: BTreeMap::new(),
            base_ranks: r.uint(3)? as usize,
            world_size: u32::try_from(r.uint(4)?).unwrap_or(u32::MAX),
        };
        out.entry(r.text(0)?)
            .or_default()
            .insert(r.uint(1)?, pending);
    }
    Ok(out)
}
