//! The transport's own refusals of a request, said as baton says them.
//!
//! tonic refuses some requests before any handler sees them, with codes and words that
//! mislead a client: a message that does not decode (bad protobuf, a string that is not
//! UTF-8) is INTERNAL, as if the node were broken, and one over the size limit is OUT_OF_RANGE,
//! which baton's clients read as a compacted watch. This layer rewrites those answers: both
//! are the caller's input, so INVALID_ARGUMENT, and the size refusal names the limit. Nothing
//! was applied in either case.

use tonic::codegen::http;
use tonic::{Code, Status};

use crate::core::limits::REQUEST_BYTES_MAX;

/// What prost's decode errors start with (tonic-prost maps them to INTERNAL).
const DECODE_ERROR_PREFIX: &str = "failed to decode Protobuf message";
/// What tonic's size refusal says (OUT_OF_RANGE).
const TOO_LARGE_MARKER: &str = "decoded message length too large";

/// The layer for `Server::builder().layer(..)`.
pub fn layer() -> tower::util::MapResponseLayer<fn(Response) -> Response> {
    tower::util::MapResponseLayer::new(rewrite as fn(Response) -> Response)
}

type Response = http::Response<tonic::body::Body>;

fn rewrite(mut response: Response) -> Response {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    if let Some(better) = restate(&status) {
        // The answer was headers only (the handler never ran): replace its status there.
        if better.add_header(response.headers_mut()).is_err() {
            tracing::warn!(?status, "could not restate a transport refusal");
        }
    }
    response
}

/// baton's words for a transport refusal, if `status` is one.
pub(crate) fn restate(status: &Status) -> Option<Status> {
    let message = status.message();
    match status.code() {
        Code::Internal if message.starts_with(DECODE_ERROR_PREFIX) => {
            Some(Status::invalid_argument(format!(
                "the request is not a valid baton.v1 message ({message}): nothing was applied"
            )))
        }
        Code::OutOfRange if message.contains(TOO_LARGE_MARKER) => {
            let found = message
                .split("found ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .unwrap_or("more");
            Some(Status::invalid_argument(format!(
                "the request is {found} bytes, over the limit of {REQUEST_BYTES_MAX} bytes \
                 (REQUEST_BYTES_MAX): send less (a record or a handoff note holds at most 64 \
                 KiB); nothing was applied"
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_and_oversized_requests_are_invalid_arguments_naming_the_limit() {
        let bad = restate(&Status::internal(
            "failed to decode Protobuf message: ClaimRequest.key: invalid string value: data \
             is not UTF-8 encoded",
        ))
        .unwrap();
        assert_eq!(bad.code(), Code::InvalidArgument);
        assert!(bad.message().contains("not UTF-8"), "{}", bad.message());
        let big = restate(&Status::out_of_range(
            "Error, decoded message length too large: found 300000 bytes, the limit is: 262144 \
             bytes",
        ))
        .unwrap();
        assert_eq!(big.code(), Code::InvalidArgument);
        assert!(
            big.message().contains("300000 bytes") && big.message().contains("REQUEST_BYTES_MAX"),
            "{}",
            big.message()
        );
        // Anything else is left as it is.
        assert!(restate(&Status::internal("a bug")).is_none());
        assert!(restate(&Status::out_of_range("compacted: revision 3")).is_none());
    }
}
