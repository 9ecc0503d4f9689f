"""Pages of the job list: which jobs (filters), in what order (a sort), and where.

A page is read by keyset, not OFFSET: a cursor holds the sort key and name of
the row a page ends (or begins) at, and the next page is the rows after it in
that order. A deep page costs what the first does, and a page refreshed with the
same cursor stays where it was while new jobs arrive at the top. Every order
ends with the job's name, which is unique, so no two rows tie and each job is
on exactly one page.

Each page also says how many jobs match in all (``total``) and where it begins
among them (``start``), two counts over the filters' indexes.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from phalanx.errors import PhalanxError
from phalanx.limits import character_problem
from phalanx.workspace.records import JobRecord, JobStatus

if TYPE_CHECKING:
    from phalanx.workspace.store import Workspace

SORTS: dict[str, str] = {
    "created": "created_at",
    "name": "name",
    "display_name": "COALESCE(display_name, '')",
    "status": "status",
    "experiment": "experiment_name",
    "user": "COALESCE(created_by, '')",
    "compute": "COALESCE(target, '')",
    "started": "COALESCE(started_at, 0)",
    # A running job's duration grows: measured at the cursor's ``now``, so its pages agree.
    "duration": "COALESCE(COALESCE(ended_at, :now) - started_at, -1)",
}
"""Sort key → the SQL of its value (never NULL: NULLs would fall out of a keyset)."""

NEWEST_FIRST = frozenset({"created", "started", "duration"})
"""Keys whose natural order is descending (the latest, the longest first)."""

NUMERIC = frozenset({"created", "started", "duration"})
"""Keys whose values are numbers (the others are text)."""

MAX_LIMIT = 10_000


@dataclass(frozen=True)
class JobQuery:
    """Which jobs, in what order, and which page of them."""

    statuses: tuple[JobStatus, ...] = ()
    experiment: str | None = None
    user: str | None = None
    tags: tuple[tuple[str, str | None], ...] = ()
    """``(key, value)``, value ``None`` for any value; every one must match."""
    text: str | None = None
    """Part of the name, display name, experiment or user, any case."""
    parent: str | None = None
    """Only the trials of this sweep."""
    trials: bool = False
    """Without ``parent``: sweeps' trials too (by default only jobs that no sweep made,
    as Azure ML lists a workspace's jobs)."""
    sort: str = "created"
    descending: bool = True
    limit: int = 50
    cursor: str | None = None

    @classmethod
    def parse(
        cls,
        *,
        status: Sequence[str] = (),
        experiment: str | None = None,
        user: str | None = None,
        tag: Sequence[str] = (),
        text: str | None = None,
        parent: str | None = None,
        trials: bool = False,
        sort: str | None = None,
        order: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobQuery:
        """A query from what a user typed (a URL's or the CLI's values).

        Raises:
            PhalanxError: a value is not one this accepts (the message names it).
        """
        statuses = []
        for item in (part.strip() for value in status for part in value.split(",")):
            if not item:
                continue
            found = next((s for s in JobStatus if s.value.lower() == item.lower()), None)
            if found is None:
                known = ", ".join(s.value for s in JobStatus)
                raise PhalanxError(f"status: must be one of {known}; got {item!r}")
            statuses.append(found)
        tags = []
        for item in tag:
            key, eq, value = item.partition("=")
            if not key.strip():
                raise PhalanxError(f"tag: give key or key=value; got {item!r}")
            tags.append((key.strip(), value if eq else None))
        key = sort or "created"
        if key not in SORTS:
            raise PhalanxError(f"sort: must be one of {', '.join(SORTS)}; got {key!r}")
        if order not in (None, "asc", "desc"):
            raise PhalanxError(f"order: must be asc or desc; got {order!r}")
        if not 1 <= limit <= MAX_LIMIT:
            raise PhalanxError(f"limit: must be 1 to {MAX_LIMIT}; got {limit}")
        query = cls(
            statuses=tuple(statuses),
            experiment=experiment or None,
            user=user or None,
            tags=tuple(tags),
            text=(text or "").strip() or None,
            parent=parent or None,
            trials=trials,
            sort=key,
            descending=key in NEWEST_FIRST if order is None else order == "desc",
            limit=limit,
            cursor=cursor or None,
        )
        query.place()  # a bad cursor is refused now, naming the parameter
        return query

    def place(self) -> Place | None:
        """The cursor read back.

        Raises:
            PhalanxError: not a cursor of this sort and order.
        """
        if self.cursor is None:
            return None
        refused = PhalanxError("cursor: not one a job list gave; start again without it")
        try:
            data = json.loads(base64.urlsafe_b64decode(self.cursor.encode("ascii")))
            place = Place(
                before=bool(data["b"]),
                key=data.get("k"),
                name=data.get("n"),
                now=_number(data["t"]),
                sort=str(data["s"]),
                descending=bool(data["d"]),
            )
        except (ValueError, KeyError, TypeError, OverflowError, binascii.Error, UnicodeError):
            raise refused from None
        if (place.sort, place.descending) != (self.sort, self.descending):
            raise PhalanxError(
                "cursor: it belongs to another sort or order; start again without it"
            )
        # The cursor is base64 JSON, so nothing in it passed the server's checks of
        # characters: its key and name are checked here, before any database sees them
        # (a surrogate is not UTF-8, PostgreSQL's text holds no NUL, SQLite's integers
        # end at 2**63).
        key = place.key
        try:
            if key is not None:
                key = _number(key) if self.sort in NUMERIC else _text(key)
            name = None if place.name is None else _text(place.name)
        except (ValueError, TypeError, OverflowError):
            raise refused from None
        if (name is None) != (key is None) or (name is None and not place.before):
            raise refused
        return replace(place, key=key, name=name)


MAX_NUMBER = 1e12
"""The largest time (or duration) in seconds a cursor may hold: some 30,000 years."""


def _number(value: Any) -> float:
    """A cursor's time or numeric key, as a float.

    Raises:
        ValueError: not finite, or past ±``MAX_NUMBER``.
        OverflowError: an integer past a float's range.
        TypeError: not a number (text, a boolean…).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("not a number")
    number = float(value)
    if not math.isfinite(number) or abs(number) > MAX_NUMBER:
        raise ValueError("no time")
    return number


def _text(value: Any) -> str:
    """A cursor's text key or name.

    Raises:
        ValueError: it holds a character no text of a job's holds (:mod:`phalanx.limits`).
        TypeError: not text.
    """
    if not isinstance(value, str):
        raise TypeError("not text")
    if character_problem(value) is not None:
        raise ValueError("not a job's text")
    return value


@dataclass(frozen=True)
class Place:
    """Where a page begins or ends: after (or before) the row with this key and name.

    Without a key it is the end of the list (``before``: the last page).
    """

    before: bool
    key: Any
    name: str | None
    now: float
    sort: str
    descending: bool

    def encode(self) -> str:
        data = {
            "b": self.before,
            "k": self.key,
            "n": self.name,
            "t": self.now,
            "s": self.sort,
            "d": self.descending,
        }
        text = json.dumps(data, separators=(",", ":"))
        return base64.urlsafe_b64encode(text.encode()).decode("ascii")


@dataclass(frozen=True)
class JobPage:
    """One page of jobs, each with its latest attempt only (its devices)."""

    jobs: list[JobRecord]
    total: int
    """How many jobs match the filters, on every page."""
    start: int
    """How many matching jobs come before this page's first."""
    next: str | None = None
    """The cursor of the page after this one (``None``: this is the last)."""
    prev: str | None = None
    """The cursor of the page before this one (``None``: this is the first)."""
    last: str | None = field(default=None)
    """The cursor of the last page."""


def tag_rows(tags: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A job's tags as ``job_tags`` rows: a value that is not text is kept as its JSON
    (``epochs: 3`` is found by ``tag=epochs=3``)."""
    return [(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in tags.items()]


def _filters(query: JobQuery) -> tuple[list[str], dict[str, Any]]:
    where: list[str] = []
    args: dict[str, Any] = {}
    if query.statuses:
        marks = []
        for k, status in enumerate(query.statuses):
            args[f"status{k}"] = status.value
            marks.append(f":status{k}")
        where.append(f"status IN ({', '.join(marks)})")
    for column, value in (
        ("experiment_name", query.experiment),
        ("created_by", query.user),
        ("parent_name", query.parent),
    ):
        if value is not None:
            where.append(f"{column} = :{column}")
            args[column] = value
    if query.parent is None and not query.trials:
        where.append("parent_name IS NULL")
    for k, (key, value) in enumerate(query.tags):
        test = f"t.key = :tag{k}"
        args[f"tag{k}"] = key
        if value is not None:
            test += f" AND t.value = :tagvalue{k}"
            args[f"tagvalue{k}"] = value
        where.append(f"EXISTS (SELECT 1 FROM job_tags t WHERE t.job_name = jobs.name AND {test})")
    if query.text is not None:
        # A LIKE pattern of the text itself: its % and _ are escaped, not wildcards.
        needle = query.text.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
        args["text"] = f"%{needle}%"
        where.append(
            "("
            + " OR ".join(
                f"LOWER({col}) LIKE :text ESCAPE '!'"
                for col in (
                    "name",
                    "COALESCE(display_name, '')",
                    "experiment_name",
                    "COALESCE(created_by, '')",
                )
            )
            + ")"
        )
    return where, args


def read_page(ws: Workspace, query: JobQuery) -> JobPage:
    """The page of jobs ``query`` asks for (see the module's note on how)."""
    place = query.place()
    now = place.now if place is not None else time.time()
    key = SORTS[query.sort]
    where, args = _filters(query)
    args["now"] = now
    clause = (" WHERE " + " AND ".join(where)) if where else ""

    def beyond(forward: bool) -> str:
        """``(key, name)`` past the cursor's row, reading forward (or back) in the order."""
        return f"({key}, name) {'<' if forward == query.descending else '>'} (:ckey, :cname)"

    backwards = place is not None and place.before
    bounds = list(where)
    if place is not None and place.name is not None:
        bounds.append(beyond(not place.before))
        args["ckey"] = place.key
        args["cname"] = place.name
    direction = "DESC" if query.descending != backwards else "ASC"
    # Names first, over narrow columns (sorting whole rows would sort their specs too).
    names = [
        r["name"]
        for r in ws.query(
            f"SELECT name FROM jobs{' WHERE ' + ' AND '.join(bounds) if bounds else ''}"
            f" ORDER BY {key} {direction}, name {direction} LIMIT :limit",
            {**args, "limit": query.limit},
        )
    ]
    if backwards:
        names.reverse()
    jobs = _records(ws, names, key, args)
    total = int(ws.query(f"SELECT COUNT(*) AS n FROM jobs{clause}", args)[0]["n"])
    if jobs:
        first_key = jobs[0][1]
        before = [*where, beyond(False)]
        start = int(
            ws.query(
                f"SELECT COUNT(*) AS n FROM jobs WHERE {' AND '.join(before)}",
                {**args, "ckey": first_key, "cname": jobs[0][0].name},
            )[0]["n"]
        )
    else:
        start = total if place is not None and not place.before else 0

    def cursor(before: bool, row: tuple[JobRecord, Any] | None) -> str:
        return Place(
            before=before,
            key=None if row is None else row[1],
            name=None if row is None else row[0].name,
            now=now,
            sort=query.sort,
            descending=query.descending,
        ).encode()

    return JobPage(
        jobs=[job for job, _ in jobs],
        total=total,
        start=start,
        next=cursor(False, jobs[-1]) if jobs and start + len(jobs) < total else None,
        prev=cursor(True, jobs[0]) if jobs and start > 0 else None,
        last=cursor(True, None),
    )


def _records(
    ws: Workspace, names: list[str], key: str, args: dict[str, Any]
) -> list[tuple[JobRecord, Any]]:
    """The jobs ``names``, in that order, each with its sort key's value and latest attempt."""
    if not names:
        return []
    marks = {f"n{k}": name for k, name in enumerate(names)}
    inside = ", ".join(f":{m}" for m in marks)
    rows = {
        r["name"]: r
        for r in ws.query(
            f"SELECT *, {key} AS sort_key FROM jobs WHERE name IN ({inside})",
            {**marks, "now": args["now"]},
        )
    }
    latest = {
        a.job_name: a
        for a in ws.attempts_from_rows(
            ws.query(
                f"SELECT a.* FROM attempts a WHERE a.job_name IN ({inside}) AND a.number ="
                " (SELECT MAX(b.number) FROM attempts b WHERE b.job_name = a.job_name)",
                marks,
            )
        )
    }
    return [
        (ws.job_from_row(rows[n], (latest[n],) if n in latest else ()), rows[n]["sort_key"])
        for n in names
        if n in rows
    ]
