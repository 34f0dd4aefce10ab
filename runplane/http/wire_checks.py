"""The server's checks on what an enrolled agent sends over ``/v1/nodes/connect``: each
frame is checked here, once, before the node actor, a job actor or the store sees it, by
the rules the HTTP edge checks request bodies with (``input_checks.py``).

A frame is at most ``MAX_FRAME_BYTES``; its JSON nests at most ``MAX_DEPTH`` levels; its
integers are within int64 and its numbers finite (no ``NaN``/``Infinity``). Every string
that names something (node name, GPU model and UUID, capability, image digest, job id,
metric name, stream and service names, artifact names and refs) and every object key is
free of control characters and lone UTF-16 surrogates and at most ``NAME_MAX`` characters
(an artifact's ``LONG_NAME_MAX``). Free text (a log line, a stream chunk's data, an error
or a decline reason) keeps its tabs, newlines and escape sequences, but a NUL or a lone
surrogate in it becomes U+FFFD (as the agent decodes bytes that are not UTF-8: shown, not
stored as what PostgreSQL cannot hold), and an error text is cut to ``ERROR_MAX``. Lists
are bounded (``LIST_MAX``: a node's GPUs, capabilities, executors, its image cache), and
so are the numbers of the protocol's fields (``_RANGES``: cores, memory, disk, GPU counts
and indices, attempts, exit codes, sizes non-negative). A stream chunk said to be
``json`` that does not parse, holds ``NaN`` or nests deeper than ``MAX_DEPTH`` is passed
on as ``text``.

What fails a check raises :class:`WireRefused` naming the field; what the session does
with it (a hello refused, a later message dropped): docs/agent.md "Checks on what an
agent sends".
"""

from __future__ import annotations

import json
import logging
import math
import re
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from runplane.agent import protocol as p

from .input_checks import INT64_MAX, MAX_DEPTH, Unfit, param_problem, parse_checked, printable

log = logging.getLogger("runplane.nodes")

#: The largest frame an agent may send (its biggest, a batch of log lines, is ~512 KiB of
#: text before JSON escapes).
MAX_FRAME_BYTES = 8 * 1024 * 1024
NAME_MAX = 256
LONG_NAME_MAX = 4096
ERROR_MAX = 4096
#: Items a list (or keys an object) may hold, by the field's name; others ``LIST_MAX``.
LIST_MAX = 100_000
_LIST_LIMITS = {
    "gpus": 256,
    "capabilities": 1024,
    "executors": 16,
    "values": 10_000,
    "final_metrics": 10_000,
}
INT32_MAX = 2**31 - 1
#: The bounds of the protocol's numeric fields, by field name (inclusive).
_RANGES: dict[str, tuple[int, int] | tuple[float, float]] = {
    "protocol": (0, INT32_MAX),
    "cpu_cores": (1, 65_536),
    "ram_gb": (0, 2**20),
    "disk_gb": (0, 2**30),
    "vram_gb": (0, 2**16),
    "index": (0, 2**16),
    "max_concurrency": (1, 1_000_000),
    "dlperf": (0.0, 1e12),
    "attempt": (0, INT32_MAX),
    "exit_code": (-(2**31), INT32_MAX),
    "n": (0, INT64_MAX),
    "step": (0, INT64_MAX),
    "ts": (0, INT64_MAX),
    "seq": (0, INT64_MAX),
    "free_bytes": (0, INT64_MAX),
    "limit_bytes": (0, INT64_MAX),
    # a drain without a deadline (a self-update's) says 1e9 (agent/lifecycle.py NO_DEADLINE_SEC)
    "deadline_sec": (0, 1e10),
}
_BAD_IN_TEXT = re.compile("[\x00\ud800-\udfff]")
_BAD_IN_NAME = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
_CHUNK_KEYS = frozenset(p.StreamChunkIn.model_fields)
_ADAPTER: TypeAdapter[p.AgentMsg] = TypeAdapter(p.AgentMessage)

Path = tuple[str | int, ...]


class WireRefused(Exception):
    """A frame fails a check: ``field`` says where (``facts.name``, ``lines.3.2``)."""

    def __init__(self, kind: str, field: str, why: str, data: Any = None) -> None:
        super().__init__(f"{field}: {why}")
        self.kind, self.field, self.why = kind, field, why
        #: the frame as parsed, when it parsed
        self.data = data


class Unknown:
    """A frame of a type this server does not know (a newer agent's): ignored."""

    def __init__(self, kind: str) -> None:
        self.kind = printable(kind[:64])


def check_frame(raw: str | bytes) -> p.AgentMsg | Unknown:
    """The agent's message in ``raw``, checked (free text cleaned); raises
    :class:`WireRefused` for what the checks refuse, pydantic's ValidationError for a
    frame that is not a message of the protocol (as ``decode_agent``)."""
    if len(raw) > MAX_FRAME_BYTES:
        raise WireRefused("?", "(frame)", f"is longer than {MAX_FRAME_BYTES} bytes")
    try:
        data = parse_checked(raw)
    except RecursionError:
        raise WireRefused("?", "(frame)", f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        p.decode_agent(raw)  # raises the ValidationError that says why, as it did before
        raise WireRefused("?", "(frame)", "is not JSON the checks can read") from None
    kind = data.get("type") if isinstance(data, dict) else None
    if isinstance(kind, str) and kind not in p.AGENT_TYPES:
        return Unknown(kind)
    kind = kind if isinstance(kind, str) else "?"
    if kind == "job_logs" and _walk_lines(data):
        _walk(kind, {k: v for k, v in data.items() if k != "lines"}, data)
    elif kind == "job_stream" and _walk_chunks(data):
        _walk(kind, {k: v for k, v in data.items() if k != "chunks"}, data)
    else:
        _walk(kind, data, data)
        if kind == "job_stream":
            _relabel_json_chunks(data)
    msg = _ADAPTER.validate_python(data)
    _check_numbers(kind, msg, (), data)
    return msg


def _walk(kind: str, data: Any, frame: Any) -> None:
    """Check every value of ``data``, the parsed ``frame`` or a part of it (iteratively:
    no recursion on hostile depth); free text is cleaned where it is."""
    stack: list[tuple[Any, Path, Any, Any]] = [(data, (), None, None)]
    while stack:
        value, path, parent, key = stack.pop()
        if isinstance(value, dict | list):
            if len(path) >= MAX_DEPTH:
                raise _refused(kind, path, f"nested deeper than {MAX_DEPTH} levels", frame)
            limit = _LIST_LIMITS.get(str(path[-1]) if path else "", LIST_MAX)
            if len(value) > limit:
                raise _refused(kind, path, f"has {len(value)} items, more than {limit}", frame)
        if isinstance(value, dict):
            for name, item in value.items():
                problem = _name_problem(name, NAME_MAX)
                if problem is not None:
                    raise _refused(kind, (*path, name), "key " + problem, frame)
                stack.append((item, (*path, name), value, name))
        elif isinstance(value, list):
            stack.extend((item, (*path, i), value, i) for i, item in enumerate(value))
        elif isinstance(value, str):
            if _free_text(kind, path):
                parent[key] = _clean(value, path)
                continue
            limit = LONG_NAME_MAX if path[:1] == ("artifacts",) else NAME_MAX
            problem = _name_problem(value, limit)
            if problem is not None:
                raise _refused(kind, path, problem, frame)
        elif isinstance(value, Unfit):
            raise _refused(kind, path, value.why, frame)


def _walk_lines(frame: dict[str, Any]) -> bool:
    """The lines of a ``job_logs`` frame, checked as :func:`_walk` would, faster (the hot
    path: up to 512 KiB of text a frame, checked in a few C-level passes); False, having
    changed nothing, when they are not shaped as the protocol says (the walk then says
    what is wrong)."""
    lines = frame.get("lines")
    if type(lines) is not list or len(lines) > LIST_MAX:
        return False
    try:
        if any(type(entry) is not list or not 2 <= len(entry) <= 3 for entry in lines):
            return False
        text = "".join([entry[1] for entry in lines])
        names = {entry[0] for entry in lines} | {entry[2] for entry in lines if len(entry) > 2}
        if not all(type(name) is str for name in names):
            return False
    except TypeError:  # a part that is not text
        return False
    for name in names:
        if (problem := _name_problem(name, NAME_MAX)) is not None:
            i, j = next(
                (i, j) for i, e in enumerate(lines) for j in (0, 2)[: len(e) - 1] if e[j] == name
            )
            raise _refused("job_logs", ("lines", i, j), problem, frame)
    if _unclean(text):
        for i, entry in enumerate(lines):
            entry[1] = _clean(entry[1], ("lines", i, 1))
    return True


def _walk_chunks(frame: dict[str, Any]) -> bool:
    """The chunks of a ``job_stream`` frame, as :func:`_walk_lines` checks log lines."""
    chunks = frame.get("chunks")
    if type(chunks) is not list or len(chunks) > LIST_MAX:
        return False
    for chunk in chunks:
        if type(chunk) is not dict or not chunk.keys() <= _CHUNK_KEYS:
            return False
        if type(chunk.get("data")) is not str or type(chunk.get("ts")) is not int:
            return False
        if type(chunk.get("encoding", "")) is not str:
            return False
    if _unclean("".join([chunk["data"] for chunk in chunks])):
        for i, chunk in enumerate(chunks):
            chunk["data"] = _clean(chunk["data"], ("chunks", i, "data"))
    _relabel_json_chunks(frame)
    return True


def _free_text(kind: str, path: Path) -> bool:
    match kind, path:
        case "job_logs", ("lines", int(), 1):
            return True
        case "job_finished" | "teleop_ack" | "update_status", ("error",):
            return True
        case "job_released", ("declined",):
            return True
        case "job_stream", ("chunks", int(), "data"):
            return True
    return False


def _unclean(text: str) -> bool:
    """A NUL or a lone surrogate in ``text`` (C-speed tests: the regular expression takes
    ten times longer on a frame of log text)."""
    if "\x00" in text:
        return True
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _clean(text: str, path: Path) -> str:
    """Free text as it is kept: NUL and lone surrogates as U+FFFD; an error cut."""
    if _unclean(text):
        text = _BAD_IN_TEXT.sub("\ufffd", text)
    if path[-1] in ("error", "declined") and len(text) > ERROR_MAX:
        text = text[: ERROR_MAX - 3] + "..."
    return text


def _name_problem(text: str, limit: int) -> str | None:
    if _BAD_IN_NAME.search(text) is not None:
        return param_problem(text)
    if len(text) > limit:
        return f"is {len(text)} characters, more than {limit}"
    return None


def _relabel_json_chunks(data: Any) -> None:
    """A chunk said to be JSON that is not, holds NaN, or nests too deep goes on as text
    (a follower parses what is JSON)."""
    chunks = data.get("chunks")
    for chunk in chunks if isinstance(chunks, list) else ():
        if isinstance(chunk, dict) and chunk.get("encoding") == "json":
            text = chunk.get("data")
            if not isinstance(text, str) or not _fit_json(text):
                chunk["encoding"] = "text"


def _fit_json(text: str) -> bool:
    try:
        value = _STRICT_JSON.decode(text)
    except (ValueError, RecursionError):
        return False
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return True  # too few brackets to be too deep
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return False
            items = item.values() if isinstance(item, dict) else item
            stack.extend((v, depth + 1) for v in items)
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_STRICT_JSON = json.JSONDecoder(parse_constant=_no_constant)


def _check_numbers(kind: str, model: BaseModel, path: Path, data: Any) -> None:
    """The protocol's numeric fields within their ``_RANGES`` (a typed walk: a metric or
    an artifact named like a field is not one)."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        where = (*path, name)
        if isinstance(value, BaseModel):
            _check_numbers(kind, value, where, data)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            _check_list(kind, value, where, data)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            low, high = _RANGES.get(name, (-math.inf, math.inf))
            if not low <= value <= high:
                raise _refused(kind, where, f"{value} is outside {low} to {high}", data)


def _check_list(kind: str, items: list[Any], path: Path, data: Any) -> None:
    """:func:`_check_numbers` of a list of models, field by field over the list (512
    stream chunks a frame)."""
    fields = type(items[0]).model_fields
    if not _flat(type(items[0])):
        for i, item in enumerate(items):  # nested: model by model
            _check_numbers(kind, item, (*path, i), data)
        return
    for name in fields.keys() & _RANGES.keys():
        low, high = _RANGES[name]
        values = [getattr(item, name) for item in items]
        for i, value in enumerate(values):
            if isinstance(value, int | float) and not low <= value <= high:
                raise _refused(kind, (*path, i, name), f"{value} is outside {low} to {high}", data)


def _flat(cls: type[BaseModel]) -> bool:
    """No field of ``cls`` may hold a model or a container (known once per class)."""
    flat = _FLAT.get(cls)
    if flat is None:
        parts = [
            part
            for info in cls.model_fields.values()
            for part in (info.annotation, *typing.get_args(info.annotation))
        ]
        flat = _FLAT[cls] = not any(
            typing.get_origin(part) in (list, tuple, dict)
            or part in (list, tuple, dict)
            or (isinstance(part, type) and issubclass(part, BaseModel))
            for part in parts
        )
    return flat


_FLAT: dict[type[BaseModel], bool] = {}


def _refused(kind: str, path: Path, why: str, data: Any) -> WireRefused:
    field = ".".join(str(part) for part in path) or "(frame)"
    return WireRefused(kind, printable(field), why, data)


def one_line(exc: ValidationError) -> str:
    """A frame's first validation error in one line naming the field (``facts.cpu_cores:
    Input should be greater than or equal to 1``); a close reason the agent prints."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "not a message of the protocol"
    first = errors[0]
    loc = [str(part) for part in first["loc"]]
    if len(loc) > 1 and loc[0] in p.AGENT_TYPES:  # the union's tag
        loc = loc[1:]
    field = printable(".".join(loc)[:200]) or "(frame)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{field}: {first['msg']}{more}".splitlines()[0]


def failed_finish(refused: WireRefused) -> p.JobFinished | None:
    """What a refused ``job_finished`` stands for: the attempt failed, saying why (so the
    job does not wait on a report the agent would resend forever); None when the frame
    does not say which attempt, in a form that can be trusted."""
    data = refused.data
    if refused.kind != "job_finished" or not isinstance(data, dict):
        return None
    job_id, attempt = data.get("job_id"), data.get("attempt")
    if not isinstance(job_id, str) or _name_problem(job_id, NAME_MAX) is not None:
        return None
    if type(attempt) is not int or not 0 <= attempt <= INT32_MAX:
        return None
    error = f"the agent's finish report was refused: {refused}"
    return p.JobFinished(job_id=job_id, attempt=attempt, outcome="failed", error=error)


class Dropped:
    """A session's later messages the checks refused: each (type, field) logged once, all
    counted (logged when the session ends)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.count = 0
        self._seen: set[tuple[str, str]] = set()

    def note(self, refused: WireRefused) -> None:
        self.count += 1
        key = (refused.kind, refused.field)
        if key in self._seen or len(self._seen) >= 100:
            return
        self._seen.add(key)
        log.warning(
            "agent message dropped",
            extra={
                "node_id": self.node_id,
                "type": printable(refused.kind[:64]),
                "field": refused.field[:200],
                "reason": refused.why[:200],
            },
        )
