"""A real 3-node cluster for the tests: the built `baton-node` binaries (`BATON_BIN_DIR`,
default the repository's target/debug), one process per node on free ports, each killed by
PID at the end."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from typing import Optional

from baton import TLS, Client, Unavailable

REPO = pathlib.Path(__file__).resolve().parents[2]


def bin_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("BATON_BIN_DIR", REPO / "target" / "debug"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The client certificates `baton-node certs` makes for a TLS cluster (their common names).
TLS_CLIENTS = ("agent", "other")


def certs(directory: pathlib.Path, nodes: int) -> pathlib.Path:
    """A CA and certificates from `baton-node certs` in `directory`: node-N.pem for each node
    (valid for 127.0.0.1), client-NAME.pem for each of `TLS_CLIENTS`, and their keys."""
    args = [str(bin_dir() / "baton-node"), "certs", "--dir", str(directory)]
    for node in range(1, nodes + 1):
        args += ["--node", f"{node}=127.0.0.1"]
    for name in TLS_CLIENTS:
        args += ["--client", name]
    subprocess.run(args, check=True, capture_output=True)
    return directory


class Cluster:
    """`tls`: None (plaintext), "server" (the nodes speak TLS with certificates of `pki`'s
    CA) or "mutual" (also --tls-client-auth: every client shows a certificate of that CA,
    whose common name is its principal). `other_pki` is a second CA's set, for the wrong one."""

    def __init__(self, nodes: int = 3, principals=(), tls=None):
        self.dir = tempfile.TemporaryDirectory(prefix="baton-py-")
        #: Bearer tokens by principal; with any, nodes require one (--auth-tokens).
        self.tokens = {}
        self.extra = []
        self.tls = tls
        if tls is not None:
            self.pki = certs(pathlib.Path(self.dir.name) / "pki", nodes)
            self.other_pki = certs(pathlib.Path(self.dir.name) / "other-pki", nodes)
        if principals:
            tokens_file = pathlib.Path(self.dir.name) / "tokens"
            for who in principals:
                out = subprocess.run(
                    [str(bin_dir() / "baton-node"), "token", "--principal", who, "--file", str(tokens_file)],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                self.tokens[who] = out.stdout.strip()
            self.extra = ["--auth-tokens", str(tokens_file)]
        self.endpoints = [f"127.0.0.1:{free_port()}" for _ in range(nodes)]
        self.initial = ",".join(f"{i + 1}={e}" for i, e in enumerate(self.endpoints))
        self.procs: dict[int, subprocess.Popen] = {}
        for node in range(1, nodes + 1):
            self.start(node)
        self.wait_for_leader()

    def tls_flags(self, node: int):
        if self.tls is None:
            return []
        flags = [
            "--tls-cert", str(self.pki / f"node-{node}.pem"),
            "--tls-key", str(self.pki / f"node-{node}-key.pem"),
            "--tls-ca", str(self.pki / "ca.pem"),
        ]
        if self.tls == "mutual":
            flags.append("--tls-client-auth")
        return flags

    def client_tls(self, client: Optional[str] = "agent", pki: Optional[pathlib.Path] = None, ca=None) -> TLS:
        """A client's `TLS`: the CA of `pki` (default the cluster's) or `ca`, and `client`'s
        certificate from it (None: no certificate)."""
        pki = pki or self.pki
        if client is None:
            return TLS(ca=ca or pki / "ca.pem")
        return TLS(ca=ca or pki / "ca.pem", cert=pki / f"client-{client}.pem", key=pki / f"client-{client}-key.pem")

    def start(self, node: int) -> None:
        data = pathlib.Path(self.dir.name) / f"node{node}"
        log = open(pathlib.Path(self.dir.name) / f"node{node}.log", "ab")
        self.procs[node] = subprocess.Popen(
            [
                str(bin_dir() / "baton-node"),
                "--node-id", str(node),
                "--listen", self.endpoints[node - 1],
                "--data-dir", str(data),
                "--initial-cluster", self.initial,
                *self.extra,
                *self.tls_flags(node),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def kill(self, node: int) -> None:
        proc = self.procs.pop(node)
        proc.kill()
        proc.wait()

    def signal_all(self, sig: int) -> None:
        for proc in self.procs.values():
            os.kill(proc.pid, sig)

    def client(self, **kwargs) -> Client:
        return Client(self.endpoints, **kwargs)

    def status(self, node: int):
        from baton.v1 import baton_pb2 as pb
        from baton.v1 import baton_pb2_grpc as rpc
        import grpc

        metadata = ()
        if self.tokens:
            metadata = (("authorization", f"Bearer {next(iter(self.tokens.values()))}"),)
        if self.tls is None:
            channel = grpc.insecure_channel(self.endpoints[node - 1])
        else:
            channel = grpc.secure_channel(self.endpoints[node - 1], self.client_tls().credentials)
        with channel:
            return rpc.ClusterStub(channel).Status(pb.StatusRequest(), timeout=1, metadata=metadata)

    def leader(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            seen = []
            for node in self.procs:
                try:
                    seen.append(self.status(node).leader_id)
                except Exception:
                    seen.append(0)
            if seen and seen[0] and all(s == seen[0] for s in seen) and seen[0] in self.procs:
                return seen[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no agreed leader: {seen}")
            time.sleep(0.1)

    def wait_for_leader(self) -> None:
        self.leader(30.0)

    def logs(self) -> str:
        out = []
        for node in range(1, len(self.endpoints) + 1):
            path = pathlib.Path(self.dir.name) / f"node{node}.log"
            if path.exists():
                out.append(f"--- node {node}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(out)

    def stop(self) -> None:
        for proc in self.procs.values():
            try:
                os.kill(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            proc.kill()
            proc.wait()
        self.procs.clear()
        self.dir.cleanup()


@pytest.fixture
def secured_cluster():
    c = Cluster(3, principals=("alice", "mallory"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster():
    c = Cluster(3)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def tls_cluster():
    """A 3-node cluster whose nodes speak TLS (server certificates only)."""
    c = Cluster(3, tls="server")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def mtls_cluster():
    """A 3-node cluster with mutual TLS: every client shows a certificate of the nodes' CA."""
    c = Cluster(3, tls="mutual")
    try:
        yield c
    finally:
        c.stop()
