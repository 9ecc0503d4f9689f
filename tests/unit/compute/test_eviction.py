"""Eviction notices as each cloud's metadata service gives them (phalanx.compute.eviction).

No cloud is reachable here, so a small HTTP server on this machine stands in for
the instance metadata service at 169.254.169.254, answering as Azure, AWS or GCP
document it (and refusing a request without the headers each requires); the
code under test is the node agent's, unchanged, pointed at that server.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from phalanx.compute import eviction


@dataclass
class Cloud:
    """What the stand-in metadata service says, and as which cloud."""

    kind: str
    vm_name: str = "vm-7"
    events: list[object] = field(default_factory=list)
    action: dict[str, str] | None = None
    preempted: bool = False
    tokens: list[str] = field(default_factory=list)


def _serve(cloud: Cloud) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, code: int, body: str = "") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            if cloud.kind == "aws" and self.path == "/latest/api/token":
                if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self._answer(400)
                cloud.tokens.append(f"token-{len(cloud.tokens)}")
                return self._answer(200, cloud.tokens[-1])
            return self._answer(404)

        def do_GET(self) -> None:
            path = self.path
            if cloud.kind == "azure" and path.startswith("/metadata/"):
                if self.headers.get("Metadata") != "true":
                    return self._answer(400)
                if path.startswith("/metadata/instance/compute/name"):
                    return self._answer(200, cloud.vm_name)
                if path.startswith("/metadata/scheduledevents"):
                    doc = {"DocumentIncarnation": 1, "Events": cloud.events}
                    return self._answer(200, json.dumps(doc))
            if cloud.kind == "aws" and path.startswith("/latest/meta-data/"):
                if self.headers.get("X-aws-ec2-metadata-token") not in cloud.tokens:
                    return self._answer(401)
                if path == "/latest/meta-data/spot/instance-action" and cloud.action:
                    return self._answer(200, json.dumps(cloud.action))
            if cloud.kind == "gcp" and path.startswith("/computeMetadata/v1/instance/"):
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._answer(403)
                if path.endswith("/id"):
                    return self._answer(200, "1234567890")
                if path.endswith("/preempted"):
                    return self._answer(200, "TRUE" if cloud.preempted else "FALSE")
            return self._answer(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def metadata(request: pytest.FixtureRequest) -> Iterator[tuple[Cloud, str]]:
    cloud = Cloud(request.param)
    server = _serve(cloud)
    yield cloud, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eviction.NOTICE_URL_ENV, raising=False)


@pytest.mark.parametrize("metadata", ["azure"], indirect=True)
def test_azure_preempt_event_for_this_vm_is_a_notice(metadata: tuple[Cloud, str]) -> None:
    cloud, base = metadata
    source = eviction.detect(base)
    assert source is not None and source.name == "Azure Scheduled Events"
    assert source.check() is None
    cloud.events = [{"EventType": "Preempt", "Resources": ["vm-3"], "NotBefore": "soon"}]
    assert source.check() is None  # another VM's eviction
    cloud.events.append({"EventType": "Reboot", "Resources": ["vm-7"], "NotBefore": "later"})
    assert source.check() is None  # not an eviction
    cloud.events.append("not an event")  # what the service should not say is skipped
    cloud.events.append(
        {"EventType": "Preempt", "Resources": ["VM-7"], "NotBefore": "Mon, 30 Nov 2026 10:00:30"}
    )
    assert source.check() == (
        "Azure Scheduled Events: Preempt, not before Mon, 30 Nov 2026 10:00:30"
    )


@pytest.mark.parametrize("metadata", ["aws"], indirect=True)
def test_aws_instance_action_is_a_notice_and_a_refused_token_is_renewed(
    metadata: tuple[Cloud, str],
) -> None:
    cloud, base = metadata
    source = eviction.detect(base)
    assert source is not None and source.name == "AWS spot instance-action"
    for _ in range(3):
        assert source.check() is None  # 404: no interruption planned
    assert len(cloud.tokens) == 1  # a 404 is no reason for another token
    cloud.action = {"action": "terminate", "time": "2026-11-30T10:02:00Z"}
    cloud.tokens.clear()  # the session token expired: refused, asked for again
    assert source.check() == "AWS spot instance-action: terminate at 2026-11-30T10:02:00Z"


@pytest.mark.parametrize("metadata", ["gcp"], indirect=True)
def test_gcp_preempted_true_is_a_notice(metadata: tuple[Cloud, str]) -> None:
    cloud, base = metadata
    source = eviction.detect(base)
    assert source is not None and source.name == "GCP instance/preempted"
    assert source.check() is None
    cloud.preempted = True
    assert source.check() == "GCP: the instance is being preempted"


@pytest.mark.parametrize("metadata", ["none"], indirect=True)
def test_no_cloud_no_source_and_the_override_wins(
    metadata: tuple[Cloud, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, base = metadata
    assert eviction.detect(base) is None  # every question answered 404
    monkeypatch.setenv(eviction.NOTICE_URL_ENV, f"{base}/nothing-here")
    source = eviction.detect(base)
    assert source is not None and source.check() is None


@pytest.mark.parametrize("metadata", ["gcp"], indirect=True)
def test_the_watch_tells_once(metadata: tuple[Cloud, str], monkeypatch: pytest.MonkeyPatch) -> None:
    cloud, base = metadata
    monkeypatch.setattr(eviction, "METADATA", base)
    heard: list[str] = []
    done = threading.Event()

    def hear(notice: str) -> None:
        heard.append(notice)
        done.set()

    watch = eviction.EvictionWatch(hear, 0.05)
    watch.start()
    cloud.preempted = True
    assert done.wait(10), "the notice never reached the agent"
    watch.stop()
    assert heard == ["GCP: the instance is being preempted"]


def test_a_bad_answer_does_not_end_the_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[object] = [ValueError("a torn answer"), None, "evicted"]

    def check() -> str | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    monkeypatch.setattr(eviction, "detect", lambda base=None: eviction.Source("test", check))
    done = threading.Event()
    heard: list[str] = []

    def hear(notice: str) -> None:
        heard.append(notice)
        done.set()

    eviction.EvictionWatch(hear, 0.01).start()
    assert done.wait(10), "one bad answer ended the listening"
    assert heard == ["evicted"] and answers == []
