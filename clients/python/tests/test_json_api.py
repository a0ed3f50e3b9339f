"""The JSON API at the curl level: what any language sees on the wire."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from support import ALICE_TOKEN, BOB_TOKEN, DLMServer, unique

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


def curl(server: DLMServer, method: str, body: Any, token: str | None = None) -> tuple[int, dict[str, str], Any]:
    """POSTs ``body`` (JSON, or a str sent as is) to /dlm.v1.Locks/<method>
    with curl; returns the status, the headers (lower-case names) and the
    decoded answer."""
    with tempfile.TemporaryDirectory() as d:
        headers, out = Path(d) / "headers", Path(d) / "body"
        args = [
            "curl", "-sS", "-X", "POST",
            "-H", "Content-Type: application/json",
            "--data-binary", "@-",
            "-D", str(headers), "-o", str(out), "-w", "%{http_code}",
            f"{server.url}/dlm.v1.Locks/{method}",
        ]  # fmt: skip
        if token:
            args[2:2] = ["-H", f"Authorization: Bearer {token}"]
        data = body if isinstance(body, str) else json.dumps(body)
        r = subprocess.run(args, input=data.encode(), capture_output=True, timeout=60, check=True)
        hdrs: dict[str, str] = {}
        for line in headers.read_text().splitlines()[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        text = out.read_text()
        return int(r.stdout), hdrs, json.loads(text) if text else None


def open_session(server: DLMServer, ttl: str = "10s", token: str | None = None) -> str:
    status, _, resp = curl(server, "OpenSession", {"ttl": ttl, "label": "curl"}, token)
    assert status == 200, resp
    return resp["session"]


def test_open_acquire_keepalive_release_close(server: DLMServer) -> None:
    status, hdrs, resp = curl(server, "OpenSession", {"ttl": "10s", "label": "curl test"})
    assert status == 200 and hdrs["content-type"].startswith("application/json")
    assert re.fullmatch(r"(\d+)\.[0-9a-f]{32}", resp["session"])
    assert resp["session_id"] == resp["session"].split(".")[0]  # uint64 as a JSON string
    assert resp["ttl"] == "10s"
    session = resp["session"]

    name = unique("curl")
    status, _, acq = curl(server, "Acquire", {"session": session, "resource": name, "wait": "5s"})
    assert status == 200
    assert acq["outcome"] == "OUTCOME_GRANTED" and acq["mode"] == "MODE_EX" and acq["permits"] == 0
    assert isinstance(acq["lock_id"], str) and int(acq["token"]) > 0

    status, _, ka = curl(server, "KeepAlive", {"session": session})
    assert status == 200 and ka == {"ttl": "10s", "events": [], "held": [acq["lock_id"]]}

    status, _, listing = curl(server, "List", {"prefix": name})
    assert status == 200
    [res] = listing["resources"]
    assert res["name"] == name and res["holders"][0]["token"] == acq["token"]

    status, _, rel = curl(server, "Release", {"session": session, "lock_id": acq["lock_id"]})
    assert status == 200 and rel == {"token": acq["token"]}
    status, hdrs, err = curl(server, "Release", {"session": session, "lock_id": acq["lock_id"]})
    assert status == 404 and err["code"] == "not_found" and hdrs["dlm-reason"] == "REASON_UNKNOWN_LOCK"

    status, _, closed = curl(server, "CloseSession", {"session": session})
    assert status == 200 and closed == {}
    status, hdrs, err = curl(server, "KeepAlive", {"session": session})
    assert status == 404 and err["code"] == "not_found" and hdrs["dlm-reason"] == "REASON_UNKNOWN_SESSION"
    assert "gone" in err["message"]


def test_try_lock_times_out_and_poll_keeps_the_place(server: DLMServer) -> None:
    a, b = open_session(server), open_session(server)
    name = unique("curl")
    status, _, held = curl(server, "Acquire", {"session": a, "resource": name})
    assert status == 200 and held["outcome"] == "OUTCOME_GRANTED"

    status, _, busy = curl(server, "Acquire", {"session": b, "resource": name, "wait": "0s"})
    assert status == 200 and busy["outcome"] == "OUTCOME_TIMED_OUT" and busy["lock_id"] == "0"

    req = {"session": b, "resource": name, "wait": "60s", "poll": "0.100s", "request_id": "curl-1"}
    status, _, q1 = curl(server, "Acquire", req)
    assert status == 200 and q1["outcome"] == "OUTCOME_QUEUED"
    status, _, q2 = curl(server, "Acquire", req)  # the same request: the same place in the queue
    assert status == 200 and q2["outcome"] == "OUTCOME_QUEUED" and q2["lock_id"] == q1["lock_id"]
    status, _, listing = curl(server, "List", {"prefix": name})
    assert [w["lock_id"] for w in listing["resources"][0]["waiting"]] == [q1["lock_id"]]

    status, hdrs, err = curl(server, "Acquire", dict(req, mode="MODE_PR"))  # the id, for another request
    assert status == 400 and err["code"] == "failed_precondition"
    assert hdrs["dlm-reason"] == "REASON_REQUEST_ID_REUSED"

    curl(server, "Release", {"session": a, "lock_id": held["lock_id"]})
    status, _, got = curl(server, "Acquire", dict(req, poll="30s"))
    assert status == 200 and got["outcome"] == "OUTCOME_GRANTED" and got["lock_id"] == q1["lock_id"]
    assert int(got["token"]) > int(held["token"])
    for s in (a, b):
        curl(server, "CloseSession", {"session": s})


@pytest.mark.parametrize(
    "method, body, reason, words",
    [
        ("Acquire", {"resource": ""}, "REASON_INVALID", "empty"),
        ("Acquire", {"resource": "x" * 513}, "REASON_NAME_TOO_LONG", "limit"),
        ("Acquire", {"resource": "x", "mode": "MODE_SOMETIMES"}, None, "mode"),
        ("Acquire", {"resource": "x", "wait": "soon"}, None, "Duration"),  # the message names no field
        ("Acquire", {"resource": "x", "wiat": "1s"}, None, "unknown field"),
        ("OpenSession", {"ttl": "0s"}, "REASON_INVALID", "ttl"),
        ("OpenSession", {"ttl": "7200s"}, "REASON_INVALID", "ttl"),
        ("Acquire", "{not json", None, "syntax"),
    ],
)
def test_bad_input(server: DLMServer, method: str, body: Any, reason: str | None, words: str) -> None:
    if method == "Acquire" and isinstance(body, dict):
        body = dict(body, session=open_session(server))
    status, hdrs, err = curl(server, method, body)
    assert status == 400
    assert err["code"] == "invalid_argument" and words in err["message"], err
    assert hdrs.get("dlm-reason") == reason


def test_auth_refused(auth_server: DLMServer) -> None:
    status, _, err = curl(auth_server, "OpenSession", {})
    assert status == 401 and err["code"] == "unauthenticated"
    status, _, err = curl(auth_server, "OpenSession", {}, token="x" * 32)
    assert status == 401 and err["code"] == "unauthenticated"
    status, _, err = curl(auth_server, "List", {})
    assert status == 401 and err["code"] == "unauthenticated"

    bob = open_session(auth_server, token=BOB_TOKEN)
    status, hdrs, err = curl(auth_server, "Acquire", {"session": bob, "resource": unique("orders")}, BOB_TOKEN)
    assert status == 403 and err["code"] == "permission_denied"
    assert hdrs["dlm-reason"] == "REASON_PERMISSION_DENIED"
    status, _, ok = curl(auth_server, "Acquire", {"session": bob, "resource": unique("jobs")}, BOB_TOKEN)
    assert status == 200 and ok["outcome"] == "OUTCOME_GRANTED"
    # Another identity may not use bob's session.
    status, _, err = curl(auth_server, "KeepAlive", {"session": bob}, ALICE_TOKEN)
    assert status == 403 and err["code"] == "permission_denied"
