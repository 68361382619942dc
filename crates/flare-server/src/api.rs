//! HTTP routes: authentication, ingest, and the read API.

use crate::alerts::Notifier;
use crate::auth::{Need, RateLimiter, Tokens};
use crate::dashboard;
use crate::ingest::{self, Encoding, IngestError};
use crate::store::{Store, StoreError, StoredSummaries};
use crate::{unix_ns, ServerConfig};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use flare_model::FindingsDocument;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, error, warn};

/// Windows of history the findings document carries.
const HISTORY_WINDOWS: usize = 50;
/// Windows the dashboard's charts show.
const DASHBOARD_WINDOWS: usize = 120;
/// Longest a request may take, body upload included: a client that trickles its body
/// must not hold a connection and its buffer forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub(crate) struct AppState {
    store: Arc<Mutex<Store>>,
    tokens: Arc<Tokens>,
    limiter: Arc<Mutex<RateLimiter>>,
    max_body_bytes: usize,
    /// Sends alert events to the webhooks; none without webhooks.
    notifier: Option<Arc<Notifier>>,
    /// This server's claim on the database, held while any request may still use it.
    _lock: Arc<Option<crate::files::ServerLock>>,
    /// The Perfetto UI the dashboard opens timelines in (as `Server::bind` checked it).
    perfetto_ui: Arc<str>,
}

impl AppState {
    pub(crate) fn new(
        store: Store,
        lock: Option<crate::files::ServerLock>,
        cfg: &ServerConfig,
    ) -> Self {
        AppState {
            store: Arc::new(Mutex::new(store)),
            tokens: Arc::new(Tokens::new(
                &cfg.token,
                &cfg.ingest_tokens,
                &cfg.read_tokens,
            )),
            limiter: Arc::new(Mutex::new(RateLimiter::new(cfg.ingest_rate))),
            max_body_bytes: cfg.max_body_bytes,
            notifier: (!cfg.webhooks.is_empty())
                .then(|| Arc::new(Notifier::start(cfg.webhooks.clone()))),
            _lock: Arc::new(lock),
            perfetto_ui: cfg.perfetto_ui.as_str().into(),
        }
    }

    /// One retention pass.
    pub(crate) async fn prune(
        &self,
        policy: crate::retention::Retention,
    ) -> Result<crate::retention::Pruned, ApiError> {
        self.with_store(move |s| s.prune(policy, unix_ns())).await
    }

    /// Decodes, checks and stores one summary (an HTTP post's body, or a message from
    /// the queue) and sends the alerts of what it analysed.
    pub(crate) async fn ingest(
        &self,
        body: impl AsRef<[u8]> + Send + 'static,
        encoding: Encoding,
    ) -> Result<crate::store::Ingested, ApiError> {
        let limit = self.max_body_bytes;
        let prepared =
            tokio::task::spawn_blocking(move || ingest::prepare(body.as_ref(), encoding, limit))
                .await
                .map_err(|e| ApiError::internal(format!("decoding task failed: {e}")))??;
        let (node, ranks) = (prepared.summary.node.clone(), prepared.summary.ranks.len());
        let now = unix_ns();
        let mut done = self
            .with_store(move |s| s.ingest(prepared.summary, prepared.compressed, now))
            .await?;
        debug!(
            job = %done.job_id,
            window = done.window,
            %node,
            ranks,
            findings = done.findings,
            alerts = done.alerts.len(),
            "summary stored"
        );
        self.notify(std::mem::take(&mut done.alerts));
        Ok(done)
    }

    /// Analyses the windows whose analysis is due (see [`Store::ingest`]) and sends
    /// their alerts.
    pub(crate) async fn analyse_due(&self) -> Result<(), ApiError> {
        let alerts = self.with_store(|s| s.analyse_due(unix_ns())).await?;
        self.notify(alerts);
        Ok(())
    }

    fn notify(&self, alerts: Vec<crate::alerts::AlertEvent>) {
        if let Some(n) = &self.notifier {
            if !alerts.is_empty() {
                n.send(alerts);
            }
        }
    }

    /// Runs `f` on the store once the pending windows of `job` (of every job when
    /// `None`) are analysed: a read sees every summary stored before it.
    async fn read<R, F>(&self, job: Option<String>, f: F) -> Result<R, ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Store) -> Result<R, StoreError> + Send + 'static,
    {
        let (alerts, out) = self
            .with_store(move |s| {
                let alerts = s.settle(job.as_deref(), unix_ns())?;
                Ok((alerts, f(s)?))
            })
            .await?;
        self.notify(alerts);
        Ok(out)
    }

    /// Runs `f` on the store as the server has analysed it: a window still arriving is
    /// not analysed for the read (the dashboard polls every few seconds; a large job's
    /// window would be analysed half-arrived on each poll), the analysis ticker does it
    /// once it is due.
    async fn read_as_analysed<R, F>(&self, f: F) -> Result<R, ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Store) -> Result<R, StoreError> + Send + 'static,
    {
        self.with_store(f).await
    }

    /// Runs `f` on the store on a blocking thread.
    async fn with_store<R, F>(&self, f: F) -> Result<R, ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Store) -> Result<R, StoreError> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock leaves nothing half-done: the transaction
            // rolls back on unwind and the cache entry in use was taken out of the cache.
            let mut guard = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| ApiError::internal(format!("storage task failed: {e}")))?
        .map_err(ApiError::from)
    }
}

pub(crate) fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    let guard = |need| middleware::from_fn_with_state((state.clone(), need), require_token);
    let ingest = Router::new()
        .route("/api/v1/summaries", post(post_summary))
        .route_layer(middleware::from_fn_with_state(state.clone(), rate_limit))
        .route_layer(guard(Need::Ingest));
    let read = Router::new()
        .route("/api/jobs", get(list_jobs))
        .route("/api/jobs/{id}/findings", get(job_findings))
        .route("/api/jobs/{id}/summaries", get(job_summaries))
        .route("/api/jobs/{id}/timeline", get(job_timeline))
        .route("/api/alerts", get(list_alerts))
        .route("/api/ui/jobs", get(ui_jobs))
        .route("/api/ui/jobs/{id}", get(ui_job))
        .route_layer(guard(Need::Read));
    let operate = Router::new()
        .route(
            "/api/jobs/{id}/silence",
            put(silence_job).delete(unsilence_job),
        )
        .route_layer(guard(Need::Operate));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/", get(dashboard::page))
        .route("/jobs/{id}", get(dashboard::page))
        .route("/ui/app.js", get(dashboard::app_js))
        .route("/ui/style.css", get(dashboard::style_css))
        .merge(ingest)
        .merge(read)
        .merge(operate)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn(request_timeout))
        .layer(middleware::map_response(safe_headers))
        .with_state(state)
}

/// An error reply: `{"error": message}` with its status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
    fn internal(message: String) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
    /// The request itself is at fault (retrying it cannot help).
    pub(crate) fn is_client_error(&self) -> bool {
        self.status.is_client_error()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::internal(e.to_string())
    }
}

impl From<IngestError> for ApiError {
    fn from(e: IngestError) -> Self {
        ApiError::new(e.status(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            error!(status = %self.status, "{}", self.message);
        } else {
            warn!(status = %self.status, "rejected: {}", self.message);
        }
        let mut resp = (self.status, Json(json!({ "error": self.message }))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

async fn require_token(
    State((state, need)): State<(AppState, Need)>,
    req: Request,
    next: Next,
) -> Response {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing Authorization header: send Authorization: Bearer <token> (a token in the URL is never accepted)",
        )
        .into_response();
    };
    let presented = value.as_bytes();
    let token = match presented.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &presented[7..],
        _ => return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the Authorization header is not a bearer token: send Authorization: Bearer <token>",
        )
        .into_response(),
    };
    match state.tokens.role(token.trim_ascii()) {
        None => ApiError::new(StatusCode::UNAUTHORIZED, "invalid token").into_response(),
        Some(role) if !role.may(need) => {
            ApiError::new(StatusCode::FORBIDDEN, need.refusal()).into_response()
        }
        Some(_) => next.run(req).await,
    }
}

/// Posts from one address beyond its rate get 429 and when to come back, before their
/// body is read.
async fn rate_limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if let Some(ip) = ip {
        let taken = state
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(ip, Instant::now());
        if let Err(wait_s) = taken {
            let mut resp = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{ip} posts summaries faster than this server accepts; retry in {wait_s:.1} s"
                ),
            )
            .into_response();
            let secs = wait_s.ceil().max(1.0) as u64;
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            return resp;
        }
    }
    next.run(req).await
}

async fn request_timeout(req: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request took longer than {} s",
                REQUEST_TIMEOUT.as_secs()
            ),
        )
        .into_response(),
    }
}

/// On every reply: a browser must take a JSON reply for JSON even when a user string in it
/// looks like markup, and keep the token-protected answers out of caches.
async fn safe_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {method} {}", uri.path()),
    )
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

async fn post_summary(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let limit = state.max_body_bytes;
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(r.status(), format!("the body is larger than {limit} bytes"))
        } else {
            ApiError::new(
                r.status(),
                format!("cannot read the body: {}", r.body_text()),
            )
        }
    })?;
    let encoding = match headers.get(header::CONTENT_ENCODING) {
        None => Encoding::Identity,
        Some(v) => Encoding::parse(Some(v.to_str().map_err(|_| {
            IngestError::UnsupportedEncoding(String::from_utf8_lossy(v.as_bytes()).into())
        })?))?,
    };
    let done = state.ingest(body, encoding).await?;
    Ok(Json(json!({
        "job_id": done.job_id,
        "window": done.window,
        "analysed": done.findings.is_some(),
        "findings": done.findings,
    })))
}

async fn list_jobs(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let jobs = state.read(None, |s| s.jobs()).await?;
    Ok(Json(json!(jobs)))
}

#[derive(serde::Deserialize)]
struct FindingsQuery {
    window: Option<u64>,
}

async fn job_findings(
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    query: Result<Query<FindingsQuery>, QueryRejection>,
) -> Result<Json<FindingsDocument>, ApiError> {
    let Query(q) = query.map_err(|r| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("bad query ({}); expected ?window=N", r.body_text()),
        )
    })?;
    let id = job_id.clone();
    let found = state
        .read(Some(job_id.clone()), move |s| {
            find_document(s, &id, q.window, HISTORY_WINDOWS)
        })
        .await?;
    Ok(Json(found.document(&job_id)?))
}

/// Summaries one request may return: windows x nodes (2 hours of 10-s windows of 28
/// nodes); a longer history is read in ranges.
const MAX_SUMMARIES: usize = 20_000;

#[derive(serde::Deserialize)]
struct SummariesQuery {
    from: Option<u64>,
    to: Option<u64>,
}

/// `GET /api/jobs/{id}/summaries?from=A&to=B`: the stored window summaries of windows
/// A..=B (default: all), every node's, in window order, as a JSON array: what `flare
/// compare` reads of a live job.
async fn job_summaries(
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    query: Result<Query<SummariesQuery>, QueryRejection>,
) -> Result<Json<Vec<flare_model::WindowSummary>>, ApiError> {
    let q = window_range(query)?;
    let (from, to) = (q.from.unwrap_or(0), q.to.unwrap_or(i64::MAX as u64));
    let id = job_id.clone();
    let found = state
        .with_store(move |s| s.summaries(&id, from, to, MAX_SUMMARIES))
        .await?;
    Ok(Json(stored(found, &job_id, from, to)?))
}

/// A `?from=A&to=B` query, A <= B where both are given.
fn window_range(
    query: Result<Query<SummariesQuery>, QueryRejection>,
) -> Result<SummariesQuery, ApiError> {
    let Query(q) = query.map_err(|r| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("bad query ({}); expected ?from=N&to=M", r.body_text()),
        )
    })?;
    if let (Some(from), Some(to)) = (q.from, q.to) {
        if from > to {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("from={from} is after to={to}"),
            ));
        }
    }
    Ok(q)
}

/// The summaries a read found, or why there are none to give.
fn stored(
    found: StoredSummaries,
    job_id: &str,
    from: u64,
    to: u64,
) -> Result<Vec<flare_model::WindowSummary>, ApiError> {
    match found {
        StoredSummaries::Summaries(v) => Ok(v),
        StoredSummaries::UnknownJob => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown job {job_id:?}"),
        )),
        StoredSummaries::TooMany(n) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "windows {from}..{to} of job {job_id:?} hold {n} summaries; at most {MAX_SUMMARIES} per request: narrow ?from=&to="
            ),
        )),
    }
}

/// Windows a timeline covers when the request names none: the latest 30 (five minutes of
/// 10-s windows).
const TIMELINE_WINDOWS: u64 = 30;

/// `GET /api/jobs/{id}/timeline?from=A&to=B`: windows A..=B (default: the latest
/// [`TIMELINE_WINDOWS`] up to its latest analysed one) as one Perfetto-readable timeline
/// (`flare_report::timeline::windows`), the ranks its latest findings blame named on
/// their process: what the dashboard's timeline link downloads.
async fn job_timeline(
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    query: Result<Query<SummariesQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = window_range(query)?;
    let id = job_id.clone();
    let (found, culprits, from, to) = state
        .read(Some(job_id.clone()), move |s| {
            let doc = match find_document(s, &id, None, 0)? {
                Found::Document(d) => Some(d),
                _ => None,
            };
            let latest = doc.as_ref().and_then(|d| d.job.window);
            let to = q.to.or(latest).unwrap_or(i64::MAX as u64);
            let from = q
                .from
                .unwrap_or(to.saturating_sub(TIMELINE_WINDOWS - 1))
                .min(to);
            let culprits: std::collections::BTreeMap<u32, String> = doc
                .iter()
                .flat_map(|d| d.blamed_ranks())
                .map(|(r, f)| (r, f.summary.clone()))
                .collect();
            Ok((
                s.summaries(&id, from, to, MAX_SUMMARIES)?,
                culprits,
                from,
                to,
            ))
        })
        .await?;
    let summaries = stored(found, &job_id, from, to)?;
    let mut body = Vec::with_capacity(64 * 1024);
    flare_report::timeline::write_window_timeline(&summaries, &culprits, &mut body)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let file: String = job_id
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "attachment; filename=\"flare-{file}-windows-{from}-{to}.json\""
    )) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}

/// A job's findings document at a window (the default: its latest analysed one).
enum Found {
    UnknownJob,
    NoWindow(Option<u64>),
    Document(Box<FindingsDocument>),
}

impl Found {
    fn document(self, job_id: &str) -> Result<FindingsDocument, ApiError> {
        match self {
            Found::Document(d) => Ok(*d),
            Found::UnknownJob => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown job {job_id:?}"),
            )),
            Found::NoWindow(w) => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                match w {
                    Some(w) => format!("job {job_id:?} has no analysed window {w}"),
                    None => format!("job {job_id:?} has no analysed window yet"),
                },
            )),
        }
    }
}

/// `history`: windows of history the document carries (the dashboard shows none).
fn find_document(
    s: &mut Store,
    id: &str,
    window: Option<u64>,
    history: usize,
) -> Result<Found, StoreError> {
    if s.job(id)?.is_none() {
        return Ok(Found::UnknownJob);
    }
    let window = match window {
        Some(w) => Some(w),
        None => s.default_window(id)?,
    };
    let diagnosis = match window {
        Some(w) => s.diagnosis(id, w)?,
        None => None,
    };
    let (Some(w), Some(d)) = (window, diagnosis) else {
        return Ok(Found::NoWindow(window));
    };
    Ok(Found::Document(Box::new(d.document(
        id,
        w,
        s.windows_analysed(id)?,
        s.history(id, history)?,
    ))))
}

/// The dashboard's jobs table.
async fn ui_jobs(State(state): State<AppState>) -> Result<Response, ApiError> {
    let jobs = state
        .read_as_analysed(|s| {
            let mut out = Vec::new();
            for row in s.jobs()? {
                let doc = match find_document(s, &row.job_id, None, 0)? {
                    Found::Document(d) => Some(*d),
                    _ => None,
                };
                out.push((row, doc));
            }
            Ok(out)
        })
        .await?;
    Ok(dashboard::html(dashboard::jobs_fragment(&jobs, unix_ns())))
}

/// The dashboard's page of one job.
async fn ui_job(
    State(state): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_id.clone();
    let perfetto_ui = state.perfetto_ui.to_string();
    let (found, page) = state
        .read_as_analysed(move |s| {
            let found = find_document(s, &id, None, 0)?;
            let stacks = match &found {
                Found::Document(d) => s.stacks(&id, d.job.window.unwrap_or(0))?,
                _ => vec![],
            };
            let page = dashboard::JobPage {
                timeline: s.timeline(&id, DASHBOARD_WINDOWS)?,
                alerts: s.alert_events(Some(&id), 200)?,
                stacks,
                arriving: s.arriving(&id),
                perfetto_ui,
            };
            Ok((found, page))
        })
        .await?;
    let doc = found.document(&job_id)?;
    Ok(dashboard::html(dashboard::job_fragment(
        &job_id, &doc, &page,
    )))
}

#[derive(serde::Deserialize)]
struct AlertsQuery {
    job: Option<String>,
    limit: Option<usize>,
}

/// The latest alert events, newest first (`?job=ID`, `?limit=N`, at most 1,000).
async fn list_alerts(
    State(state): State<AppState>,
    query: Result<Query<AlertsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|r| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("bad query ({}); expected ?job=ID&limit=N", r.body_text()),
        )
    })?;
    let limit = q.limit.unwrap_or(100).min(1000);
    let events = state
        .read(q.job.clone(), move |s| {
            s.alert_events(q.job.as_deref(), limit)
        })
        .await?;
    Ok(Json(json!(events)))
}

#[derive(serde::Deserialize)]
struct SilenceRequest {
    /// For how long, in seconds.
    for_s: u64,
    #[serde(default)]
    reason: String,
}

/// Silences a job's alerts for `for_s` seconds: transitions are still recorded (and
/// listed), no webhook is called.
async fn silence_job(
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    body: Result<Json<SilenceRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(req) = body.map_err(|r| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "{}; expected {{\"for_s\": seconds, \"reason\": \"...\"}}",
                r.body_text()
            ),
        )
    })?;
    if req.for_s == 0 || req.for_s > 366 * 24 * 3600 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "for_s must be between 1 and 31,622,400 (a year)",
        ));
    }
    let until = unix_ns().saturating_add(req.for_s.saturating_mul(1_000_000_000));
    let (id, reason) = (job_id.clone(), req.reason.clone());
    let known = state
        .with_store(move |s| s.silence(&id, until, &reason))
        .await?;
    if !known {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown job {job_id:?}"),
        ));
    }
    Ok(Json(
        json!({ "job_id": job_id, "until_unix_ns": until, "reason": req.reason }),
    ))
}

async fn unsilence_job(
    State(state): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = job_id.clone();
    let had = state.with_store(move |s| s.unsilence(&id)).await?;
    Ok(Json(
        json!({ "job_id": job_id, "silenced": false, "was_silenced": had }),
    ))
}
