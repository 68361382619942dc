//! Flare's HTML report.
//!
//! [`render_html`] turns a diagnosis into one self-contained HTML file: no external resources,
//! no JavaScript, inline CSS, and hand-written inline SVG charts ([`line_chart_svg`] for the
//! job's iteration times, [`heatmap_svg`] for a per-rank, per-iteration metric). Hover details
//! use SVG `<title>` elements, which browsers show as tooltips without any script.
//!
//! Every string that may come from a trace (titles, rank and element names, evidence details,
//! summaries) is escaped with [`escape`] before it is written.
//!
//! ```
//! use flare_model::{FindingsDocument, JobSummary};
//! use flare_report::{render_html, Heatmap, ReportInput};
//!
//! let document = FindingsDocument::new(JobSummary::default(), vec![], true);
//! let input = ReportInput {
//!     title: "Flare diagnosis — demo".into(),
//!     subtitle: "simulator · 2 ranks · 3 iterations".into(),
//!     iteration_times_ms: vec![(0, 101.0), (1, 99.5), (2, 140.2)],
//!     flagged_iterations: vec![2],
//!     heatmap: Heatmap {
//!         title: "Self time excess per rank and iteration (%)".into(),
//!         row_label: "rank".into(),
//!         rows: vec!["0".into(), "1".into()],
//!         columns: vec!["0".into(), "1".into(), "2".into()],
//!         values: vec![0.1, 0.3, f64::NAN, 0.2, 0.0, 38.0],
//!         unit: "%".into(),
//!         highlight_rows: vec![1],
//!         column_label: "iteration".into(),
//!     },
//!     layout: None,
//!     step: flare_report::Step::Iteration,
//!     document: &document,
//! };
//! let html = render_html(&input);
//! assert!(html.contains("No anomaly found: the job looks healthy"));
//! assert!(!html.contains("<script"));
//! ```

#![warn(missing_docs)]

mod comparison;
mod flame;
mod heatmap;
mod html;
mod layout;
mod line_chart;
pub mod timeline;
mod util;

pub use comparison::render_comparison_html;
pub use flame::{flame_svg, RankStack};
pub use heatmap::heatmap_svg;
pub use html::{render_html, render_sections, STYLE};
pub use layout::{layout_heatmap, layout_text};
pub use line_chart::{line_chart_svg, line_chart_svg_of};
pub use util::escape;

/// Everything the report shows.
#[derive(Clone, Debug)]
pub struct ReportInput<'a> {
    /// Page title and main heading, e.g. `Flare diagnosis — sim-1024 (TP8 x PP4 x DP32)`.
    pub title: String,
    /// One line under the title: source, ranks, iterations, time taken.
    pub subtitle: String,
    /// Job-level iteration durations: `(iteration, duration in ms)`.
    pub iteration_times_ms: Vec<(u32, f64)>,
    /// Irregular iterations, marked in red on the iteration-time chart.
    pub flagged_iterations: Vec<u32>,
    /// The per-rank heatmap.
    pub heatmap: Heatmap,
    /// The same metric per rank laid out by the job's parallel groups
    /// ([`layout_heatmap`]), where the job states them.
    pub layout: Option<Heatmap>,
    /// What the columns and points are: a trace's iterations, or a live job's windows.
    pub step: Step,
    /// What the engine concluded: the verdict, the findings (shown most severe, then most
    /// confident, first), skipped detectors, and the per-rank time breakdown (the section
    /// is left out when it is empty).
    pub document: &'a flare_model::FindingsDocument,
}

/// What the report's timeline is made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Step {
    /// A trace's training iterations.
    #[default]
    Iteration,
    /// A live job's time windows (each the mean of the iterations in it).
    Window,
}

impl Step {
    /// The word for one step.
    pub fn word(self) -> &'static str {
        match self {
            Step::Iteration => "iteration",
            Step::Window => "window",
        }
    }
}

/// A matrix of one metric per row (rank or group of ranks) and column (iteration).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Heatmap {
    /// Shown above the chart, e.g. `Self time excess per rank and iteration (%)`.
    pub title: String,
    /// What a row is, e.g. `rank`; bare numeric row names are shown as `rank 12` in tooltips.
    pub row_label: String,
    /// Row names. For large jobs the caller may pass aggregated rows (`ranks 0-7`).
    pub rows: Vec<String>,
    /// Column names: iteration (or window) numbers as strings.
    pub columns: Vec<String>,
    /// Row-major `rows.len() x columns.len()` values; NaN (or a missing value) means no data.
    pub values: Vec<f64>,
    /// Unit of the values, e.g. `%` or `ms`.
    pub unit: String,
    /// Indices into `rows` of rows that contain a culprit; they are outlined and labelled.
    pub highlight_rows: Vec<usize>,
    /// What a column is (`iteration`, `window`, `DP rank`): the x axis's title and the
    /// tooltips' word; empty means `iteration`.
    pub column_label: String,
}

impl Heatmap {
    /// The word for one column.
    pub fn column_word(&self) -> &str {
        if self.column_label.is_empty() {
            "iteration"
        } else {
            &self.column_label
        }
    }
}

#[cfg(test)]
mod tests;
