//! Watches: every event of a key prefix, in revision order, across node failures.
//!
//! [`Client::watch`] returns a [`WatchStream`]. Any node serves a watch from its own window
//! of recent events (followers too; watches are not forwarded), so the stream talks to the
//! endpoint the client's rotation is at and ignores leader hints. When the stream breaks
//! (the node dies, restarts, or the connection drops) it connects again, to the next
//! endpoint, and asks from the revision of the last event it delivered (one entry may carry
//! several events: a set's keys, a release and the grant to the next in line), skipping the
//! ones it delivered: the caller sees every event once, in order, with no gap. It gives up only when no node accepts the watch
//! for the client's retry deadline ([`Error::Unavailable`]), when every endpoint says the
//! revision is older than its window ([`Error::Compacted`]), or on a refusal that retrying
//! cannot change ([`Error::InvalidArgument`]). Each of those is the stream's last item.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use futures::stream::{BoxStream, FusedStream, Stream, StreamExt};
use rand::Rng;
use tonic::codec::Streaming;
use tonic::Code;

use crate::client::{describe_failure, Client};
use crate::convert;
use crate::error::Error;
use crate::history::Event;
use crate::retry::{classify, Backoff, Disposition, BACKOFF_MAX};

/// `Event.kind` of the node's progress markers (`baton_proto::WATCH_PROGRESS_KIND`).
const PROGRESS_KIND: &str = baton_proto::WATCH_PROGRESS_KIND;

/// A stream that lasted this long before it broke was healthy: the watch connects again at
/// once, with its backoff started over. One that broke sooner waits a backoff step first, so
/// a node that accepts watches and drops them at once cannot make the client spin.
const STREAM_HEALTHY_AFTER: Duration = BACKOFF_MAX;

impl Client {
    /// Every event of keys under `prefix` (`""` for all keys), in revision order, from
    /// `from_revision` on (`0` = only new ones: events after the revision of the first node
    /// the stream reaches), then live ones as they happen.
    ///
    /// Reconnects by itself when a node fails or the stream breaks (rotating endpoints,
    /// jittered backoff, giving up only after the retry deadline without any node answering),
    /// resuming from the last revision received + 1, so the caller sees no gap and no repeat.
    /// The stream is lazy: nothing is sent until it is first polled.
    ///
    /// Its last item, if it ends, is the error that ended it:
    /// - [`Error::Compacted`]: the revision to resume from is older than the window of every
    ///   node asked (the watcher fell too far behind, or `from_revision` was too old). Re-read
    ///   what you track (the board, a key's history) and watch from that read's revision + 1.
    /// - [`Error::Unavailable`]: no node accepted the watch for the retry deadline.
    /// - [`Error::InvalidArgument`]: the prefix is not valid.
    ///
    /// Resume a dropped stream with [`Client::watch_from`]`(prefix, stream.resume_point())`:
    /// exact even when the stream was dropped between two events of one revision.
    ///
    /// ```no_run
    /// # async fn example(client: baton_client::Client) -> Result<(), baton_client::Error> {
    /// use baton_client::{Error, ReadMode};
    /// use futures::StreamExt;
    ///
    /// // Act on the state as of a read, then on every change after it: nothing is missed.
    /// let board = client.board("tasks/", 0, "", ReadMode::Linearizable).await?;
    /// let mut events = client.watch("tasks/", board.revision + 1);
    /// while let Some(item) = events.next().await {
    ///     match item {
    ///         Ok(event) => println!("{} {} {}", event.revision, event.key, event.kind),
    ///         // Fell out of the window: read the board again and watch from its revision + 1.
    ///         Err(Error::Compacted { .. }) => break,
    ///         Err(error) => return Err(error),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch(&self, prefix: &str, from_revision: u64) -> WatchStream {
        self.watch_from(
            prefix,
            ResumePoint {
                next_revision: from_revision,
                delivered_of_last: 0,
            },
        )
    }

    /// [`Client::watch`] from where an earlier stream stopped ([`WatchStream::resume_point`]):
    /// from the revision after the last event it delivered, or, if it stopped between two
    /// events of one revision (an entry may carry several: a set's keys, a release and the
    /// grant to the next in line), from the rest of that revision. Nothing missed, nothing
    /// repeated.
    pub fn watch_from(&self, prefix: &str, from: ResumePoint) -> WatchStream {
        let from = ResumePoint {
            delivered_of_last: if from.next_revision > 0 {
                from.delivered_of_last
            } else {
                0
            },
            ..from
        };
        let published = Arc::new(Mutex::new(from));
        let watcher = Watcher {
            client: self.clone(),
            prefix: prefix.to_owned(),
            next: from.next_revision,
            published: Arc::clone(&published),
            current: None,
            backoff: Backoff::new(),
            outage_since: None,
            last_failure: String::from("no attempt was made"),
            compacted_at: HashSet::new(),
            compacted: None,
            finished: false,
            at_last: from.delivered_of_last,
            repeats: 0,
        };
        let events = futures::stream::unfold(watcher, |mut watcher| async move {
            let item = watcher.next_item().await?;
            Some((item, watcher))
        })
        .boxed();
        WatchStream {
            events,
            published,
            ended: false,
        }
    }
}

/// Where a watch stopped: the revision after the last event it delivered, and how many
/// events of that last revision it delivered (a later watch from here delivers the rest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResumePoint {
    pub next_revision: u64,
    /// Events of revision `next_revision - 1` delivered already (0: none, or all of it is
    /// known delivered).
    pub delivered_of_last: u64,
}

/// The events of a watch ([`Client::watch`]): a [`Stream`] of `Result<Event, Error>` whose
/// only error is its last item. Dropping it ends the watch on the node.
pub struct WatchStream {
    events: BoxStream<'static, Result<Event, Error>>,
    published: Arc<Mutex<ResumePoint>>,
    /// The stream returned `None`; it is never polled again.
    ended: bool,
}

impl WatchStream {
    /// The revision the watch resumes from: the one after the last event delivered, or the
    /// `from_revision` it was started with while none has been. A watch started from `0`
    /// says `0` until its first connection has fixed where "new" starts.
    /// A watch resumed from it skips the rest of the last revision if the stream stopped
    /// between two of its events: resume with [`WatchStream::resume_point`] instead.
    pub fn next_revision(&self) -> u64 {
        self.resume_point().next_revision
    }

    /// Where a watch resumes from ([`Client::watch_from`]) to miss nothing and repeat
    /// nothing of what this one delivered.
    pub fn resume_point(&self) -> ResumePoint {
        *self.published.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Stream for WatchStream {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let item = std::task::ready!(self.events.poll_next_unpin(cx));
        self.ended = item.is_none();
        Poll::Ready(item)
    }
}

impl FusedStream for WatchStream {
    fn is_terminated(&self) -> bool {
        self.ended
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("next_revision", &self.next_revision())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// The state behind a [`WatchStream`].
struct Watcher {
    client: Client,
    prefix: String,
    /// The revision after the last event delivered (every event below it was delivered or
    /// is before the start); `0` until a watch from "now" has been placed.
    next: u64,
    /// `next` and `at_last`, for [`WatchStream::resume_point`].
    published: Arc<Mutex<ResumePoint>>,
    /// The stream being read, if one is open.
    current: Option<Open>,
    backoff: Backoff,
    /// When the current outage began: the first failure since a node last accepted the
    /// watch. The watch gives up a retry deadline after it.
    outage_since: Option<Instant>,
    /// The latest failure, for [`Error::Unavailable`].
    last_failure: String,
    /// Endpoints that refused the resume revision as compacted during this outage.
    compacted_at: HashSet<String>,
    /// The latest of those refusals.
    compacted: Option<Error>,
    /// The last item was yielded.
    finished: bool,
    /// How many events of revision `next - 1` were delivered (0: none, or a progress
    /// marker moved `next`).
    at_last: u64,
    /// Events of revision `next - 1` still to skip on the stream being read: the ones
    /// delivered before it was opened.
    repeats: u64,
}

/// An accepted watch.
struct Open {
    endpoint: String,
    events: Streaming<pb::Event>,
    since: Instant,
}

/// What the watch does after a step.
enum Next {
    /// Read from the open stream, or try to open one, at once.
    Now,
    /// Wait a backoff step (or give up, past the deadline), then try again.
    Wait,
    /// Yield this error and end.
    End(Error),
}

/// Why a watch could not be opened at one node.
enum OpenFailure {
    Config(Error),
    Status(tonic::Status),
}

impl From<tonic::Status> for OpenFailure {
    fn from(status: tonic::Status) -> Self {
        OpenFailure::Status(status)
    }
}

impl Watcher {
    /// The next item, or `None` once the watch has ended.
    async fn next_item(&mut self) -> Option<Result<Event, Error>> {
        while !self.finished {
            let next = match self.current.as_mut() {
                Some(open) => match open.events.message().await {
                    Ok(Some(event)) => {
                        self.answered();
                        // A progress marker only moves the resume point (so a quiet prefix on
                        // a busy cluster does not fall out of the window); it is no event.
                        if event.kind == PROGRESS_KIND {
                            if event.revision >= self.next {
                                self.at_last = 0;
                                self.set_next(event.revision + 1);
                            }
                            continue;
                        }
                        if !self.is_new(event.revision) {
                            continue;
                        }
                        return Some(Ok(convert::event(event)));
                    }
                    Ok(None) => self.broken(None),
                    Err(status) => self.broken(Some(status)),
                },
                None => self.open().await,
            };
            match next {
                Next::Now => {}
                Next::Wait => {
                    if let Some(error) = self.wait().await {
                        self.finished = true;
                        return Some(Err(error));
                    }
                }
                Next::End(error) => {
                    self.finished = true;
                    return Some(Err(error));
                }
            }
        }
        None
    }

    /// Whether an event of `revision` is one the caller has not had: after the last one
    /// delivered, or another of the same revision (one entry may carry several events: a
    /// set's keys, a release and the grant to the next in line). A resumed stream starts at
    /// that revision again, and its first `at_last` events there are the ones delivered.
    fn is_new(&mut self, revision: u64) -> bool {
        if revision >= self.next {
            self.at_last = 1;
            self.set_next(revision + 1);
            return true;
        }
        if self.at_last > 0 && revision + 1 == self.next {
            if self.repeats > 0 {
                self.repeats -= 1;
                return false;
            }
            self.at_last += 1;
            self.publish();
            return true;
        }
        // A repeat (a node resending what another node already sent) or an event before
        // the start: the caller has it or did not ask for it.
        false
    }

    fn set_next(&mut self, next: u64) {
        self.next = next;
        self.publish();
    }

    fn publish(&self) {
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) = ResumePoint {
            next_revision: self.next,
            delivered_of_last: self.at_last,
        };
    }

    /// Tries to open a watch at the endpoint the rotation is at.
    async fn open(&mut self) -> Next {
        let endpoint = self.client.rotation_endpoint();
        let timeout = self.client.config().request_timeout;
        match tokio::time::timeout(timeout, self.start(&endpoint, timeout)).await {
            Ok(Ok(events)) => {
                tracing::debug!(endpoint = %endpoint, from = self.next, "watch opened");
                self.current = Some(Open {
                    endpoint,
                    events,
                    since: Instant::now(),
                });
                self.answered();
                Next::Now
            }
            Ok(Err(OpenFailure::Config(error))) => Next::End(error),
            Ok(Err(OpenFailure::Status(status))) => {
                if status.code() == Code::OutOfRange {
                    return self.refused_as_compacted(endpoint, &status);
                }
                match classify(&status) {
                    Disposition::Fail => Next::End(crate::convert::error(&status)),
                    Disposition::Retry { transport } => {
                        let failure = describe_failure(&endpoint, &status, timeout);
                        self.failed(&endpoint, failure, transport);
                        Next::Wait
                    }
                }
            }
            Err(_) => {
                let failure = format!("{endpoint}: no answer within {} ms", timeout.as_millis());
                self.failed(&endpoint, failure, true);
                Next::Wait
            }
        }
    }

    /// Asks the node at `endpoint` for the watch. A watch from "now" is first placed at the
    /// revision after the node's applied index (a local read), so that a break before the
    /// first event resumes from there instead of leaving a gap.
    async fn start(
        &mut self,
        endpoint: &str,
        timeout: Duration,
    ) -> Result<Streaming<pb::Event>, OpenFailure> {
        let channel = self
            .client
            .stream_channel(endpoint)
            .map_err(OpenFailure::Config)?;
        let mut node = BatonClient::new(channel);
        if self.next == 0 {
            let mut request = self.client.request(pb::BoardRequest {
                prefix: self.prefix.clone(),
                limit: 1,
                start_after: String::new(),
                stale: true,
            });
            request.set_timeout(timeout);
            let board = node.board(request).await?.into_inner();
            self.set_next(board.revision + 1);
        }
        // From the last revision delivered if the caller had some of its events (the rest
        // may follow), skipping those; else from the one after. No grpc-timeout: the stream
        // lasts as long as the caller reads it.
        self.repeats = self.at_last;
        let from_revision = if self.at_last > 0 {
            self.next - 1
        } else {
            self.next
        };
        let request = self.client.request(pb::WatchRequest {
            prefix: self.prefix.clone(),
            from_revision,
        });
        Ok(node.watch(request).await?.into_inner())
    }

    /// The open stream ended (`None`) or failed mid-way.
    fn broken(&mut self, status: Option<tonic::Status>) -> Next {
        let Some(open) = self.current.take() else {
            return Next::Now;
        };
        let endpoint = open.endpoint;
        let healthy = open.since.elapsed() >= STREAM_HEALTHY_AFTER;
        match status {
            None => {
                let failure = format!("{endpoint}: the node ended the watch stream");
                self.failed(&endpoint, failure, false);
            }
            // The node's window moved past this watch (a slow reader, a snapshot install).
            Some(status) if status.code() == Code::OutOfRange => {
                return self.refused_as_compacted(endpoint, &status);
            }
            Some(status) if status.code() == Code::InvalidArgument => {
                return Next::End(crate::convert::error(&status));
            }
            // Anything else after the node accepted the watch is the stream breaking: the
            // node died or restarted, or the connection dropped.
            Some(status) => {
                let transport = classify(&status) == Disposition::Retry { transport: true };
                let timeout = self.client.config().request_timeout;
                let failure = describe_failure(&endpoint, &status, timeout);
                self.failed(&endpoint, failure, transport);
            }
        }
        if healthy {
            self.backoff = Backoff::new();
            Next::Now
        } else {
            Next::Wait
        }
    }

    /// A node refused the resume revision as older than its window. Another node may keep
    /// a longer window (each keeps its own), so every endpoint is asked before giving up.
    fn refused_as_compacted(&mut self, endpoint: String, status: &tonic::Status) -> Next {
        let error = Error::compacted(status.message());
        tracing::debug!(endpoint = %endpoint, %error, "watch refused as compacted");
        self.outage_since.get_or_insert_with(Instant::now);
        self.client.advance_rotation(&endpoint);
        self.last_failure = format!("{endpoint}: {error}");
        self.compacted_at.insert(endpoint);
        self.compacted = Some(error.clone());
        let everywhere = self
            .client
            .endpoints()
            .iter()
            .all(|e| self.compacted_at.contains(e));
        if everywhere {
            Next::End(error)
        } else {
            Next::Now
        }
    }

    /// A node accepted the watch or sent an event: the outage, if any, is over.
    fn answered(&mut self) {
        self.outage_since = None;
        self.compacted_at.clear();
        self.compacted = None;
    }

    /// An attempt at `endpoint` failed, or its stream broke: move on to the next endpoint.
    fn failed(&mut self, endpoint: &str, failure: String, transport: bool) {
        tracing::debug!(endpoint = %endpoint, failure = %failure, "watch attempt failed");
        if transport {
            self.client.mark_suspect(endpoint);
        }
        self.client.note_failure(endpoint);
        self.outage_since.get_or_insert_with(Instant::now);
        self.last_failure = failure;
    }

    /// Sleeps a backoff step; or, when that would end past the retry deadline counted from
    /// the start of the outage, returns the error to end with instead.
    async fn wait(&mut self) -> Option<Error> {
        let delay = self.backoff.next_delay(rand::thread_rng().gen::<f64>());
        let since = *self.outage_since.get_or_insert_with(Instant::now);
        if Instant::now() + delay >= since + self.client.config().retry_deadline {
            // A node that answered "compacted" says more than the ones that did not answer.
            return Some(self.compacted.take().unwrap_or_else(|| Error::Unavailable {
                last: self.last_failure.clone(),
            }));
        }
        tokio::time::sleep(delay).await;
        None
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
