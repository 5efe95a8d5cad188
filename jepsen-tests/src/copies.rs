//! Late and duplicated requests: a gRPC proxy in the harness between the workers and each
//! node, and the two faults it makes.
//!
//! TCP hands a server each segment once and in order, so neither a netem delay (not available
//! on the test machines' kernels) nor a duplicated packet makes a server see one request twice
//! or a first attempt after its retry. A proxy does, as Envoy's retries, a gRPC retry policy or
//! a client that gave up while its request sat in a queue would:
//! - [`Mode::DelayFirst`]: each first attempt of a claim is held [`DELAY_MS`], past the
//!   workers' request timeout, so the client's retry reaches the cluster first and the first
//!   attempt arrives after it, answered to nobody;
//! - [`Mode::Duplicate`]: each first attempt of a claim is sent on at once and again
//!   [`COPY_AFTER_MS`] later, headers and all; the copy's answer goes to nobody.
//!
//! Every claim's answer (every attempt and every copy, whether or not its client still
//! waited) goes into the history as a [`WireEvent`]; `check::copies` compares them with what
//! the client heard: a copy granted a lease its client was told it did not get is the bug.
//! Other calls pass through untouched (streams too).

use std::collections::HashMap;
use std::convert::Infallible;
use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use baton_proto::v1::{claim_response, ClaimRequest, ClaimResponse};
use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::history::{WireAnswer, WireEvent};
use crate::workload::Recorder;

/// The claim method's path: the one call the faults delay and copy.
pub const CLAIM_PATH: &str = "/baton.v1.Baton/Claim";
/// How long [`Mode::DelayFirst`] holds a first attempt, in ms: past the workers' request
/// timeout (1 s, `workload::Ctx::new_proc`) and their first backoff, so the retry goes first.
pub const DELAY_MS: Range<u64> = 1300..2500;
/// When [`Mode::Duplicate`]'s copy follows its original, in ms: long enough for the key to
/// change hands in between (the workers hold for a fraction of the 2 s TTL).
pub const COPY_AFTER_MS: Range<u64> = 300..1500;
/// How long the proxy waits for a node's answer to one copy before it records "no answer":
/// longer than any attempt's own timeout.
pub const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// The largest claim request the proxy reads (a baton claim is a few hundred bytes; the
/// node's own limit is far below this).
pub const CLAIM_BYTES_MAX: usize = 64 * 1024;

/// What the proxies do to claims now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Pass = 0,
    DelayFirst = 1,
    Duplicate = 2,
}

type Body = BoxBody<Bytes, hyper::Error>;

struct Shared {
    mode: AtomicU8,
    /// Node address → its proxy's: a node names the leader in its answers
    /// (`x-baton-leader`), and a client that follows it must stay behind the proxies.
    proxy_of: HashMap<String, String>,
    rec: Arc<Recorder>,
    client: HttpClient<HttpConnector, Body>,
    rng: Mutex<StdRng>,
}

impl Shared {
    fn mode(&self) -> Mode {
        match self.mode.load(Ordering::Relaxed) {
            1 => Mode::DelayFirst,
            2 => Mode::Duplicate,
            _ => Mode::Pass,
        }
    }

    /// `headers` with the leader they name replaced by its proxy.
    fn rewrite(&self, headers: &mut HeaderMap) {
        let proxy = headers
            .get(baton_proto::LEADER_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|leader| self.proxy_of.get(leader))
            .and_then(|p| http::HeaderValue::from_str(p).ok());
        if let Some(p) = proxy {
            headers.insert(baton_proto::LEADER_METADATA_KEY, p);
        }
    }

    fn pick(&self, range: Range<u64>) -> Duration {
        let ms = self.rng.lock().expect("proxy rng lock").gen_range(range);
        Duration::from_millis(ms)
    }
}

/// One proxy per node, on loopback; dropped, they stop.
pub struct Proxies {
    shared: Arc<Shared>,
    /// `endpoints[i]` stands for node `i + 1`.
    pub endpoints: Vec<String>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Proxies {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Proxies {
    /// Starts a proxy in front of each of `nodes` (`ip:port`), recording claims into `rec`.
    pub async fn start(nodes: &[String], rec: Arc<Recorder>, seed: u64) -> anyhow::Result<Proxies> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        let mut listeners = Vec::new();
        for _ in nodes {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .context("binding a proxy")?;
            listeners.push(listener);
        }
        let endpoints = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let shared = Arc::new(Shared {
            mode: AtomicU8::new(Mode::Pass as u8),
            proxy_of: nodes
                .iter()
                .cloned()
                .zip(endpoints.iter().cloned())
                .collect(),
            rec,
            client: HttpClient::builder(TokioExecutor::new())
                .http2_only(true)
                .build(http),
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0xC0_91E5)),
        });
        let tasks = listeners
            .into_iter()
            .zip(nodes)
            .map(|(l, node)| tokio::spawn(serve(l, node.clone(), shared.clone())))
            .collect();
        Ok(Proxies {
            shared,
            endpoints,
            tasks,
        })
    }

    pub fn set(&self, mode: Mode) {
        self.shared.mode.store(mode as u8, Ordering::Relaxed);
    }
}

async fn serve(listener: TcpListener, node: String, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (node, shared) = (node.clone(), shared.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (node, shared) = (node.clone(), shared.clone());
                async move { Ok::<_, Infallible>(handle(&shared, &node, req).await) }
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Where a request goes: the same path on `node`.
fn upstream(node: &str, parts: &http::request::Parts, body: Body) -> Request<Body> {
    let mut req = Request::builder()
        .method(parts.method.clone())
        .uri(format!(
            "http://{node}{}",
            parts
                .uri
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/")
        ))
        .version(http::Version::HTTP_2)
        .body(body)
        .expect("a request from a valid one");
    *req.headers_mut() = parts.headers.clone();
    req
}

/// A gRPC error answer with no body (status in the headers).
fn unavailable(message: &str) -> Response<Body> {
    Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "14")
        .header("grpc-message", format!("baton-jepsen proxy: {message}"))
        .body(Empty::new().map_err(|never| match never {}).boxed())
        .expect("a valid response")
}

async fn handle(shared: &Arc<Shared>, node: &str, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    if parts.uri.path() != CLAIM_PATH {
        // Everything else streams through as it is.
        let up = upstream(node, &parts, body.boxed());
        return match shared.client.request(up).await {
            Ok(mut resp) => {
                shared.rewrite(resp.headers_mut());
                let shared = shared.clone();
                resp.map(move |body| {
                    body.map_frame(move |frame| match frame.into_trailers() {
                        Ok(mut trailers) => {
                            shared.rewrite(&mut trailers);
                            Frame::trailers(trailers)
                        }
                        Err(frame) => frame,
                    })
                    .boxed()
                })
            }
            Err(e) => unavailable(&e.to_string()),
        };
    }
    let bytes = match http_body_util::Limited::new(body, CLAIM_BYTES_MAX)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(e) => return unavailable(&format!("reading the claim: {e}")),
    };
    let first_attempt = parts
        .headers
        .contains_key(baton_proto::FIRST_ATTEMPT_METADATA_KEY);
    let claim = bytes
        .get(5..)
        .and_then(|b| ClaimRequest::decode(b).ok())
        .unwrap_or_default();
    let sent_ns = shared.rec.now_ns();
    let (hold, copy_after) = match (shared.mode(), first_attempt) {
        (Mode::DelayFirst, true) => (shared.pick(DELAY_MS), None),
        (Mode::Duplicate, true) => (Duration::ZERO, Some(shared.pick(COPY_AFTER_MS))),
        _ => (Duration::ZERO, None),
    };
    let event = WireEvent {
        idx: 0,
        client: claim
            .request_id
            .as_ref()
            .map(|r| r.session.clone())
            .unwrap_or_default(),
        retry_id: claim
            .request_id
            .as_ref()
            .map(|r| r.client_id.clone())
            .unwrap_or_default(),
        seq: claim.request_id.as_ref().map(|r| r.seq).unwrap_or(0),
        key: claim.key.clone(),
        sent_ns,
        node: node.to_string(),
        decided_by: node.to_string(),
        first_attempt,
        copy: if hold.is_zero() {
            "original"
        } else {
            "delayed"
        }
        .into(),
        answer: WireAnswer::Status { code: -1 },
        t_ns: 0,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Each copy runs to its end in its own task: a client that gives up does not stop it
    // (its request is already on the wire), and its answer is recorded either way.
    tokio::spawn(send_copy(
        shared.clone(),
        upstream(node, &parts, full(bytes.clone())),
        hold,
        event.clone(),
        Some(tx),
    ));
    if let Some(after) = copy_after {
        tokio::spawn(send_copy(
            shared.clone(),
            upstream(node, &parts, full(bytes)),
            after,
            WireEvent {
                copy: "copy".into(),
                ..event
            },
            None,
        ));
    }
    match rx.await {
        Ok(resp) => resp,
        Err(_) => unavailable("no answer"),
    }
}

fn full(bytes: Bytes) -> Body {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

/// One answer, read whole: the head, the message and the trailers.
struct Whole {
    head: http::response::Parts,
    data: Bytes,
    trailers: Option<HeaderMap>,
}

impl Whole {
    fn into_response(self) -> Response<Body> {
        let mut frames = vec![Ok(Frame::data(self.data))];
        if let Some(t) = self.trailers {
            frames.push(Ok(Frame::trailers(t)));
        }
        Response::from_parts(
            self.head,
            StreamBody::new(futures::stream::iter(frames)).boxed(),
        )
    }

    /// What the node answered: the gRPC status from the trailers (or the head, for an
    /// answer with no message), and the outcome if it is OK.
    fn answer(&self) -> WireAnswer {
        let status = |h: &HeaderMap| {
            h.get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok())
        };
        let code = self
            .trailers
            .as_ref()
            .and_then(status)
            .or_else(|| status(&self.head.headers))
            .unwrap_or(-1);
        if code != 0 {
            return WireAnswer::Status { code };
        }
        let outcome = self
            .data
            .get(5..)
            .and_then(|b| ClaimResponse::decode(b).ok())
            .and_then(|r| r.outcome);
        let token = |l: &Option<baton_proto::v1::Lease>| l.as_ref().map(|l| l.token).unwrap_or(0);
        match outcome {
            Some(claim_response::Outcome::Granted(g)) => WireAnswer::Granted {
                token: token(&g.lease),
            },
            Some(claim_response::Outcome::Held(h)) => WireAnswer::Held {
                token: token(&h.lease),
            },
            None => WireAnswer::Status { code: -1 },
        }
    }
}

async fn send_copy(
    shared: Arc<Shared>,
    req: Request<Body>,
    after: Duration,
    mut event: WireEvent,
    reply: Option<tokio::sync::oneshot::Sender<Response<Body>>>,
) {
    tokio::time::sleep(after).await;
    let whole = tokio::time::timeout(ANSWER_WAIT, async {
        let resp = shared.client.request(req).await.ok()?;
        let (head, body) = resp.into_parts();
        let collected = body.collect().await.ok()?;
        let trailers = collected.trailers().cloned();
        Some(Whole {
            head,
            data: collected.to_bytes(),
            trailers,
        })
    })
    .await
    .ok()
    .flatten();
    match whole {
        Some(whole) => {
            event.answer = whole.answer();
            if let Some(leader) = whole
                .head
                .headers
                .get(baton_proto::LEADER_METADATA_KEY)
                .and_then(|v| v.to_str().ok())
            {
                event.decided_by = leader.to_string();
            }
            shared.rec.wire(event);
            if let Some(tx) = reply {
                let mut whole = whole;
                shared.rewrite(&mut whole.head.headers);
                if let Some(t) = whole.trailers.as_mut() {
                    shared.rewrite(t);
                }
                let _ = tx.send(whole.into_response());
            }
        }
        None => {
            shared.rec.wire(event);
            if let Some(tx) = reply {
                let _ = tx.send(unavailable("the node gave no answer"));
            }
        }
    }
}
