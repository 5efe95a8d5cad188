//! `baton web`: a live page of who holds what, served by the CLI with the user's own
//! endpoints, TLS, token and client id, so that a secured cluster's permissions apply to
//! what the page shows.
//!
//! The page is three static files embedded in the binary (no build step, no CDN); the
//! served page has the first board in it already ([`html`]), read as `/api/board` reads
//! it, so that it shows rows before its script has run. The script's data comes from a
//! small JSON API over the library's calls, and its live updates from the watch stream as
//! server-sent events:
//! - `GET /api/board?prefix=P&after=K&limit=N`: one page of held (and quarantined) keys,
//!   each with its record's status (and who set it in which stint, from the key's history:
//!   [`status_by`]) and summary, assignment, pending offer and quarantine, and the revision
//!   and node of the read;
//! - `GET /api/row?key=K`: one key's row again (the page asks after an event of the key);
//! - `GET /api/key?key=K`: a key's case file (and who set its status), its ownership
//!   stints and events, its last handoff note;
//! - `GET /api/cluster`: every node's status, a node that does not answer shown as such;
//! - `GET /api/events?prefix=P&from=R`: the watch stream from revision R (or the browser's
//!   `Last-Event-ID` + 1 when it reconnects), one `change` event per history event with its
//!   revision as id; `reload` when the revision fell out of every node's window;
//! - `POST /api/revoke` (`--operator` only): `{"key", "reason"}`.
//!
//! Times left are the server's: each answer carries `remaining_ms` and the page counts down
//! from the moment it received it on the browser's monotonic clock, never from its wall
//! clock.

mod html;
mod status_by;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use baton_client::{
    AssignmentInfo, Client, Error, LeaseInfo, QuarantineView, ReadMode, RecordView,
};
use futures::stream::{self, Stream, StreamExt};
use serde::{Deserialize, Serialize};

/// Keys on one page of the board when the page asks for none.
pub const PAGE_KEYS_DEFAULT: u32 = 50;
/// The most keys one page of the board may ask for (each is one record read).
pub const PAGE_KEYS_MAX: u32 = 200;
/// Record reads of one board page in flight at once.
const ROW_READS_IN_FLIGHT: usize = 8;
/// Live event streams (open pages) at once; more are refused with 503.
pub const EVENT_STREAMS_MAX: usize = 64;
/// The largest request body (a revoke's key and reason).
pub const BODY_BYTES_MAX: usize = 16 * 1024;
/// A comment line on an idle event stream this often, so that proxies keep it open.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);
/// How long the served page waits for its first board; past it the page goes out without
/// rows (the script reads them), so that a cluster that does not answer does not hold the
/// page back for the client's whole retry deadline.
pub const FIRST_BOARD_WAIT: Duration = Duration::from_secs(3);

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// What `baton web` was asked to do.
pub struct Settings {
    pub listen: SocketAddr,
    /// The prefix the page opens on.
    pub prefix: String,
    /// Offer the revoke button.
    pub operator: bool,
}

struct Shared {
    client: Client,
    settings: Settings,
    streams: AtomicUsize,
}

type Ctx = State<Arc<Shared>>;

/// Serves the page until the process is stopped; says where on stderr once it listens.
pub async fn serve(client: Client, settings: Settings) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| listen_error(settings.listen, &e))?;
    let bound = listener.local_addr()?;
    eprintln!(
        "baton web: http://{bound}/ (cluster {}; {}; Ctrl-C stops it)",
        client.endpoints().join(","),
        if settings.operator {
            "operator: the revoke button is on"
        } else {
            "read-only"
        }
    );
    let shared = Arc::new(Shared {
        client,
        settings,
        streams: AtomicUsize::new(0),
    });
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// Why `baton web` cannot listen on `addr`, with the system's reason (`main` prints only the
/// outermost message of an error) and what to do about it.
fn listen_error(addr: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "another program listens there: give --listen another port, or --listen {}:0 for \
             any free one (the address is printed once it listens)",
            addr.ip()
        ),
        std::io::ErrorKind::PermissionDenied => {
            "ports below 1024 need privileges: give --listen a port above 1023".to_owned()
        }
        _ => "give --listen another address".to_owned(),
    };
    anyhow::anyhow!("cannot listen on {addr}: {e}; {hint}")
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(board_page))
        .route("/key", get(key_html))
        .route("/static/app.js", get(app_js))
        .route("/static/style.css", get(style_css))
        .route("/api/config", get(config))
        .route("/api/board", get(board))
        .route("/api/row", get(row))
        .route("/api/key", get(key_page))
        .route("/api/cluster", get(cluster))
        .route("/api/events", get(events))
        .route("/api/revoke", post(revoke))
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(shared)
}

#[derive(Deserialize)]
struct PageQuery {
    prefix: Option<String>,
    /// As the address gives it: the script passes it on to `/api/board` as it is.
    limit: Option<String>,
}

/// The board's page, with its first board in it (the prefix and page size the script will
/// ask for: the address's, else `--prefix` and the default).
async fn board_page(State(s): Ctx, Query(q): Query<PageQuery>) -> Response {
    let prefix = q.prefix.unwrap_or_else(|| s.settings.prefix.clone());
    let limit = match q.limit.as_deref().filter(|l| !l.is_empty()) {
        None => Some(PAGE_KEYS_DEFAULT),
        Some(given) => given.parse::<u32>().ok(),
    };
    // A limit that is not a number: the script's read says what is wrong with it.
    let read = match limit {
        Some(limit) => tokio::time::timeout(
            FIRST_BOARD_WAIT,
            read_board(&s, prefix.clone(), String::new(), limit),
        )
        .await
        .ok(),
        None => None,
    };
    let board = read.map(|r| r.map_err(|Failure(_, words)| words));
    let html = html::render(
        INDEX_HTML,
        &html::Page {
            title: "baton".into(),
            prefix: &prefix,
            operator: s.settings.operator,
            key: None,
            board: board.as_ref(),
        },
    );
    page(html)
}

#[derive(Deserialize)]
struct KeyPageQuery {
    #[serde(default)]
    key: String,
}

/// A key's page: the key's view shown, filled in by the script.
async fn key_html(State(s): Ctx, Query(q): Query<KeyPageQuery>) -> Response {
    let html = html::render(
        INDEX_HTML,
        &html::Page {
            title: format!("{} — baton", q.key),
            prefix: &s.settings.prefix,
            operator: s.settings.operator,
            key: Some(&q.key),
            board: None,
        },
    );
    page(html)
}

fn page(html: String) -> Response {
    (headers("text/html; charset=utf-8"), html).into_response()
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (headers(content_type), body).into_response()
}

fn headers(content_type: &'static str) -> [(header::HeaderName, &'static str); 3] {
    [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        // Nothing from elsewhere: no CDN, no inline script, no framing.
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; frame-ancestors 'none'",
        ),
    ]
}

/// An API failure: the HTTP status and the error's words, as JSON.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let status = match &e {
            Error::PermissionDenied(_) => StatusCode::FORBIDDEN,
            Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Error::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            Error::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_GATEWAY,
        };
        Failure(status, e.to_string())
    }
}

#[derive(Serialize)]
struct ConfigJson<'a> {
    prefix: &'a str,
    operator: bool,
    endpoints: &'a [String],
    version: &'static str,
}

async fn config(State(s): Ctx) -> Json<serde_json::Value> {
    Json(
        serde_json::to_value(ConfigJson {
            prefix: &s.settings.prefix,
            operator: s.settings.operator,
            endpoints: s.client.endpoints(),
            version: env!("CARGO_PKG_VERSION"),
        })
        .expect("the config serializes"),
    )
}

#[derive(Deserialize)]
struct BoardQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    after: String,
    limit: Option<u32>,
}

/// One key as the board shows it.
#[derive(Serialize)]
struct Row {
    key: String,
    lease: Option<LeaseInfo>,
    assignment: Option<AssignmentInfo>,
    /// Assigned to someone other than the holder.
    mismatch: bool,
    status: String,
    /// Who set the status and in which stint, when the key's history says.
    status_by: Option<status_by::StatusBy>,
    /// The status was set before the oldest event the history keeps.
    status_before_history: bool,
    summary: String,
    offer: Option<OfferRow>,
    quarantine: Option<QuarantineView>,
    /// Who waits in the key's line, if anyone.
    line: Option<baton_client::KeyLine>,
    /// Every holder, when permits or shared holders hold the key (`lease` is then the
    /// first of them; `shared` says which).
    permits: Option<baton_client::KeyHolders>,
    revision: u64,
    /// An open task: no holder, no assignee, not quarantined, a status that is not a
    /// finished one (`claim-next` could grant it to anyone). A key with no status at all
    /// (claimed and released, never posted) is not shown as one.
    open: bool,
}

#[derive(Serialize)]
struct OfferRow {
    to: String,
    remaining_ms: u64,
}

impl Row {
    fn of(view: RecordView) -> Row {
        let assignment = view.record.assigned_to.clone();
        let status = view.record.status.as_str();
        let open = view.lease.is_none()
            && view.quarantine.is_none()
            && assignment.is_none()
            && !status.is_empty()
            && !baton_proto::limits::FINISHED_STATUSES.contains(&status);
        let mismatch = match (&view.lease, &assignment) {
            (Some(lease), Some(a)) => a.to != lease.holder_name,
            _ => false,
        };
        Row {
            offer: view.record.pending_offer.as_ref().map(|o| OfferRow {
                to: o.to.clone(),
                remaining_ms: u64::try_from(o.remaining.as_millis()).unwrap_or(u64::MAX),
            }),
            key: view.key,
            lease: view.lease,
            assignment,
            mismatch,
            status: view.record.status,
            status_by: None,
            status_before_history: false,
            summary: view.record.summary,
            quarantine: view.quarantine,
            line: view.line,
            permits: view.permits,
            revision: view.revision,
            open,
        }
    }

    /// Says who set the status, as the key's history tells.
    fn attribute(&mut self, setting: status_by::StatusSetting) {
        self.status_before_history = setting == status_by::StatusSetting::BeforeHistory;
        self.status_by = match setting {
            status_by::StatusSetting::Known(by) => Some(by),
            _ => None,
        };
    }

    /// Worth a line on the board: held, quarantined, assigned and waiting for its assignee,
    /// or an open task.
    fn shown(&self) -> bool {
        self.lease.is_some() || self.quarantine.is_some() || self.assignment.is_some() || self.open
    }
}

/// `key`'s row, or `None` when the board does not show it. A shown key with a status also
/// has its history read (after the record, so that it covers the record's read), for who
/// set the status.
async fn read_row(client: &Client, key: &str) -> Result<Option<Row>, Error> {
    let view = client.record(key, ReadMode::Linearizable).await?;
    let mut row = Row::of(view.clone());
    if !row.shown() {
        return Ok(None);
    }
    if !row.status.is_empty() {
        let history = client.history(key, ReadMode::Linearizable).await?;
        row.attribute(status_by::status_setting(&view, &history));
    }
    Ok(Some(row))
}

#[derive(Serialize)]
struct BoardJson {
    prefix: String,
    revision: u64,
    answered_by: String,
    rows: Vec<Row>,
    /// The key to ask the next page after, when there is one.
    next_after: Option<String>,
}

async fn board(State(s): Ctx, Query(q): Query<BoardQuery>) -> Result<Json<BoardJson>, Failure> {
    let limit = q.limit.unwrap_or(PAGE_KEYS_DEFAULT);
    Ok(Json(read_board(&s, q.prefix, q.after, limit).await?))
}

/// One page of the board: what `/api/board` answers and the served page starts with.
async fn read_board(
    s: &Shared,
    prefix: String,
    after: String,
    limit: u32,
) -> Result<BoardJson, Failure> {
    if !(1..=PAGE_KEYS_MAX).contains(&limit) {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            format!("limit {limit} is out of range: give 1 to {PAGE_KEYS_MAX} (PAGE_KEYS_MAX)"),
        ));
    }
    let page = s
        .client
        .board(&prefix, limit, &after, ReadMode::Linearizable)
        .await?;
    // The held keys of the page, then the quarantined and the assigned ones it covers that no
    // one holds.
    let mut keys: Vec<String> = page.leases.iter().map(|l| l.key.clone()).collect();
    // The page ends where the first of its truncated lists ends (held, or unclaimed keys).
    let ends = [
        page.truncated.then(|| keys.last().cloned()).flatten(),
        page.unclaimed_truncated
            .then(|| page.unclaimed.keys().last().cloned())
            .flatten(),
        page.open_truncated
            .then(|| page.open.last().cloned())
            .flatten(),
    ];
    let last = ends.into_iter().flatten().min();
    let truncated = last.is_some();
    // Quarantined, assigned-but-unclaimed and permit-held keys come for the whole prefix:
    // those in this page's range of keys.
    keys.extend(
        page.quarantines
            .keys()
            .chain(page.unclaimed.keys())
            .chain(page.permits.keys())
            .chain(page.open.iter())
            .filter(|k| **k > after && (!truncated || Some(*k) <= last.as_ref()))
            .cloned(),
    );
    keys.sort();
    keys.dedup();
    keys.retain(|k| !truncated || Some(k) <= last.as_ref());
    let read: Vec<Result<Option<Row>, Error>> = stream::iter(keys)
        .map(|key| {
            let client = s.client.clone();
            async move { read_row(&client, &key).await }
        })
        .buffered(ROW_READS_IN_FLIGHT)
        .collect()
        .await;
    let mut rows = Vec::new();
    for row in read {
        rows.extend(row?);
    }
    Ok(BoardJson {
        prefix,
        revision: page.revision,
        answered_by: page.answered_by,
        rows,
        next_after: last,
    })
}

#[derive(Deserialize)]
struct KeyQuery {
    key: String,
}

#[derive(Serialize)]
struct RowJson {
    /// `None` when the key is neither held, quarantined nor assigned: the board drops it.
    row: Option<Row>,
}

async fn row(State(s): Ctx, Query(q): Query<KeyQuery>) -> Result<Json<RowJson>, Failure> {
    Ok(Json(RowJson {
        row: read_row(&s.client, &q.key).await?,
    }))
}

async fn key_page(
    State(s): Ctx,
    Query(q): Query<KeyQuery>,
) -> Result<Json<serde_json::Value>, Failure> {
    let view = s.client.record(&q.key, ReadMode::Linearizable).await?;
    let history = s.client.history(&q.key, ReadMode::Linearizable).await?;
    let setting = status_by::status_setting(&view, &history);
    let by = match &setting {
        status_by::StatusSetting::Known(by) => Some(by),
        _ => None,
    };
    Ok(Json(serde_json::json!({
        "key": q.key,
        "view": view,
        "status_by": by,
        "status_before_history": setting == status_by::StatusSetting::BeforeHistory,
        "stints": history.stints(),
        "events": history.events,
        "dropped": history.dropped,
    })))
}

async fn cluster(State(s): Ctx) -> Json<serde_json::Value> {
    let nodes = crate::cluster::cluster_status(&s.client).await;
    let leader = nodes
        .iter()
        .filter_map(|n| n.status.as_ref())
        .find(|st| st.state == "leader")
        .map(|st| st.node_id);
    Json(serde_json::json!({ "nodes": nodes, "leader": leader }))
}

#[derive(Deserialize)]
struct EventsQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    from: u64,
}

/// Counts an open event stream; refused beyond EVENT_STREAMS_MAX.
struct StreamSlot(Arc<Shared>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn events(
    State(s): Ctx,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, std::convert::Infallible>>>, Failure> {
    if s.streams.fetch_add(1, Ordering::Relaxed) >= EVENT_STREAMS_MAX {
        s.streams.fetch_sub(1, Ordering::Relaxed);
        return Err(Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{EVENT_STREAMS_MAX} pages are open already (EVENT_STREAMS_MAX)"),
        ));
    }
    let slot = StreamSlot(s.clone());
    // A browser that reconnects says the last revision it got.
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|last| last + 1);
    let from = resumed.unwrap_or(q.from);
    let watch = s.client.watch(&q.prefix, from);
    let stream = watch
        .map(move |item| {
            let _held = &slot;
            match item {
                Ok(event) => SseEvent::default()
                    .event("change")
                    .id(event.revision.to_string())
                    .json_data(&event)
                    .unwrap_or_else(|_| SseEvent::default().event("trouble")),
                Err(Error::Compacted { .. }) => SseEvent::default()
                    .event("reload")
                    .data("the events to go on from are gone: read the board again"),
                Err(e) => SseEvent::default().event("trouble").data(e.to_string()),
            }
        })
        .map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE_EVERY)))
}

#[derive(Deserialize)]
struct RevokeBody {
    key: String,
    reason: String,
}

async fn revoke(
    State(s): Ctx,
    headers: HeaderMap,
    Json(body): Json<RevokeBody>,
) -> Result<Json<serde_json::Value>, Failure> {
    if !s.settings.operator {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "this page is read-only: start baton web with --operator to revoke".into(),
        ));
    }
    // A page of another origin cannot send this header without a CORS preflight, which
    // this server never grants: a revoke comes from this page.
    if headers.get("x-baton-web").is_none() {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "a revoke must come from the baton web page (X-Baton-Web header)".into(),
        ));
    }
    if body.reason.trim().is_empty() {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            "give a reason: the history records it with the revoke".into(),
        ));
    }
    let revoked = s.client.revoke(&body.key, &body.reason).await?;
    Ok(Json(
        serde_json::json!({ "key": body.key, "revoked": revoked }),
    ))
}
