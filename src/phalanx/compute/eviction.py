"""Hearing, on a low-priority node, that its machine is about to be taken away.

Clouds warn a spot VM before they take it back, through the instance metadata
service each VM reaches at 169.254.169.254:

- Azure: Scheduled Events lists a ``Preempt`` event naming the VM (at least
  30 s ahead);
- AWS: ``spot/instance-action`` answers instead of 404 (2 minutes ahead);
- GCP: ``instance/preempted`` turns ``TRUE`` (30 s ahead).

The node agent of a low-priority target (:mod:`phalanx.compute.agent`) finds
which of them its machine has once, then asks every :data:`POLL_S` seconds while
its launcher runs. On a notice it writes it into the job's system logs and sends
the launcher SIGTERM, phalanx's preemption notice: the ranks have the job's
``retry.preemption_grace`` to save (:func:`phalanx.train.watch_preemption`) and
leave with 143, the attempt ends as a preemption, and the job resumes from that
checkpoint on another node.

``PHALANX_EVICTION_NOTICE_URL`` in a node's environment names another source (a
site's own notice service): an answer 200 whose body is neither empty nor
``FALSE`` is a notice, its body the words.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

log = logging.getLogger(__name__)
_T = TypeVar("_T")

NOTICE_URL_ENV = "PHALANX_EVICTION_NOTICE_URL"
METADATA = "http://169.254.169.254"
POLL_S = 2.0
"""Seconds between two questions to the metadata service (the notice comes 30 s ahead at
the least)."""
DETECT_TIMEOUT_S = 0.5
"""How long each cloud's metadata service is given to answer when looking for one."""
ASK_TIMEOUT_S = 2.0
NOTICE_FILE = "eviction_attempt{attempt}_node{node}.txt"
"""The notice, in the job's ``system_logs``: the supervisor names it as the attempt's end."""


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""The metadata services answer only to a request made directly, never through a proxy."""


def _ask(
    url: str, headers: dict[str, str], timeout: float, method: str = "GET"
) -> tuple[int | None, str | None]:
    """The answer's status and, for a 200, its body; ``(None, None)`` without an answer."""
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with _DIRECT.open(request, timeout=timeout) as answer:
            body = answer.read(1 << 20).decode(errors="replace")
            return answer.status, (str(body) if answer.status == 200 else None)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return None, None


def _get(url: str, headers: dict[str, str], timeout: float, method: str = "GET") -> str | None:
    """The body of a 200 answer; ``None`` for any other answer or none."""
    return _ask(url, headers, timeout, method)[1]


@dataclass
class Source:
    """One way of asking whether this machine is being taken away."""

    name: str
    check: Callable[[], str | None]
    """The notice in words, or ``None`` while there is none."""


def _url_source(url: str) -> Source:
    def check() -> str | None:
        body = (_get(url, {}, ASK_TIMEOUT_S) or "").strip()
        return None if not body or body.upper() == "FALSE" else f"{url}: {body[:300]}"

    return Source(f"notice service {url}", check)


def _azure(vm_name: str, base: str) -> Source:
    url = f"{base}/metadata/scheduledevents?api-version=2020-07-01"

    def check() -> str | None:
        text = _get(url, {"Metadata": "true"}, ASK_TIMEOUT_S)
        try:
            events = (json.loads(text) if text else {}).get("Events") or []
        except (ValueError, AttributeError):
            return None
        for event in events if isinstance(events, list) else []:
            if not isinstance(event, dict) or event.get("EventType") != "Preempt":
                continue
            resources = event.get("Resources")
            named = [str(r).lower() for r in resources] if isinstance(resources, list) else []
            if not named or vm_name.lower() in named:
                return f"Azure Scheduled Events: Preempt, not before {event.get('NotBefore')}"
        return None

    return Source("Azure Scheduled Events", check)


@dataclass
class _AwsToken:
    """IMDSv2's session token (asked for again when refused)."""

    base: str
    value: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, renew: bool = False) -> str | None:
        with self.lock:
            if self.value is None or renew:
                self.value = _get(
                    f"{self.base}/latest/api/token",
                    {"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
                    ASK_TIMEOUT_S,
                    method="PUT",
                )
            return self.value


def _aws(token: _AwsToken) -> Source:
    url = f"{token.base}/latest/meta-data/spot/instance-action"

    def check() -> str | None:
        status, text = _ask(url, {"X-aws-ec2-metadata-token": token.get() or ""}, ASK_TIMEOUT_S)
        if status == 401:  # the session token expired: another, once
            headers = {"X-aws-ec2-metadata-token": token.get(renew=True) or ""}
            status, text = _ask(url, headers, ASK_TIMEOUT_S)
        if not text:  # 404: no interruption planned
            return None
        try:
            action = json.loads(text)
        except ValueError:
            action = None
        if not isinstance(action, dict):
            return f"AWS spot instance-action: {text[:200]}"
        return f"AWS spot instance-action: {action.get('action')} at {action.get('time')}"

    return Source("AWS spot instance-action", check)


def _gcp(base: str) -> Source:
    url = f"{base}/computeMetadata/v1/instance/preempted"

    def check() -> str | None:
        text = (_get(url, {"Metadata-Flavor": "Google"}, ASK_TIMEOUT_S) or "").strip()
        return "GCP: the instance is being preempted" if text.upper() == "TRUE" else None

    return Source("GCP instance/preempted", check)


def detect(base: str | None = None) -> Source | None:
    """How this machine hears of its eviction: ``PHALANX_EVICTION_NOTICE_URL``, else the
    cloud whose metadata service (at ``base``, else :data:`METADATA`) answers; ``None``
    off any cloud."""
    base = base or METADATA
    url = os.environ.get(NOTICE_URL_ENV)
    if url:
        return _url_source(url)
    name = _get(
        f"{base}/metadata/instance/compute/name?api-version=2021-02-01&format=text",
        {"Metadata": "true"},
        DETECT_TIMEOUT_S,
    )
    if name is not None:
        return _azure(name.strip(), base)
    token = _AwsToken(base)
    if token.get() is not None:
        return _aws(token)
    if _get(f"{base}/computeMetadata/v1/instance/id", {"Metadata-Flavor": "Google"},
            DETECT_TIMEOUT_S) is not None:  # fmt: skip
        return _gcp(base)
    return None


class EvictionWatch:
    """Asks, on a thread, until a notice comes (then tells ``on_notice`` once) or
    :meth:`stop`."""

    def __init__(self, on_notice: Callable[[str], None], every_s: float = POLL_S) -> None:
        self.on_notice = on_notice
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eviction-watch", daemon=True)

    def start(self) -> EvictionWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        source = None
        for wait in DETECT_RETRIES_S:  # a metadata service slow to answer once is not none
            source = _quietly(detect)
            if source is not None or self._stop.wait(wait):
                break
        if source is None:
            log.info("no eviction notice to listen for on this machine (no cloud metadata)")
            return
        log.info("listening for eviction notices: %s", source.name)
        while not self._stop.wait(self.every_s):
            notice = _quietly(source.check)
            if notice is not None:
                log.warning("eviction notice: %s", notice)
                self.on_notice(notice)
                return


DETECT_RETRIES_S = (2.0, 5.0, 10.0, 30.0, 0.0)
"""Waits between looks for a metadata service (the last look waits for nothing)."""


def _quietly(ask: Callable[[], _T]) -> _T | None:
    """``ask()``; ``None`` when it raised: one bad answer does not end the listening."""
    try:
        return ask()
    except Exception:
        log.exception("asking for an eviction notice failed; asking again")
        return None
