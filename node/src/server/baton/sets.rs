//! All-or-none claims: every key of a set to one holder in one entry, or nothing. Data
//! format 10: appended only once every member reads it (`super::super::format_gate`).

use super::*;

impl Ctx {
    pub(in crate::server) async fn claim_set(
        &self,
        req: pb::ClaimSetRequest,
        who: Caller,
    ) -> Result<pb::ClaimSetResponse, NotAnswered> {
        let (id, op) = convert::claim_set(req, self.ttl)?;
        let (outcome, revision) = self.decide(id, op, who).await?;
        use pb::claim_set_response::Outcome as O;
        let outcome = match outcome {
            Outcome::GrantedSet { grants } => {
                self.metrics.claim("granted");
                O::Granted(pb::GrantedSet {
                    granted: grants
                        .iter()
                        .map(|g| self.granted(&g.lease, g.already_held, g.assignment.as_ref()))
                        .collect(),
                })
            }
            Outcome::BlockedSet { blocked } => {
                self.metrics.claim("held");
                O::Blocked(pb::BlockedSet {
                    blocked: blocked.into_iter().map(|b| self.blocked_key(b)).collect(),
                })
            }
            other => return Err(convert::unexpected(other).into()),
        };
        Ok(pb::ClaimSetResponse {
            outcome: Some(outcome),
            revision,
        })
    }

    /// One key that blocked a set, with the facts a claim of it alone would get.
    pub(super) fn blocked_key(&self, blocked: crate::core::Blocked) -> pb::BlockedKey {
        let key = blocked.key().to_owned();
        match blocked.into_outcome() {
            Outcome::Held {
                lease,
                same_name_other_process,
                assignment,
            } => pb::BlockedKey {
                key,
                held: Some(pb::Held {
                    lease: Some(self.lease(&lease)),
                    same_name_other_process,
                    assignment: assignment.as_ref().map(convert::assignment),
                    permits: None,
                }),
                quarantined: None,
            },
            Outcome::HeldByHolders {
                sharing,
                holders,
                assignment,
                ..
            } => pb::BlockedKey {
                key,
                held: Some(self.held_by_holders(sharing, &holders, assignment.as_ref())),
                quarantined: None,
            },
            Outcome::Refused { refusal } => pb::BlockedKey {
                key,
                held: None,
                quarantined: Some(convert::refusal_details(&refusal, &self.sm)),
            },
            other => unreachable!("a blocked key is held or refused: {other:?}"),
        }
    }
}
