"""The Python client against real TLS clusters (conftest.py: certificates from `baton-node
certs`): server TLS, mutual TLS, and what a wrong CA, a missing or foreign client certificate,
or a TLS/plaintext mix raise, each in bounded time."""

from __future__ import annotations

import time

import pytest

from baton import TLS, Client, CredentialsRequired, InvalidArgument, TLSError, Unauthenticated, Unavailable

#: How long a refusal that retrying cannot mend may take (the retry deadline is 10 s).
FAST = 3.0


def timed(call):
    """(what `call` raised, the seconds it took)."""
    start = time.monotonic()
    with pytest.raises(Exception) as raised:
        call()
    return raised.value, time.monotonic() - start


def test_server_tls_with_the_nodes_ca_claims_leases_and_watches(tls_cluster):
    client = Client(tls_cluster.endpoints, holder="etl@a", tls=tls_cluster.client_tls(None))
    grant = client.claim("tls/plain-ca", ttl=30)
    assert client.probe("tls/plain-ca").lease.token == grant.token
    client.release("tls/plain-ca", grant.token)
    # The lease's renewals and its endings stream go over TLS too: a revoke is pushed.
    operator = Client(tls_cluster.endpoints, holder="ops", tls=tls_cluster.client_tls(None))
    with client.lease("tls/lease", ttl=60) as lease:
        operator.revoke("tls/lease", "over TLS")
        assert lease.lost.wait(5), "the revoke was not pushed over TLS"
        assert (lease.loss.what, lease.loss.reason) == ("revoked", "over TLS")
    granted = operator.claim("tls/watched/1", ttl=30)
    with client.watch("tls/watched/", from_revision=granted.revision) as watch:
        event = next(iter(watch))
        assert (event.key, event.kind, event.token) == ("tls/watched/1", "claimed", granted.token)
    # The CA as PEM bytes, and https:// endpoints.
    ca = (tls_cluster.pki / "ca.pem").read_bytes()
    https = Client([f"https://{e}" for e in tls_cluster.endpoints], tls=TLS(ca=ca))
    assert https.probe("tls/watched/1").lease.token == granted.token


def test_a_wrong_ca_is_a_tls_error_at_once_naming_every_node(tls_cluster):
    client = Client(tls_cluster.endpoints, tls=tls_cluster.client_tls(None, pki=tls_cluster.other_pki))
    error, took = timed(lambda: client.claim("tls/wrong-ca", ttl=30))
    assert isinstance(error, TLSError), repr(error)
    assert took < FAST, f"took {took:.1f}s"
    assert error.reason == "untrusted_certificate"
    assert sorted(error.endpoints) == sorted(tls_cluster.endpoints)
    assert "did not verify against the CA given" in str(error)
    # A watch fails the same way.
    with client.watch("tls/", from_revision=1) as watch:
        error, took = timed(lambda: next(iter(watch)))
    assert isinstance(error, TLSError) and error.reason == "untrusted_certificate", repr(error)
    assert took < FAST, f"took {took:.1f}s"


def test_tls_to_a_plaintext_cluster_is_a_tls_error_and_plaintext_to_tls_says_give_the_ca(cluster, tls_cluster):
    tls = TLS(ca=tls_cluster.pki / "ca.pem")
    error, took = timed(lambda: Client(cluster.endpoints, tls=tls).probe("tls/mix"))
    assert isinstance(error, TLSError) and error.reason == "plaintext_node", repr(error)
    assert took < FAST, f"took {took:.1f}s"
    assert "does not speak TLS" in str(error)
    # The other way round the node only closes the connection, which a network fault does
    # too: retried to the deadline, then named.
    plain = Client(tls_cluster.endpoints, retry_deadline=1.0)
    error, took = timed(lambda: plain.probe("tls/mix"))
    assert isinstance(error, Unavailable), repr(error)
    assert "if the nodes speak TLS, give the client their CA: tls=TLS(ca=...)" in str(error)


def test_mutual_tls_with_a_client_certificate_acts_as_its_common_name(mtls_cluster):
    agent = Client(mtls_cluster.endpoints, holder="agent", tls=mtls_cluster.client_tls("agent"))
    with agent.lease("mtls/task", ttl=30) as lease:
        lease.check()
        assert agent.probe("mtls/task").lease.token == lease.token
    events = agent.history("mtls/task").events
    assert [(e.kind, e.actor_principal) for e in events] == [("claimed", "agent"), ("released", "agent")]


def test_mutual_tls_without_a_client_certificate_says_one_is_required(mtls_cluster):
    client = Client(mtls_cluster.endpoints, holder="agent", tls=mtls_cluster.client_tls(None))
    error, took = timed(lambda: client.claim("mtls/no-cert", ttl=30))
    assert isinstance(error, CredentialsRequired), repr(error)
    assert took < FAST, f"took {took:.1f}s"
    assert (error.presented_certificate, error.presented_token) == (False, False)
    assert "requires a client certificate" in str(error)
    assert "tls=TLS(ca=..., cert=..., key=...)" in str(error)
    # A token is no certificate: the node names what it needs, the client what it gave.
    with_token = Client(mtls_cluster.endpoints, tls=mtls_cluster.client_tls(None), token="baton_" + "0" * 64)
    error, _ = timed(lambda: with_token.probe("mtls/no-cert"))
    assert type(error) is Unauthenticated, repr(error)
    assert (error.presented_certificate, error.presented_token) == (False, True)


def test_mutual_tls_refuses_another_cas_certificate_and_a_wrong_ca(mtls_cluster):
    foreign = Client(mtls_cluster.endpoints, tls=mtls_cluster.client_tls("agent", ca=mtls_cluster.pki / "ca.pem", pki=mtls_cluster.other_pki))
    error, took = timed(lambda: foreign.probe("mtls/foreign"))
    assert isinstance(error, TLSError) and error.reason == "client_certificate_rejected", repr(error)
    assert took < FAST, f"took {took:.1f}s"
    assert "refused this client's certificate" in str(error)
    wrong_ca = Client(mtls_cluster.endpoints, tls=mtls_cluster.client_tls("agent", pki=mtls_cluster.other_pki))
    error, took = timed(lambda: wrong_ca.probe("mtls/foreign"))
    assert isinstance(error, TLSError) and error.reason == "untrusted_certificate", repr(error)
    assert took < FAST, f"took {took:.1f}s"


def test_tls_settings_are_checked_before_any_call(tmp_path):
    with pytest.raises(InvalidArgument, match="cannot read"):
        TLS(ca=tmp_path / "missing.pem")
    (tmp_path / "ca.pem").write_bytes(b"")
    with pytest.raises(InvalidArgument, match="both cert= and key="):
        TLS(ca=tmp_path / "ca.pem", cert=tmp_path / "ca.pem")
    with pytest.raises(InvalidArgument, match="needs ca="):
        TLS(ca=None)
