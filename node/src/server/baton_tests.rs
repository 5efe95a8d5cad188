use super::*;

#[test]
fn a_retry_too_old_to_tell_is_no_answer_and_a_refusal_carries_its_facts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(crate::clock::MonotonicClock);
    let countdowns = Arc::new(crate::expiry::Countdowns::new(clock));
    let (_log, sm) = crate::store::open(dir.path(), 1, "t", countdowns).unwrap();
    let status = answer_or_status(
        Outcome::RetryTooOld {
            message: "request seq 3 of client c is too old to tell whether it was applied".into(),
        },
        &sm,
    )
    .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unknown);
    let lease = crate::core::Lease {
        key: "tasks/x".into(),
        holder: crate::core::Holder {
            name: "codex@b".into(),
            client_id: "codex-1".into(),
        },
        token: 9,
        basis: 9,
        renewals: 0,
        ttl_ms: 10_000,
        since_unix_ms: 5,
        renewed_unix_ms: 5,
    };
    let refusal = crate::core::Refusal::WrongSession {
        lease: Box::new(lease),
        client_id: "c-77".into(),
    };
    let refused = answer_or_status(Outcome::Refused { refusal }, &sm).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("client codex-1") && refused.message().contains("client c-77"),
        "{}",
        refused.message()
    );
    let details: pb::Refusal = prost::Message::decode(refused.details()).unwrap();
    assert_eq!(details.reason, "wrong_session");
    assert_eq!(details.key, "tasks/x");
    assert_eq!(details.client_id, "c-77");
    assert_eq!(details.token, 9);
    let holder = details.lease.unwrap().holder.unwrap();
    assert_eq!(
        (holder.name.as_str(), holder.client_id.as_str()),
        ("codex@b", "codex-1")
    );
    assert_eq!(details.message, refused.message());
    let invalid = answer_or_status(
        Outcome::Invalid {
            message: "key must be 1 to 512 bytes".into(),
        },
        &sm,
    )
    .unwrap_err();
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);
}
