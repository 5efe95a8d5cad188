//! Conversions between the generated `baton.v1` types and the client's own types: the only
//! place that looks inside a protobuf reply. A reply missing a field the protocol promises
//! becomes [`Error::Protocol`], never a panic or a silent default.

use std::time::{Duration, Instant};

use baton_proto::v1 as pb;

use crate::error::Error;
use crate::types::{
    safe_deadline, Board, ClaimOutcome, ClusterStatus, Grant, LeaseInfo, Member, Probe,
    ReleaseOutcome, RenewOutcome, TokenCheck,
};

/// How to turn a granted or renewed lease into a [`Grant`]: the caller's first send time
/// and drift margin fix its safe deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrantClock {
    /// When the client sent the first attempt of the request.
    pub send_time: Instant,
    /// The client's configured drift margin.
    pub drift_margin: f64,
}

impl GrantClock {
    fn grant(self, lease: LeaseInfo, already_held: bool, revision: u64) -> Grant {
        let safe_deadline = safe_deadline(self.send_time, lease.ttl, self.drift_margin);
        Grant {
            lease,
            already_held,
            revision,
            safe_deadline,
        }
    }
}

pub(crate) fn lease(lease: pb::Lease) -> Result<LeaseInfo, Error> {
    let holder = lease
        .holder
        .ok_or_else(|| Error::Protocol(format!("lease on {:?} names no holder", lease.key)))?;
    Ok(LeaseInfo {
        key: lease.key,
        holder_name: holder.name,
        holder_client_id: holder.client_id,
        token: lease.token,
        ttl: Duration::from_millis(lease.ttl_ms),
        held_since_unix_ms: lease.held_since_unix_ms,
        renewed_at_unix_ms: lease.renewed_at_unix_ms,
        remaining: Duration::from_millis(lease.remaining_ms),
        basis: lease.basis,
    })
}

fn required_lease(lease_opt: Option<pb::Lease>, what: &str) -> Result<LeaseInfo, Error> {
    lease(lease_opt.ok_or_else(|| Error::Protocol(format!("{what} without a lease")))?)
}

fn optional_lease(lease_opt: Option<pb::Lease>) -> Result<Option<LeaseInfo>, Error> {
    lease_opt.map(lease).transpose()
}

pub(crate) fn claim_outcome(
    response: pb::ClaimResponse,
    clock: GrantClock,
) -> Result<ClaimOutcome, Error> {
    use pb::claim_response::Outcome;
    match response.outcome {
        Some(Outcome::Granted(granted)) => Ok(ClaimOutcome::Granted(clock.grant(
            required_lease(granted.lease, "claim granted")?,
            granted.already_held,
            response.revision,
        ))),
        Some(Outcome::Held(held)) => Ok(ClaimOutcome::Held {
            lease: required_lease(held.lease, "claim held")?,
            same_name_other_process: held.same_name_other_process,
        }),
        None => Err(Error::Protocol("claim reply without an outcome".into())),
    }
}

pub(crate) fn renew_outcome(
    response: pb::RenewResponse,
    clock: GrantClock,
) -> Result<RenewOutcome, Error> {
    use pb::renew_response::Outcome;
    match response.outcome {
        // The renewing client held the key by definition, hence `already_held`.
        Some(Outcome::Renewed(renewed)) => Ok(RenewOutcome::Renewed(clock.grant(
            lease(renewed)?,
            true,
            response.revision,
        ))),
        Some(Outcome::Lost(lost)) => Ok(RenewOutcome::Lost {
            current: optional_lease(lost.current)?,
        }),
        None => Err(Error::Protocol("renew reply without an outcome".into())),
    }
}

pub(crate) fn release_outcome(response: pb::ReleaseResponse) -> Result<ReleaseOutcome, Error> {
    use pb::release_response::Outcome;
    match response.outcome {
        Some(Outcome::Released(released)) => Ok(ReleaseOutcome::Released(lease(released)?)),
        Some(Outcome::Lost(lost)) => Ok(ReleaseOutcome::Lost {
            current: optional_lease(lost.current)?,
        }),
        None => Err(Error::Protocol("release reply without an outcome".into())),
    }
}

pub(crate) fn probe(response: pb::ProbeResponse) -> Result<Probe, Error> {
    Ok(Probe {
        lease: optional_lease(response.lease)?,
        revision: response.revision,
    })
}

pub(crate) fn board(response: pb::BoardResponse) -> Result<Board, Error> {
    Ok(Board {
        leases: response
            .leases
            .into_iter()
            .map(lease)
            .collect::<Result<_, _>>()?,
        truncated: response.truncated,
        revision: response.revision,
    })
}

pub(crate) fn token_check(response: pb::CheckTokenResponse) -> Result<TokenCheck, Error> {
    Ok(TokenCheck {
        current: response.current,
        lease: optional_lease(response.lease)?,
        revision: response.revision,
    })
}

pub(crate) fn revoked(response: pb::RevokeResponse) -> Result<Option<LeaseInfo>, Error> {
    optional_lease(response.revoked)
}

pub(crate) fn cluster_status(endpoint: String, response: pb::StatusResponse) -> ClusterStatus {
    ClusterStatus {
        endpoint,
        node_id: response.node_id,
        cluster_name: response.cluster_name,
        state: response.state,
        leader_id: (response.leader_id != 0).then_some(response.leader_id),
        leader_addr: (!response.leader_addr.is_empty()).then_some(response.leader_addr),
        term: response.term,
        last_log_index: response.last_log_index,
        applied_index: response.applied_index,
        members: response
            .members
            .into_iter()
            .map(|m| Member {
                id: m.id,
                addr: m.addr,
                voter: m.voter,
            })
            .collect(),
        leases: response.leases,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pb_lease() -> pb::Lease {
        pb::Lease {
            key: "tasks/a".into(),
            holder: Some(pb::Holder {
                name: "claude@host-a".into(),
                client_id: "c1".into(),
            }),
            token: 17,
            ttl_ms: 20_000,
            held_since_unix_ms: 1,
            renewed_at_unix_ms: 2,
            remaining_ms: 15_000,
            basis: 19,
        }
    }

    fn clock() -> GrantClock {
        GrantClock {
            send_time: Instant::now(),
            drift_margin: 0.05,
        }
    }

    #[test]
    fn granted_claim_carries_safe_deadline_from_send_time_and_reply_ttl() {
        let clock = clock();
        let response = pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Granted(pb::Granted {
                lease: Some(pb_lease()),
                already_held: false,
            })),
            revision: 17,
        };
        let ClaimOutcome::Granted(grant) = claim_outcome(response, clock).unwrap() else {
            panic!("expected a grant");
        };
        assert_eq!(grant.lease.token, 17);
        assert_eq!(grant.lease.holder_name, "claude@host-a");
        assert_eq!(grant.lease.holder_client_id, "c1");
        assert_eq!(grant.revision, 17);
        assert_eq!(
            grant.safe_deadline - clock.send_time,
            Duration::from_millis(19_000)
        );
    }

    #[test]
    fn held_claim_names_the_holder() {
        let response = pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Held(pb::Held {
                lease: Some(pb_lease()),
                same_name_other_process: true,
            })),
            revision: 30,
        };
        let outcome = claim_outcome(response, clock()).unwrap();
        assert!(matches!(
            outcome,
            ClaimOutcome::Held { ref lease, same_name_other_process: true } if lease.token == 17
        ));
    }

    #[test]
    fn reply_without_outcome_is_a_protocol_error() {
        let response = pb::ClaimResponse {
            outcome: None,
            revision: 3,
        };
        assert!(matches!(
            claim_outcome(response, clock()),
            Err(Error::Protocol(_))
        ));
        let response = pb::ReleaseResponse {
            outcome: None,
            revision: 3,
        };
        assert!(matches!(release_outcome(response), Err(Error::Protocol(_))));
    }

    #[test]
    fn lease_without_holder_is_a_protocol_error() {
        let mut bad = pb_lease();
        bad.holder = None;
        assert!(matches!(lease(bad), Err(Error::Protocol(_))));
    }

    #[test]
    fn renew_lost_to_a_free_key_has_no_current_lease() {
        let response = pb::RenewResponse {
            outcome: Some(pb::renew_response::Outcome::Lost(pb::Lost {
                current: None,
            })),
            revision: 40,
        };
        assert_eq!(
            renew_outcome(response, clock()).unwrap(),
            RenewOutcome::Lost { current: None }
        );
    }

    #[test]
    fn status_maps_zero_leader_to_none() {
        let status = cluster_status(
            "a:1".into(),
            pb::StatusResponse {
                node_id: 1,
                state: "candidate".into(),
                ..Default::default()
            },
        );
        assert_eq!(status.leader_id, None);
        assert_eq!(status.leader_addr, None);
        assert_eq!(status.endpoint, "a:1");
    }
}
