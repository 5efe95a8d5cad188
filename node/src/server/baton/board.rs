//! `Board`: the held keys under a prefix, with the quarantined, the assigned-but-unclaimed
//! and the open tasks beside them, read from one state.

use super::*;

impl Ctx {
    pub(in crate::server) async fn board(
        &self,
        req: pb::BoardRequest,
    ) -> Result<pb::BoardResponse, NotAnswered> {
        validate::prefix(&req.prefix).map_err(convert::invalid)?;
        validate::prefix_named("start_after", &req.start_after).map_err(convert::invalid)?;
        let limit = match req.limit as usize {
            0 => BOARD_LEASES_MAX,
            n if n > BOARD_LEASES_MAX => {
                return Err(Status::invalid_argument(format!(
                    "limit {n} is above the maximum {BOARD_LEASES_MAX}: page with start_after"
                ))
                .into())
            }
            n => n,
        };
        self.read_gate(req.stale).await?;
        let (leases, truncated, revision, assignments, unclaimed, open, lines, held) =
            self.sm.read(|s| {
                let (page, truncated) = s.table.board(&req.prefix, &req.start_after, limit);
                let (open, open_more) = s.table.open_tasks(&req.prefix, &req.start_after, limit);
                let open: Vec<String> = open.into_iter().map(str::to_owned).collect();
                let (free, more) = s.table.unclaimed(&req.prefix, &req.start_after, limit);
                let unclaimed: std::collections::HashMap<String, pb::Assignment> = free
                    .into_iter()
                    .map(|(k, a)| (k.to_string(), convert::assignment(a)))
                    .collect();
                // The lines of the listed keys: held keys, or quarantined ones (below).
                let lines: std::collections::HashMap<String, pb::KeyLine> = s
                    .table
                    .lines_under(&req.prefix, &req.start_after, limit)
                    .map(|(k, line)| (k.to_string(), lines::key_line(line)))
                    .collect();
                let assignments: std::collections::HashMap<String, pb::Assignment> = page
                    .iter()
                    .filter_map(|l| {
                        let a = s.table.case(&l.key)?.record.assigned_to.as_deref()?;
                        Some((l.key.to_string(), convert::assignment(a)))
                    })
                    .collect();
                let page = page.into_iter().cloned().collect::<Vec<_>>();
                // The keys held by permits, each with its holders.
                let held: Vec<(String, crate::core::Holders)> = s
                    .table
                    .holders_under(&req.prefix, &req.start_after, limit)
                    .map(|(k, h)| (k.to_string(), h.clone()))
                    .collect();
                (
                    page,
                    truncated,
                    revision(s),
                    assignments,
                    (unclaimed, more),
                    (open, open_more),
                    lines,
                    held,
                )
            });
        // Quarantined keys: this node's countdowns find them, its state confirms each.
        let candidates =
            self.sm
                .quarantine_countdowns()
                .under_prefix(&req.prefix, &req.start_after, limit);
        let quarantines = self.sm.read(|s| {
            candidates
                .into_iter()
                .filter(|(key, basis, _, _)| {
                    s.table
                        .case(key)
                        .and_then(|c| c.quarantine.as_deref())
                        .is_some_and(|q| q.revision == *basis)
                })
                .map(|(key, basis, delay_ms, left)| {
                    let q = pb::KeyQuarantine {
                        revision: basis,
                        delay_ms,
                        remaining_ms: left.as_millis() as u64,
                        revoked: s.table.held_back_by_revoke(&key, basis),
                    };
                    (key, q)
                })
                .collect()
        });
        Ok(pb::BoardResponse {
            leases: leases.iter().map(|l| self.lease(l)).collect(),
            truncated,
            revision,
            assignments,
            quarantines,
            unclaimed: unclaimed.0,
            unclaimed_truncated: unclaimed.1,
            open: open.0,
            open_truncated: open.1,
            lines,
            permits: held
                .into_iter()
                .map(|(key, h)| {
                    let holders = convert::key_holders(h.sharing, &h.leases, self.sm.countdowns());
                    (key, holders)
                })
                .collect(),
        })
    }
}
