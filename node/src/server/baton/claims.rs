//! A claim of one key: the key to one holder alone, or one of its N permits (data format
//! 12) or a share (13), each appended only once every member reads it (`super::super::
//! format_gate`), and how the wire says either answer.

use super::*;

impl Ctx {
    /// A grant as the wire says it (claim, claim-next, a wait granted).
    pub(super) fn granted(
        &self,
        lease: &crate::core::Lease,
        already_held: bool,
        assignment: Option<&crate::core::Assignment>,
    ) -> pb::Granted {
        pb::Granted {
            lease: Some(self.lease(lease)),
            already_held,
            assignment: assignment.map(convert::assignment),
            permits: None,
        }
    }

    /// A permit (or a share) granted, as the wire says it: the grant and every holder.
    pub(super) fn granted_permit(
        &self,
        lease: &crate::core::Lease,
        already_held: bool,
        assignment: Option<&crate::core::Assignment>,
        sharing: crate::core::Sharing,
        holders: &[crate::core::Lease],
    ) -> pb::Granted {
        pb::Granted {
            permits: Some(convert::key_holders(sharing, holders, self.sm.countdowns())),
            ..self.granted(lease, already_held, assignment)
        }
    }

    /// A key's permit holders as a read shows them, and the first of them, the lease a
    /// client that knows no permits is shown (so that it still sees the key held).
    pub(super) fn holders_view(
        &self,
        held: Option<crate::core::Holders>,
    ) -> (Option<pb::KeyHolders>, Option<pb::Lease>) {
        let permits =
            held.map(|h| convert::key_holders(h.sharing, &h.leases, self.sm.countdowns()));
        let first = permits.as_ref().and_then(|p| p.holders.first().cloned());
        (permits, first)
    }

    /// A key held by permits, as a claim that could not have one is told: every holder,
    /// and as `lease` the one whose permit ends first by this node's countdowns.
    pub(super) fn held_by_holders(
        &self,
        sharing: crate::core::Sharing,
        holders: &[crate::core::Lease],
        assignment: Option<&crate::core::Assignment>,
    ) -> pb::Held {
        let permits = convert::key_holders(sharing, holders, self.sm.countdowns());
        pb::Held {
            lease: permits
                .holders
                .iter()
                .min_by_key(|l| l.remaining_ms)
                .cloned(),
            same_name_other_process: false,
            assignment: assignment.map(convert::assignment),
            permits: Some(permits),
        }
    }

    pub(in crate::server) async fn claim(
        &self,
        req: pb::ClaimRequest,
        who: Caller,
    ) -> Result<pb::ClaimResponse, NotAnswered> {
        let (id, op) = convert::claim(req, self.ttl)?;
        let (outcome, revision) = self.decide(id, op, who).await?;
        self.metrics.claim(match outcome {
            Outcome::Granted { .. } | Outcome::GrantedPermit { .. } => "granted",
            _ => "held",
        });
        use pb::claim_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Granted {
                lease,
                already_held,
                assignment,
            } => O::Granted(self.granted(&lease, already_held, assignment.as_ref())),
            Outcome::GrantedPermit {
                lease,
                already_held,
                assignment,
                sharing,
                holders,
            } => O::Granted(self.granted_permit(
                &lease,
                already_held,
                assignment.as_ref(),
                sharing,
                &holders,
            )),
            Outcome::Held {
                lease,
                same_name_other_process,
                assignment,
            } => O::Held(pb::Held {
                lease: Some(self.lease(&lease)),
                same_name_other_process,
                assignment: assignment.as_ref().map(convert::assignment),
                permits: None,
            }),
            Outcome::HeldByHolders {
                sharing,
                holders,
                assignment,
                ..
            } => O::Held(self.held_by_holders(sharing, &holders, assignment.as_ref())),
            other => return Err(convert::unexpected(other).into()),
        };
        Ok(pb::ClaimResponse {
            outcome: Some(outcome),
            revision,
        })
    }
}
