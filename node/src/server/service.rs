//! The `Baton` trait of the generated service: each method serves its request here or
//! forwards it (`super::forward`), or opens a watch stream (`super::watch_stream`).

use baton_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::baton::BatonServer;
use super::watch_stream::EventStream;

#[tonic::async_trait]
impl pb::baton_server::Baton for BatonServer {
    type WatchStream = EventStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let grant = super::auth::WatchGrant::of(&self.ctx.auth, &req)?;
        grant.check(&req.get_ref().prefix, &self.ctx.sm)?;
        let from_addr = crate::tls::remote_addr(&req).map(|a| a.ip());
        self.watch_stream(req.into_inner(), from_addr, grant)
            .await
            .map(Response::new)
    }

    async fn claim(
        &self,
        req: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        self.serve(
            "claim",
            req,
            |ctx, m, who| async move { ctx.claim(m, who).await },
            |mut c, r| async move { c.claim(r).await },
        )
        .await
    }

    async fn renew(
        &self,
        req: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        self.serve(
            "renew",
            req,
            |ctx, m, who| async move { ctx.renew(m, who).await },
            |mut c, r| async move { c.renew(r).await },
        )
        .await
    }

    async fn release(
        &self,
        req: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.serve(
            "release",
            req,
            |ctx, m, who| async move { ctx.release(m, who).await },
            |mut c, r| async move { c.release(r).await },
        )
        .await
    }

    async fn probe(
        &self,
        req: Request<pb::ProbeRequest>,
    ) -> Result<Response<pb::ProbeResponse>, Status> {
        self.serve(
            "probe",
            req,
            |ctx, m, _who| async move { ctx.probe(m).await },
            |mut c, r| async move { c.probe(r).await },
        )
        .await
    }

    async fn board(
        &self,
        req: Request<pb::BoardRequest>,
    ) -> Result<Response<pb::BoardResponse>, Status> {
        self.serve(
            "board",
            req,
            |ctx, m, _who| async move { ctx.board(m).await },
            |mut c, r| async move { c.board(r).await },
        )
        .await
    }

    async fn check_token(
        &self,
        req: Request<pb::CheckTokenRequest>,
    ) -> Result<Response<pb::CheckTokenResponse>, Status> {
        self.serve(
            "check_token",
            req,
            |ctx, m, _who| async move { ctx.check_token(m).await },
            |mut c, r| async move { c.check_token(r).await },
        )
        .await
    }

    async fn revoke(
        &self,
        req: Request<pb::RevokeRequest>,
    ) -> Result<Response<pb::RevokeResponse>, Status> {
        self.serve(
            "revoke",
            req,
            |ctx, m, who| async move { ctx.revoke(m, who).await },
            |mut c, r| async move { c.revoke(r).await },
        )
        .await
    }

    async fn update(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateResponse>, Status> {
        self.serve(
            "update",
            req,
            |ctx, m, who| async move { ctx.update(m, who).await },
            |mut c, r| async move { c.update(r).await },
        )
        .await
    }

    async fn assign(
        &self,
        req: Request<pb::AssignRequest>,
    ) -> Result<Response<pb::AssignResponse>, Status> {
        self.serve(
            "assign",
            req,
            |ctx, m, who| async move { ctx.assign(m, who).await },
            |mut c, r| async move { c.assign(r).await },
        )
        .await
    }

    async fn get_record(
        &self,
        req: Request<pb::GetRecordRequest>,
    ) -> Result<Response<pb::GetRecordResponse>, Status> {
        self.serve(
            "get_record",
            req,
            |ctx, m, _who| async move { ctx.get_record(m).await },
            |mut c, r| async move { c.get_record(r).await },
        )
        .await
    }

    async fn history(
        &self,
        req: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        self.serve(
            "history",
            req,
            |ctx, m, _who| async move { ctx.history(m).await },
            |mut c, r| async move { c.history(r).await },
        )
        .await
    }

    async fn offer(
        &self,
        req: Request<pb::OfferRequest>,
    ) -> Result<Response<pb::OfferResponse>, Status> {
        self.serve(
            "offer",
            req,
            |ctx, m, who| async move { ctx.offer(m, who).await },
            |mut c, r| async move { c.offer(r).await },
        )
        .await
    }

    async fn accept(
        &self,
        req: Request<pb::AcceptRequest>,
    ) -> Result<Response<pb::AcceptResponse>, Status> {
        self.serve(
            "accept",
            req,
            |ctx, m, who| async move { ctx.accept(m, who).await },
            |mut c, r| async move { c.accept(r).await },
        )
        .await
    }

    async fn decline(
        &self,
        req: Request<pb::DeclineRequest>,
    ) -> Result<Response<pb::DeclineResponse>, Status> {
        self.serve(
            "decline",
            req,
            |ctx, m, who| async move { ctx.decline(m, who).await },
            |mut c, r| async move { c.decline(r).await },
        )
        .await
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        self.serve(
            "cancel",
            req,
            |ctx, m, who| async move { ctx.cancel(m, who).await },
            |mut c, r| async move { c.cancel(r).await },
        )
        .await
    }

    async fn set_access(
        &self,
        req: Request<pb::SetAccessRequest>,
    ) -> Result<Response<pb::AccessResponse>, Status> {
        self.serve(
            "set_access",
            req,
            |ctx, m, who| async move { ctx.set_access(m, who).await },
            |mut c, r| async move { c.set_access(r).await },
        )
        .await
    }

    async fn get_access(
        &self,
        req: Request<pb::GetAccessRequest>,
    ) -> Result<Response<pb::AccessResponse>, Status> {
        self.serve(
            "get_access",
            req,
            |ctx, m, _who| async move { ctx.get_access(m).await },
            |mut c, r| async move { c.get_access(r).await },
        )
        .await
    }

    async fn set_quarantine(
        &self,
        req: Request<pb::SetQuarantineRequest>,
    ) -> Result<Response<pb::SetQuarantineResponse>, Status> {
        self.serve(
            "set_quarantine",
            req,
            |ctx, m, who| async move { ctx.set_quarantine(m, who).await },
            |mut c, r| async move { c.set_quarantine(r).await },
        )
        .await
    }
}
