//! Waiting in line, in the cluster: `Wait` joins a key's line (or renews one's place, or
//! grants the key at once if nothing blocks it) and `LeaveLine` leaves it. Data format 11
//! (13 for permits and shares): appended only once every member reads it
//! (`super::super::format_gate`).

use super::*;
use crate::core::limits::LINE_LISTED_MAX;
use crate::core::line::Line;

impl Ctx {
    pub(in crate::server) async fn wait(
        &self,
        req: pb::WaitRequest,
        who: Caller,
    ) -> Result<pb::WaitResponse, NotAnswered> {
        let (id, op) = convert::wait(req, self.ttl)?;
        let (outcome, revision) = self.decide(id, op, who).await?;
        use pb::wait_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Granted {
                lease,
                already_held,
                assignment,
            } => {
                self.metrics.claim("granted");
                O::Granted(self.granted(&lease, already_held, assignment.as_ref()))
            }
            Outcome::GrantedPermit {
                lease,
                already_held,
                assignment,
                sharing,
                holders,
            } => {
                self.metrics.claim("granted");
                O::Granted(self.granted_permit(
                    &lease,
                    already_held,
                    assignment.as_ref(),
                    sharing,
                    &holders,
                ))
            }
            Outcome::InLine { place } => {
                self.metrics.claim("in_line");
                O::InLine(pb::InLine {
                    position: place.position,
                    waiters: place.waiters,
                    joined_revision: place.joined,
                    blocked: Some(self.blocked_key(place.blocked)),
                })
            }
            other => return Err(convert::unexpected(other).into()),
        };
        Ok(pb::WaitResponse {
            outcome: Some(outcome),
            revision,
        })
    }

    pub(in crate::server) async fn leave_line(
        &self,
        req: pb::LeaveLineRequest,
        who: Caller,
    ) -> Result<pb::LeaveLineResponse, NotAnswered> {
        let (id, op) = convert::leave_line(req)?;
        let (outcome, revision) = self.decide(id, op, who).await?;
        match outcome {
            Outcome::LeftLine { was_waiting, holds } => Ok(pb::LeaveLineResponse {
                was_waiting,
                holds: holds.map(|l| self.lease(&l)),
                revision,
            }),
            other => Err(convert::unexpected(other).into()),
        }
    }
}

/// A key's line as probes and boards show it: its length and its first waiters.
pub(super) fn key_line(line: &Line) -> pb::KeyLine {
    let now = crate::expiry::wall_clock_unix_ms();
    pb::KeyLine {
        waiters: line.len() as u64,
        first: line
            .iter()
            .take(LINE_LISTED_MAX)
            .map(|w| pb::Waiter {
                holder: Some(pb::Holder {
                    name: w.holder.name.to_string(),
                    client_id: w.holder.client_id.to_string(),
                }),
                joined_revision: w.joined,
                joined_unix_ms: w.joined_unix_ms,
                ttl_ms: w.ttl_ms,
                waited_ms: now.saturating_sub(w.joined_unix_ms),
            })
            .collect(),
    }
}
