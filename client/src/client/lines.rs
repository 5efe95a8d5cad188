//! [`Client::wait_in_line`]: waiting for a key in its line in the cluster, granted in the
//! entry that frees it.

use super::*;
use crate::endings::{Heard, LineGrant};
use crate::lines::{InLine, LineOutcome};
use crate::types::Sharing;

impl Client {
    /// One step of waiting in line for `key`: if nothing blocks it, claims it (as
    /// [`Client::claim`]); otherwise puts this session in the key's line, or, if it waits
    /// there already, renews its place (a place not renewed within `ttl` lapses). A session
    /// the line granted the key to gets [`LineOutcome::Granted`] with `already_held` (the
    /// lease renewed). Refused with reason `line_full` when [`crate::WAITERS_PER_KEY_MAX`]
    /// already wait.
    pub async fn wait_once(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
    ) -> Result<LineOutcome, Error> {
        self.wait_permit_once(key, holder_name, ttl, 1).await
    }

    /// [`Client::wait_once`] for one of `permits` permits of `key`, or to share it
    /// ([`Sharing::Shared`]): granted as [`Client::claim_permit`] would be if a permit is
    /// free and no one waits ahead, else in the key's line (data format 13 on every member).
    pub async fn wait_permit_once(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
    ) -> Result<LineOutcome, Error> {
        let (permits, shared) = wire_sharing(permits.into())?;
        let request = pb::WaitRequest {
            key: key.to_owned(),
            holder: Some(self.holder(holder_name)),
            ttl_ms: duration_ms(ttl),
            request_id: Some(self.next_request_id()),
            permits,
            shared,
        };
        let clock = self.grant_clock();
        let answer = self
            .call("wait", request, |channel, request| async move {
                BatonClient::new(channel).wait(request).await
            })
            .await?;
        convert::line_outcome(key, answer.body, clock)
    }

    /// Takes this session out of `key`'s line. Returns whether it waited there, and the
    /// lease it holds on the key if the line granted it the key first (release it if it is
    /// no longer wanted).
    pub async fn leave_line(
        &self,
        key: &str,
        holder_name: &str,
    ) -> Result<(bool, Option<LeaseInfo>), Error> {
        let request = pb::LeaveLineRequest {
            key: key.to_owned(),
            holder: Some(self.holder(holder_name)),
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("leave_line", request, |channel, request| async move {
                BatonClient::new(channel).leave_line(request).await
            })
            .await?;
        let holds = convert::optional_lease(answer.body.holds)?;
        Ok((answer.body.was_waiting, holds))
    }

    /// Waits in `key`'s line until the cluster grants it to this session, or `timeout` has
    /// passed. Waiters are granted the key in the order they joined, each in the entry that
    /// frees the key; a waiter keeps its place by renewing it every `ttl / 3` (done here), and
    /// loses it if it stops (its process died: the place lapses after `ttl`).
    ///
    /// The grant is pushed by the leader on this session's endings stream as the granting
    /// entry applies (`crate::endings`): no watch and no further round trip. A lease so
    /// heard is safe to act on: the grant's entry comes after the apply of this session's
    /// latest wait that answered "in line" (had the key been granted before it, that wait
    /// would have answered "granted"; a grant of a lower revision is an earlier one, since
    /// ended, and is ignored), and every node counts the lease's TTL from its own apply of
    /// the grant, so the safe deadline counts from that wait's send time. If the stream cannot tell (a cluster
    /// that does not push, a session away longer than the leader's window), the next renewal
    /// of the place finds the grant.
    ///
    /// On timeout the session leaves the line and gets [`LineOutcome::InLine`] with its last
    /// place: an answer, not an error (if the key was granted to it meanwhile, it gets the
    /// grant instead).
    pub async fn wait_in_line(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<LineOutcome, Error> {
        self.wait_permit_in_line(key, holder_name, ttl, 1, timeout)
            .await
    }

    /// [`Client::wait_in_line`] for one of `permits` permits of `key`, or to share it: the
    /// head of the line is granted a permit in the write that frees one, and hears it on
    /// the stream with every holder of the key. From an older node, whose push names no
    /// holders, a grant heard is confirmed with one more wait, which answers with them.
    pub async fn wait_permit_in_line(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
        timeout: Duration,
    ) -> Result<LineOutcome, Error> {
        let sharing = permits.into();
        let deadline = Instant::now() + timeout;
        let mut sent = Instant::now();
        let mut place = match self
            .wait_permit_once(key, holder_name, ttl, sharing)
            .await?
        {
            LineOutcome::InLine(place) => place,
            granted => return Ok(granted),
        };
        let renew_every = (ttl / 3).max(Duration::from_millis(50));
        let mut listening = self.follow_line(key, place.revision);
        let mut heard_all = false;
        loop {
            let renew_at = (Instant::now() + renew_every).min(deadline);
            // Wake for a grant to this session, or to renew the place, or at the deadline.
            let asked = tokio::select! {
                heard = &mut listening.heard, if !heard_all => {
                    heard_all = true;
                    match heard {
                        Ok(Heard::Granted(grant))
                            if grant.revision > place.revision
                                && sharing != Sharing::Permits(1)
                                && grant.permits.is_none() =>
                        {
                            // A permit pushed without its holders: the renewal that confirms
                            // it names every one.
                            let confirmed = self.wait_permit_once(key, holder_name, ttl, sharing);
                            return Ok(from_the_line(confirmed.await?));
                        }
                        Ok(Heard::Granted(grant)) if grant.revision > place.revision => {
                            return Ok(LineOutcome::Granted(
                                self.granted_from_line(holder_name, ttl, grant, sent),
                            ));
                        }
                        // An earlier wait's grant: listen on.
                        Ok(Heard::Granted(_)) => {
                            listening = self.follow_line(key, place.revision);
                            heard_all = false;
                            continue;
                        }
                        // The stream could not say: ask the cluster now.
                        _ => true,
                    }
                }
                _ = tokio::time::sleep_until(renew_at.into()) => false,
            };
            if !asked && Instant::now() >= deadline {
                drop(listening);
                return self
                    .stop_waiting(key, holder_name, ttl, sharing, place)
                    .await;
            }
            let sending = Instant::now();
            match self
                .wait_permit_once(key, holder_name, ttl, sharing)
                .await?
            {
                LineOutcome::InLine(now) => {
                    place = now;
                    sent = sending;
                    if heard_all {
                        listening = self.follow_line(key, place.revision);
                        heard_all = false;
                    }
                }
                granted => return Ok(from_the_line(granted)),
            }
        }
    }

    /// The grant the stream told this session of, its safe deadline counted from `sent`:
    /// when this session sent its latest wait that answered "in line".
    fn granted_from_line(
        &self,
        holder_name: &str,
        ttl: Duration,
        mut grant: LineGrant,
        sent: Instant,
    ) -> crate::types::Grant {
        let permits = grant.permits.take();
        let clock = convert::GrantClock {
            send_time: sent,
            ..self.grant_clock()
        };
        let lease = LeaseInfo {
            key: grant.key,
            holder_name: holder_name.to_owned(),
            holder_client_id: self.client_id().to_owned(),
            token: grant.token,
            ttl,
            held_since_unix_ms: grant.at_unix_ms,
            renewed_at_unix_ms: grant.at_unix_ms,
            remaining: (sent + ttl).saturating_duration_since(Instant::now()),
            basis: grant.revision,
        };
        crate::types::Grant {
            permits: permits.map(Box::new),
            ..clock.grant(lease, false, grant.revision, grant.assignment)
        }
    }

    /// [`Client::wait_in_line`], answered as a claim: granted (at once or from the line),
    /// or, after `timeout`, out of the line and answered as [`Client::claim`] answers then
    /// (who holds the key; a quarantine is refused). On a cluster not yet all on data
    /// format 11 (a rolling upgrade), waits by claiming again instead ([`Client::claim_wait`]).
    pub async fn claim_in_line(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<ClaimOutcome, Error> {
        self.claim_permit_in_line(key, holder_name, ttl, 1, timeout)
            .await
    }

    /// [`Client::claim_in_line`] for one of `permits` permits of `key`, or to share it
    /// ([`Client::wait_permit_in_line`]); on a cluster not yet all on data format 13, waits
    /// by claiming again instead ([`Client::claim_permit_wait`]).
    pub async fn claim_permit_in_line(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
        timeout: Duration,
    ) -> Result<ClaimOutcome, Error> {
        let sharing = permits.into();
        let waited = self
            .wait_permit_in_line(key, holder_name, ttl, sharing, timeout)
            .await;
        match waited {
            Ok(LineOutcome::Granted(grant)) => Ok(ClaimOutcome::Granted(grant)),
            Ok(LineOutcome::InLine(_)) => self.claim_permit(key, holder_name, ttl, sharing).await,
            Err(Error::Refused(r)) if r.reason == crate::error::RefusalReason::FormatPending => {
                self.claim_permit_wait(key, holder_name, ttl, sharing, timeout)
                    .await
            }
            Err(error) => Err(error),
        }
    }

    /// [`Client::claim_in_line`], with a [`crate::LeaseGuard`] once the key is granted.
    pub async fn claim_in_line_guarded(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<crate::GuardedClaim, Error> {
        self.claim_permit_in_line_guarded(key, holder_name, ttl, 1, timeout)
            .await
    }

    /// [`Client::claim_permit_in_line`], with a [`crate::LeaseGuard`] once a permit (or a
    /// share) is granted.
    pub async fn claim_permit_in_line_guarded(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
        timeout: Duration,
    ) -> Result<crate::GuardedClaim, Error> {
        self.guard_room()?;
        let outcome = self
            .claim_permit_in_line(key, holder_name, ttl, permits, timeout)
            .await?;
        Ok(self.guard(outcome))
    }

    /// Leaves the line at the end of a wait; if the line granted the key meanwhile, returns
    /// that grant (renewed, so its safe deadline is this client's own).
    async fn stop_waiting(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        sharing: Sharing,
        place: InLine,
    ) -> Result<LineOutcome, Error> {
        let (_, holds) = self.leave_line(key, holder_name).await?;
        if holds.is_none() {
            return Ok(LineOutcome::InLine(place));
        }
        let confirmed = self.wait_permit_once(key, holder_name, ttl, sharing);
        Ok(from_the_line(confirmed.await?))
    }
}

/// A grant the line made while this session waited, as its caller sees it: a new grant (the
/// confirming wait renewed it, and says `already_held`), not a key it held before waiting.
fn from_the_line(outcome: LineOutcome) -> LineOutcome {
    match outcome {
        LineOutcome::Granted(mut grant) => {
            grant.already_held = false;
            LineOutcome::Granted(grant)
        }
        in_line => in_line,
    }
}
