//! Observing one key as users of etcd's `Election.Observe` and client-go's leader election
//! know it: who holds it and what its record says now, then again at every change.
//!
//! Leader election with baton (docs/election.md): campaign = claim the key (`baton run KEY
//! -- cmd`, or a [`crate::LeaseGuard`]); proclaim = the holder writes its record (a field
//! others read); resign = release; a graceful transfer = a handoff to a named successor;
//! observe = [`Client::observe`].

use futures::stream::{self, BoxStream, StreamExt};

use crate::record::RecordView;
use crate::types::ReadMode;
use crate::watch::WatchStream;
use crate::{Client, Error};

/// What an observer compares to tell a change: the holder (session and token) and the
/// record. A renewal changes neither.
fn looks(view: &RecordView) -> (Option<(&str, u64)>, &crate::Record) {
    (
        view.lease
            .as_ref()
            .map(|l| (l.holder_client_id.as_str(), l.token)),
        &view.record,
    )
}

struct Observer {
    client: Client,
    key: String,
    /// The watch, from the revision after the latest view's; `None` before the first view.
    watch: Option<WatchStream>,
    last: Option<RecordView>,
    ended: bool,
}

impl Observer {
    /// The next view that differs from the last one yielded, or the error that ends the
    /// observation.
    async fn next(&mut self) -> Option<Result<RecordView, Error>> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(watch) = &mut self.watch {
                // Wait for an event of this key (the watch is of a prefix: skip the others).
                match watch.next().await {
                    Some(Ok(event)) if event.key != self.key => continue,
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        self.ended = true;
                        return Some(Err(error));
                    }
                    None => {
                        self.ended = true;
                        return None;
                    }
                }
            }
            let view = match self.client.record(&self.key, ReadMode::Linearizable).await {
                Ok(view) => view,
                Err(error) => {
                    self.ended = true;
                    return Some(Err(error));
                }
            };
            if self.watch.is_none() {
                self.watch = Some(self.client.watch(&self.key, view.revision + 1));
            }
            let changed = self
                .last
                .as_ref()
                .is_none_or(|last| looks(last) != looks(&view));
            if changed {
                self.last = Some(view.clone());
                return Some(Ok(view));
            }
        }
    }
}

impl Client {
    /// Observes `key`: yields its view now (its holder, if any, and its record), then again
    /// after every change of its holder (a claim, a release, an expiry, a revoke, a handoff)
    /// or of its record (the holder proclaiming a field). Each view is a linearizable read
    /// made after the watch told of the change, so views never go back; changes that come
    /// close together may arrive as one view (the latest). Renewals are not changes.
    ///
    /// Ends after an error item: the watch's (`Compacted`: the observer was away longer than
    /// the cluster's window of recent events; observe again) or a read's.
    ///
    /// ```no_run
    /// # async fn example(client: baton_client::Client) -> Result<(), baton_client::Error> {
    /// use futures::StreamExt;
    ///
    /// let mut views = client.observe("services/scheduler/leader");
    /// while let Some(view) = views.next().await {
    ///     let view = view?;
    ///     match &view.lease {
    ///         Some(lease) => println!("leader {} (token {})", lease.holder_name, lease.token),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self, key: &str) -> BoxStream<'static, Result<RecordView, Error>> {
        let observer = Observer {
            client: self.clone(),
            key: key.to_owned(),
            watch: None,
            last: None,
            ended: false,
        };
        stream::unfold(observer, |mut observer| async move {
            let item = observer.next().await?;
            Some((item, observer))
        })
        .boxed()
    }
}
