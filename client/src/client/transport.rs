//! The transport under [`Client`]: which node to ask (the leader when known, else the
//! endpoints in rotation, skipping suspects), one channel per node, and the retry loop that
//! reuses one request id per logical request until an answer or the deadline.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::cluster_client::ClusterClient;
use baton_proto::LEADER_METADATA_KEY;
use rand::Rng;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;

use super::{Answer, Client, Routing};
use crate::config::{endpoint_uri, normalize_endpoint, ValidConfig};
use crate::convert::{self, GrantClock};
use crate::error::Error;
use crate::retry::{classify, Backoff, Disposition, SUSPECT_FOR};
use crate::types::ClusterStatus;

/// Most transport channels one client caches: its endpoints plus the leaders it was pointed
/// to. Beyond that a channel is built per attempt and dropped, which is slower but bounded.
const CHANNELS_MAX: usize = 64;

/// Most nodes remembered as recently unreachable; older entries are dropped first.
const SUSPECTS_MAX: usize = 64;

/// How often a stream's connection pings its node while it waits for the next message.
const STREAM_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

impl Client {
    /// One request to the node at `endpoint` only, within the retry deadline: for questions
    /// about, or actions of, that one node.
    pub(super) async fn once_at<Req, Resp, F, Fut>(
        &self,
        endpoint: &str,
        request: Req,
        send: F,
    ) -> Result<(String, Resp), Error>
    where
        F: FnOnce(Channel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let endpoint = normalize_endpoint(endpoint)?;
        let timeout = self.inner.config.retry_deadline;
        let channel = self.channel(&endpoint)?;
        let mut request = self.inner.config.request(request);
        request.set_timeout(timeout);
        match tokio::time::timeout(timeout, send(channel, request)).await {
            Ok(Ok(response)) => Ok((endpoint, response.into_inner())),
            Ok(Err(status)) => match classify(&status) {
                Disposition::Retry { .. } => Err(Error::Unavailable {
                    last: describe_failure(&endpoint, &status, timeout),
                }),
                Disposition::Fail => Err(crate::convert::error(&status)),
            },
            Err(_) => Err(Error::Unavailable {
                last: format!("{endpoint}: no answer within {} ms", timeout.as_millis()),
            }),
        }
    }

    /// The status of the node at `endpoint` (`host:port` or `http://host:port`), which need
    /// not be one of the configured endpoints.
    ///
    /// Asks that node once, within the request timeout (capped by the retry deadline), and
    /// never another node: the answer is about one node, so rotating would answer a different
    /// question. A node that cannot be reached gives [`Error::Unavailable`].
    pub async fn status_of(&self, endpoint: &str) -> Result<ClusterStatus, Error> {
        let endpoint = normalize_endpoint(endpoint)?;
        let timeout = self
            .inner
            .config
            .request_timeout
            .min(self.inner.config.retry_deadline);
        let channel = self.channel(&endpoint)?;
        let mut request = self.inner.config.request(pb::StatusRequest {});
        request.set_timeout(timeout);
        let mut cluster = ClusterClient::new(channel);
        let attempt = cluster.status(request);
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => {
                self.mark_suspect(&endpoint);
                return Err(Error::Unavailable {
                    last: format!("{endpoint}: no answer within {} ms", timeout.as_millis()),
                });
            }
        };
        match result {
            Ok(response) => {
                let status = convert::cluster_status(endpoint, response.into_inner());
                self.learn_leader_from_status(&status);
                Ok(status)
            }
            Err(status) => match classify(&status) {
                Disposition::Retry { transport } => {
                    if transport {
                        self.mark_suspect(&endpoint);
                    }
                    Err(Error::Unavailable {
                        last: describe_failure(&endpoint, &status, timeout),
                    })
                }
                Disposition::Fail => Err(crate::convert::error(&status)),
            },
        }
    }

    /// Sends one logical request until a node answers it, the answer is a non-retryable
    /// error, or the retry deadline passes.
    ///
    /// Each attempt goes to the known leader, or else to the current endpoint of the
    /// rotation. Every attempt sends a clone of the same request, so a mutating request keeps
    /// its `RequestId` across retries and the cluster applies it at most once.
    pub(super) async fn call<Req, Resp, F, Fut>(
        &self,
        op: &'static str,
        request: Req,
        send: F,
    ) -> Result<Answer<Resp>, Error>
    where
        Req: Clone,
        F: FnMut(Channel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        self.call_until(op, request, self.retry_deadline_from_now(), send)
            .await
    }

    /// [`Client::call`] with an explicit retry deadline: no attempt runs past `deadline`.
    pub(super) async fn call_until<Req, Resp, F, Fut>(
        &self,
        op: &'static str,
        request: Req,
        deadline: Instant,
        mut send: F,
    ) -> Result<Answer<Resp>, Error>
    where
        Req: Clone,
        F: FnMut(Channel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let config = &self.inner.config;
        let mut backoff = Backoff::new();
        let mut last_failure = String::from("no attempt was made");
        let mut redirected = false;
        // Whether an earlier attempt may have reached the cluster: from then on each attempt
        // says it is a retry, which the cluster applies only if it can match it to its first.
        // Only once a write of this instance was answered: before that the cluster knows
        // nothing of its retry id, and could not tell a lost first attempt from one that was
        // never applied (a fresh process's first claim through a failover would be refused
        // as too old). A fresh process's first write is not protected: see
        // docs/guarantees.md.
        let mut maybe_delivered = false;
        let writes = WRITE_OPS.contains(&op);
        let answered = || {
            if writes {
                self.inner
                    .answered_write
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        };
        for attempt in 1u32.. {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            let timeout = remaining.min(config.request_timeout);
            let endpoint = self.pick_endpoint();
            let channel = self.channel(&endpoint)?;
            let mut attempt_request = config.request(request.clone());
            // Tell the node how long this attempt may take, so it stops working on an
            // answer nobody waits for.
            attempt_request.set_timeout(timeout);
            // Only the first attempt says so: a node may answer it from a read, with nothing
            // remembered, because no other copy of this request id exists yet.
            if attempt == 1 {
                attempt_request.metadata_mut().insert(
                    baton_proto::FIRST_ATTEMPT_METADATA_KEY,
                    tonic::metadata::MetadataValue::from_static("1"),
                );
            }
            if maybe_delivered
                && self
                    .inner
                    .answered_write
                    .load(std::sync::atomic::Ordering::Relaxed)
            {
                attempt_request.metadata_mut().insert(
                    baton_proto::RETRY_METADATA_KEY,
                    tonic::metadata::MetadataValue::from_static("1"),
                );
            }

            let adopted_leader =
                match tokio::time::timeout(timeout, send(channel, attempt_request)).await {
                    Ok(Ok(response)) => {
                        answered();
                        self.learn_leader(response.metadata());
                        return Ok(Answer {
                            body: response.into_inner(),
                            endpoint,
                        });
                    }
                    Ok(Err(status)) => match classify(&status) {
                        Disposition::Fail => {
                            answered();
                            self.learn_leader(status.metadata());
                            return Err(crate::convert::error(&status));
                        }
                        Disposition::Retry { transport } => {
                            maybe_delivered |= !crate::retry::never_proposed(&status);
                            last_failure = describe_failure(&endpoint, &status, timeout);
                            if transport {
                                self.mark_suspect(&endpoint);
                            }
                            self.learn_leader(status.metadata())
                        }
                    },
                    Err(_) => {
                        maybe_delivered = true;
                        last_failure =
                            format!("{endpoint}: no answer within {} ms", timeout.as_millis());
                        self.mark_suspect(&endpoint);
                        None
                    }
                };
            tracing::debug!(op, attempt, endpoint = %endpoint, failure = %last_failure, "attempt failed");
            self.note_failure(&endpoint);

            // A node that names another reachable node as the leader gets one immediate
            // retry there; a second redirect in a row waits like any failure, so two nodes
            // that name each other during an election cannot make the client spin.
            let is_redirect = adopted_leader.is_some_and(|leader| leader != endpoint);
            if is_redirect && !redirected {
                redirected = true;
                continue;
            }
            redirected = false;

            let delay = backoff.next_delay(rand::thread_rng().gen::<f64>());
            if Instant::now() + delay >= deadline {
                break;
            }
            tokio::time::sleep(delay).await;
        }
        if config.tls.is_none() && tls_hint(&last_failure).is_empty() {
            // A TLS node drops a plaintext client's connection: without TLS here, say so.
            if ["broken pipe", "connection reset"]
                .iter()
                .any(|cut| last_failure.contains(cut))
            {
                last_failure.push_str(
                    " (if the nodes speak TLS, give the client their CA: --tls-ca or \
                     BATON_TLS_CA)",
                );
            }
        }
        Err(Error::Unavailable { last: last_failure })
    }

    /// The configured retry deadline, counted from now.
    pub(crate) fn retry_deadline_from_now(&self) -> Instant {
        Instant::now() + self.inner.config.retry_deadline
    }

    /// This client as the holder named `name`.
    pub(super) fn holder(&self, name: &str) -> pb::Holder {
        pb::Holder {
            name: name.to_owned(),
            client_id: self.client_id().to_owned(),
        }
    }

    pub(super) fn next_request_id(&self) -> pb::RequestId {
        pb::RequestId {
            client_id: self.inner.retry_id.clone(),
            seq: self.inner.next_seq.fetch_add(1, Ordering::Relaxed),
            // The session every write acts as: this client's id, which its leases are
            // bound to (the request id's own client id is per process, for retries).
            session: self.client_id().to_owned(),
        }
    }

    /// Records the send time of a grant-producing request, before its first attempt.
    ///
    /// The send time of the *first* attempt is used even when a later attempt gets the
    /// answer: the cluster may have applied an earlier attempt whose reply was lost (the
    /// retry then returns that first answer), and the cluster's countdown runs from that
    /// apply. The first send precedes every apply of the request, so counting from it can
    /// only end the client's safe window early, never late.
    pub(super) fn grant_clock(&self) -> GrantClock {
        GrantClock {
            send_time: Instant::now(),
            drift_margin: self.inner.config.drift_margin,
        }
    }

    pub(super) fn routing(&self) -> MutexGuard<'_, Routing> {
        // The guarded maps stay consistent even if a holder panicked, so poisoning is ignored.
        self.inner
            .routing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The known leader, else the endpoint the rotation is at.
    pub(crate) fn pick_endpoint(&self) -> String {
        if let Some(leader) = self.routing().leader.clone() {
            return leader;
        }
        self.rotation_endpoint()
    }

    /// The endpoint the rotation is at, ignoring any leader hint: where requests that any
    /// node can serve (watches) go.
    pub(crate) fn rotation_endpoint(&self) -> String {
        let endpoints = &self.inner.config.endpoints;
        endpoints[self.inner.cursor.load(Ordering::Relaxed) % endpoints.len()].clone()
    }

    /// The validated configuration.
    pub(crate) fn config(&self) -> &ValidConfig {
        &self.inner.config
    }

    /// After a failed attempt at `endpoint`: forget it as the leader (the node that named it
    /// may have been wrong, or it lost leadership), and move the rotation past it.
    pub(crate) fn note_failure(&self, endpoint: &str) {
        {
            let mut routing = self.routing();
            if routing.leader.as_deref() == Some(endpoint) {
                routing.leader = None;
            }
        }
        self.advance_rotation(endpoint);
    }

    /// Moves the rotation past `endpoint`, if it is the one the rotation is at.
    pub(crate) fn advance_rotation(&self, endpoint: &str) {
        let endpoints = &self.inner.config.endpoints;
        let cursor = self.inner.cursor.load(Ordering::Relaxed);
        if endpoints[cursor % endpoints.len()] == endpoint {
            // Only the first of several concurrent failures at this endpoint moves the
            // cursor, so concurrent requests do not skip a healthy endpoint.
            let _ = self.inner.cursor.compare_exchange(
                cursor,
                cursor.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Adopts the leader named in a reply's metadata, unless that node recently failed at the
    /// transport level. Returns the leader if it was adopted.
    pub(crate) fn learn_leader(&self, metadata: &MetadataMap) -> Option<String> {
        if !self.inner.config.follow_leader_hints {
            return None;
        }
        let raw = metadata.get(LEADER_METADATA_KEY)?.to_str().ok()?;
        let leader = match normalize_endpoint(raw) {
            Ok(leader) => leader,
            Err(error) => {
                tracing::debug!(leader = raw, %error, "ignoring malformed leader hint");
                return None;
            }
        };
        let mut routing = self.routing();
        let suspect = routing
            .suspects
            .get(&leader)
            .is_some_and(|since| since.elapsed() < SUSPECT_FOR);
        if suspect {
            return None;
        }
        routing.leader = Some(leader.clone());
        Some(leader)
    }

    pub(super) fn learn_leader_from_status(&self, status: &ClusterStatus) {
        if !self.inner.config.follow_leader_hints {
            return;
        }
        if status.state == "leader" {
            self.routing().leader = Some(status.endpoint.clone());
            return;
        }
        if let Some(Ok(leader)) = status.leader_addr.as_deref().map(normalize_endpoint) {
            let mut routing = self.routing();
            let suspect = routing
                .suspects
                .get(&leader)
                .is_some_and(|since| since.elapsed() < SUSPECT_FOR);
            if !suspect {
                routing.leader = Some(leader);
            }
        }
    }

    pub(crate) fn mark_suspect(&self, endpoint: &str) {
        let mut routing = self.routing();
        if routing.suspects.len() >= SUSPECTS_MAX && !routing.suspects.contains_key(endpoint) {
            routing
                .suspects
                .retain(|_, since| since.elapsed() < SUSPECT_FOR);
            if routing.suspects.len() >= SUSPECTS_MAX {
                if let Some(oldest) = routing
                    .suspects
                    .iter()
                    .min_by_key(|(_, since)| **since)
                    .map(|(endpoint, _)| endpoint.clone())
                {
                    routing.suspects.remove(&oldest);
                }
            }
        }
        routing.suspects.insert(endpoint.to_owned(), Instant::now());
    }

    /// The channel to a normalised `host:port`, created on first use. Channels connect
    /// lazily and reconnect by themselves after a failure.
    pub(crate) fn channel(&self, endpoint: &str) -> Result<Channel, Error> {
        if let Some(channel) = self.routing().channels.get(endpoint) {
            return Ok(channel.clone());
        }
        let channel = self
            .endpoint(endpoint)?
            .connect_timeout(self.inner.config.request_timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        let mut routing = self.routing();
        if routing.channels.len() < CHANNELS_MAX {
            let channel = routing
                .channels
                .entry(endpoint.to_owned())
                .or_insert(channel);
            return Ok(channel.clone());
        }
        Ok(channel)
    }

    /// The transport endpoint for a normalised `host:port`: over TLS when configured, with
    /// the host as the name the node's certificate must carry.
    pub(super) fn endpoint(&self, endpoint: &str) -> Result<tonic::transport::Endpoint, Error> {
        let bad = |e: tonic::transport::Error| {
            Error::Config(format!("invalid endpoint {endpoint:?}: {e}"))
        };
        let Some(tls) = &self.inner.config.tls else {
            return tonic::transport::Endpoint::from_shared(endpoint_uri(endpoint)).map_err(bad);
        };
        let host = endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&tls.ca_pem))
            .domain_name(host);
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        tonic::transport::Endpoint::from_shared(format!("https://{endpoint}"))
            .map_err(bad)?
            .tls_config(config)
            .map_err(bad)
    }

    /// A request carrying `message` with this client's credentials (its bearer token).
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        self.inner.config.request(message)
    }

    /// A new channel to a normalised `host:port` for one long-lived stream, not cached: its
    /// own connection, with HTTP/2 keep-alive pings so that a node that goes silent (host
    /// down, network partition) breaks the stream within `request_timeout` of a missed ping
    /// instead of leaving it hanging.
    pub(crate) fn stream_channel(&self, endpoint: &str) -> Result<Channel, Error> {
        let config = &self.inner.config;
        Ok(self
            .endpoint(endpoint)?
            .connect_timeout(config.request_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(STREAM_KEEPALIVE_INTERVAL)
            .keep_alive_timeout(config.request_timeout)
            .keep_alive_while_idle(true)
            .connect_lazy())
    }
}

/// One line saying why an attempt at `endpoint` failed, for [`Error::Unavailable`].
pub(crate) fn describe_failure(
    endpoint: &str,
    status: &tonic::Status,
    timeout: Duration,
) -> String {
    if is_local_timeout(status) {
        return format!("{endpoint}: no answer within {} ms", timeout.as_millis());
    }
    let mut text = format!("{endpoint}: {:?}: {}", status.code(), status.message());
    // A transport failure's message is generic ("tcp connect error"); its cause says more
    // (connection refused, no route to host).
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.push_str(tls_hint(&text));
    text
}

/// What a failure that looks like one side speaking TLS and the other not means: a TLS node
/// closes a plaintext client's connection with a TLS alert, which HTTP/2 reads as a frame of
/// invalid size; a plaintext node's HTTP/2 bytes are not a TLS record to a TLS client.
pub(super) fn tls_hint(failure: &str) -> &'static str {
    if failure.contains("frame with invalid size") {
        " (this looks like a node that speaks TLS: give the client the nodes' CA, --tls-ca or \
         BATON_TLS_CA)"
    } else if failure.contains("InvalidContentType") {
        " (this looks like a node that speaks plaintext: drop --tls-ca, or turn TLS on at the \
         node)"
    } else {
        ""
    }
}

/// The transport gave up waiting for the answer (the request's own timeout), as opposed to
/// the node answering with an error.
pub(super) fn is_local_timeout(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        if cause.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The calls that carry a request id (writes): an answer to one means the cluster knows this
/// instance's retry id.
const WRITE_OPS: &[&str] = &[
    "claim",
    "claim_set",
    "claim_next",
    "wait",
    "leave_line",
    "renew",
    "release",
    "revoke",
    "update",
    "assign",
    "post",
    "offer",
    "accept",
    "decline",
    "cancel",
    "set_quarantine",
    "set_access",
];
