//! The `Baton` trait of the generated service: each method serves its request here or
//! forwards it to the leader (`super::forward`), or opens a watch stream
//! (`super::watch_stream`).
//!
//! Every unary method is the same call of `BatonServer::serve` with the method's own
//! handler and client call, so they are written once, by `unary!`: a write's handler is
//! told who acted (the authenticated principal), a read's is not.

use baton_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::baton::BatonServer;
use super::endings_stream::EndingStream;
use super::watch_stream::EventStream;

/// The `Baton` impl: `watch` by hand, then each unary method as
/// `name(Request) -> Response;` under `writes` (the handler takes who acted) or `reads`.
macro_rules! baton_service {
    (
        writes { $($w:ident($wreq:ident) -> $wresp:ident;)* }
        reads { $($r:ident($rreq:ident) -> $rresp:ident;)* }
    ) => {
        #[tonic::async_trait]
        impl pb::baton_server::Baton for BatonServer {
            type WatchStream = EventStream;
            type EndingsStream = EndingStream;

            async fn endings(
                &self,
                req: Request<pb::EndingsRequest>,
            ) -> Result<Response<Self::EndingsStream>, Status> {
                let grant = super::auth::WatchGrant::of(&self.ctx.auth, &req)?;
                self.endings_stream(req.into_inner(), grant)
                    .await
                    .map(Response::new)
            }

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

            $(
                async fn $w(&self, req: Request<pb::$wreq>) -> Result<Response<pb::$wresp>, Status> {
                    self.serve(
                        stringify!($w),
                        req,
                        |ctx, m, who| async move { ctx.$w(m, who).await },
                        |mut c, r| async move { c.$w(r).await },
                    )
                    .await
                }
            )*

            $(
                async fn $r(&self, req: Request<pb::$rreq>) -> Result<Response<pb::$rresp>, Status> {
                    self.serve(
                        stringify!($r),
                        req,
                        |ctx, m, _who| async move { ctx.$r(m).await },
                        |mut c, r| async move { c.$r(r).await },
                    )
                    .await
                }
            )*
        }
    };
}

baton_service! {
    writes {
        claim(ClaimRequest) -> ClaimResponse;
        renew(RenewRequest) -> RenewResponse;
        release(ReleaseRequest) -> ReleaseResponse;
        revoke(RevokeRequest) -> RevokeResponse;
        update(UpdateRequest) -> UpdateResponse;
        assign(AssignRequest) -> AssignResponse;
        offer(OfferRequest) -> OfferResponse;
        accept(AcceptRequest) -> AcceptResponse;
        decline(DeclineRequest) -> DeclineResponse;
        cancel(CancelRequest) -> CancelResponse;
        set_access(SetAccessRequest) -> AccessResponse;
        set_quarantine(SetQuarantineRequest) -> SetQuarantineResponse;
        post(PostRequest) -> PostResponse;
        claim_next(ClaimNextRequest) -> ClaimNextResponse;
        claim_set(ClaimSetRequest) -> ClaimSetResponse;
        wait(WaitRequest) -> WaitResponse;
        leave_line(LeaveLineRequest) -> LeaveLineResponse;
    }
    reads {
        probe(ProbeRequest) -> ProbeResponse;
        board(BoardRequest) -> BoardResponse;
        check_token(CheckTokenRequest) -> CheckTokenResponse;
        get_record(GetRecordRequest) -> GetRecordResponse;
        history(HistoryRequest) -> HistoryResponse;
        get_access(GetAccessRequest) -> AccessResponse;
        get_quarantine(GetQuarantineRequest) -> GetQuarantineResponse;
    }
}
