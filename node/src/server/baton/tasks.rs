//! The task board's writes: a dispatcher posts a task, an agent claims the next claimable
//! one under a prefix. Both are data format 9: appended only once every member reads it
//! (`super::super::format_gate`). From data format 14 on, `claim-next` walks only the
//! unfinished keys.

use super::*;
use crate::core::formats::UNFINISHED_WALK_FORMAT;

impl Ctx {
    pub(in crate::server) async fn post(
        &self,
        req: pb::PostRequest,
        who: Caller,
    ) -> Result<pb::PostResponse, NotAnswered> {
        let (id, op) = convert::post(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Posted { record, created }, revision) => Ok(pb::PostResponse {
                record: Some(convert::pb_record(&record)),
                created,
                revision,
            }),
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(in crate::server) async fn claim_next(
        &self,
        req: pb::ClaimNextRequest,
        who: Caller,
    ) -> Result<pb::ClaimNextResponse, NotAnswered> {
        // Format 9's walk unless this leader heard every member say it reads format 14: a
        // member that cannot decode the command would stop applying the log. A follower
        // never applies its own proposal (it goes to the leader, which decides again), and
        // one that became leader meanwhile must not append format 14 unchecked.
        let walk = match self.short_of_format(UNFINISHED_WALK_FORMAT) {
            Some(short) if short.is_empty() => Walk::Unfinished,
            _ => Walk::EveryCaseFile,
        };
        let (id, op) = convert::claim_next(req, self.ttl, walk)?;
        let (outcome, revision) = self.propose(id, op, who).await?;
        use pb::claim_next_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Granted {
                lease,
                already_held,
                assignment,
            } => {
                self.metrics.claim("granted");
                O::Granted(self.granted(&lease, already_held, assignment.as_ref()))
            }
            Outcome::NothingClaimable { counts, .. } => O::Nothing(convert::unclaimable(&counts)),
            other => return Err(convert::unexpected(other).into()),
        };
        Ok(pb::ClaimNextResponse {
            outcome: Some(outcome),
            revision,
        })
    }
}
