"""The stack catalog: built-in manifests plus an operator's extra directory.

``load_catalog(extra_dir)`` reads the built-ins shipped in ``runplane/stacks/builtin`` and
then ``extra_dir/*.toml`` (``RUNPLANE_STACKS_DIR``); an extra manifest replaces the built-in
of the same name. A manifest that fails to load is skipped, recorded in ``Catalog.errors``
and logged as a warning on the ``runplane.stacks`` logger; it never takes the catalog down.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from runplane.stacks.manifest import (
    DUPLICATE_NAME,
    UNREADABLE,
    ManifestError,
    ManifestInvalid,
    parse_manifest_text,
)
from runplane.stacks.models import Stack

log = logging.getLogger("runplane.stacks")

BUILTIN = "builtin"


class Catalog:
    """An immutable set of stacks by name, plus the errors met while loading it."""

    __slots__ = ("_origins", "_stacks", "errors")

    errors: tuple[ManifestError, ...]

    def __init__(
        self,
        stacks: Iterable[Stack] = (),
        errors: Iterable[ManifestError] = (),
        origins: Mapping[str, str] | None = None,
    ) -> None:
        self._stacks: dict[str, Stack] = {s.name: s for s in sorted(stacks, key=lambda s: s.name)}
        self._origins: dict[str, str] = dict(origins or {})
        self.errors = tuple(errors)

    def get(self, name: str) -> Stack | None:
        """The stack called ``name`` (unavailable ones included), or ``None``."""
        return self._stacks.get(name)

    def names(self) -> list[str]:
        return list(self._stacks)

    def origin(self, name: str) -> str | None:
        """Where a stack came from: ``builtin`` or the path of the extra manifest."""
        return self._origins.get(name) if name in self._stacks else None

    def __contains__(self, name: object) -> bool:
        return name in self._stacks

    def __len__(self) -> int:
        return len(self._stacks)

    def __iter__(self) -> Iterator[Stack]:
        return iter(self._stacks.values())

    def list(self) -> list[Stack]:
        """Every stack, sorted by name."""
        return list(self._stacks.values())


def _report(error: ManifestError) -> None:
    log.warning(
        "stack manifest rejected",
        extra={
            "manifest": error.file,
            "field": error.field,
            "code": error.code,
            "problem": error.message,
        },
    )


def _load_source(
    files: Iterable[tuple[str, Traversable]],
) -> tuple[dict[str, tuple[Stack, str]], list[ManifestError]]:
    """Parse each (display path, file); duplicate names within one source are errors."""
    loaded: dict[str, tuple[Stack, str]] = {}
    errors: list[ManifestError] = []
    for shown, entry in files:
        try:
            text = entry.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(ManifestError(shown, "", UNREADABLE, str(exc)))
            continue
        try:
            stack = parse_manifest_text(text, shown)
        except ManifestInvalid as exc:
            errors.extend(exc.errors)
            continue
        if stack.name in loaded:
            first = loaded[stack.name][1]
            errors.append(
                ManifestError(
                    shown,
                    "name",
                    DUPLICATE_NAME,
                    f"stack {stack.name!r} is already defined by {first}; this file is skipped",
                )
            )
            continue
        loaded[stack.name] = (stack, shown)
    return loaded, errors


def _builtin_root() -> Traversable:
    return resources.files("runplane.stacks").joinpath("builtin")


def _builtin_files() -> tuple[list[tuple[str, Traversable]], list[ManifestError]]:
    root = _builtin_root()
    try:
        entries = [e for e in root.iterdir() if e.name.endswith(".toml") and e.is_file()]
    except OSError as exc:
        # An install that left out the package data: say so, serve the extra dir anyway.
        message = f"built-in stack manifests are missing from the installation: {exc}"
        return [], [ManifestError(str(root), "", UNREADABLE, message)]
    return [(str(e), e) for e in sorted(entries, key=lambda e: e.name)], []


def _extra_files(extra_dir: Path) -> tuple[list[tuple[str, Traversable]], list[ManifestError]]:
    if not extra_dir.is_dir():
        error = ManifestError(
            str(extra_dir), "", UNREADABLE, "stacks directory does not exist or is not a directory"
        )
        return [], [error]
    paths = sorted(
        p for p in extra_dir.glob("*.toml") if not p.name.startswith(".") and p.is_file()
    )
    return [(str(p), p) for p in paths], []


def load_catalog(extra_dir: Path | None = None) -> Catalog:
    """Built-in stacks, then ``extra_dir/*.toml`` (not recursive; dot-files skipped).

    An extra manifest overrides the built-in of the same name. Broken manifests are
    skipped and reported in ``Catalog.errors`` (and logged); a broken override leaves the
    built-in in place.
    """
    files, errors = _builtin_files()
    builtins, builtin_errors = _load_source(files)
    errors.extend(builtin_errors)
    stacks = {name: stack for name, (stack, _) in builtins.items()}
    origins = dict.fromkeys(stacks, BUILTIN)
    if extra_dir is not None:
        files, dir_errors = _extra_files(extra_dir)
        errors.extend(dir_errors)
        extras, extra_errors = _load_source(files)
        errors.extend(extra_errors)
        for name, (stack, shown) in extras.items():
            if name in stacks:
                log.info(
                    "stack manifest overrides built-in", extra={"stack": name, "manifest": shown}
                )
            stacks[name] = stack
            origins[name] = shown
    for error in errors:
        _report(error)
    log.info(
        "stack catalog loaded",
        extra={
            "stacks": len(stacks),
            "errors": len(errors),
            "extra_dir": str(extra_dir) if extra_dir is not None else None,
        },
    )
    return Catalog(stacks.values(), errors, origins)
