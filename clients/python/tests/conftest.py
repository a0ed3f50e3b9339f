"""Fixtures: real dlm server processes on free loopback ports.

The server binary is $DLM_BIN, or built from the repository (go build
./cmd/dlm) into a temporary directory when it is unset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import ALICE_TOKEN, BOB_TOKEN, REPO, DLMServer  # noqa: E402  (puts src on the path)

import dlm  # noqa: E402


@pytest.fixture(scope="session")
def dlm_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The dlm binary: $DLM_BIN, or one built from the repository."""
    env = os.environ.get("DLM_BIN")
    if env:
        return env
    out = tmp_path_factory.mktemp("bin") / "dlm"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/dlm"], cwd=REPO, check=True)
    return str(out)


def _start(dlm_bin: str, tmp_path_factory: pytest.TempPathFactory, name: str, extra: Sequence[str] = ()) -> DLMServer:
    return DLMServer(dlm_bin, tmp_path_factory.mktemp(name), extra).start()


@pytest.fixture(scope="session")
def server(dlm_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DLMServer]:
    """A dlm server without authentication, shared by the tests (each uses
    names of its own)."""
    s = _start(dlm_bin, tmp_path_factory, "server")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def auth_server(dlm_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DLMServer]:
    """A dlm server with bearer tokens: alice may lock and list everything,
    bob may list everything and lock only names under jobs/."""
    d = tmp_path_factory.mktemp("auth")
    (d / "tokens").write_text(f"alice {ALICE_TOKEN}\nbob {BOB_TOKEN}\n")
    (d / "rules").write_text("alice lock *\nalice list *\nbob lock jobs/\nbob list *\n")
    s = DLMServer(dlm_bin, d, ["-auth-tokens", str(d / "tokens"), "-auth-rules", str(d / "rules")]).start()
    yield s
    s.stop()


@pytest.fixture
def client(server: DLMServer) -> Iterator[dlm.Client]:
    c = dlm.Client(server.url, label="pytest")
    yield c
    c.close()
