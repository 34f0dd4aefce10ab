"""Artifact key rules: what may name an object or a prefix."""

from __future__ import annotations

import pytest

from runplane.artifacts.keys import (
    MAX_DEPTH,
    MAX_KEY_BYTES,
    MAX_SEGMENT_BYTES,
    BadKey,
    check_key,
    check_prefix,
)


@pytest.mark.parametrize(
    "key",
    [
        "job_01abc/out/model.pt",
        "a",
        "up_x/my code (1).tar.gz",
        "jobs/ünïcode/файл.txt",
        ".hidden/.file",
        "a/" * (MAX_DEPTH - 1) + "b",
        "x" * MAX_SEGMENT_BYTES,
    ],
)
def test_good_keys(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "empty"),
        ("/etc/passwd", "relative"),
        ("//etc/passwd", "relative"),
        ("..", "'..'"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a/..", "'..'"),
        ("./a", "'.'"),
        ("a/./b", "'.'"),
        ("a//b", "empty segment"),
        ("a/b/", "end with"),
        ("a\\b", "backslash"),
        ("..\\..\\x", "backslash"),
        ("a\x00b", "NUL"),
        ("a\nb", "control character"),
        ("a\x7fb", "control character"),
        ("x" * (MAX_KEY_BYTES + 1), "longer than"),
        ("é" * (MAX_KEY_BYTES // 2 + 1), "longer than"),
        ("x" * (MAX_SEGMENT_BYTES + 1), "segment longer"),
        ("a/" * MAX_DEPTH + "b", "segments"),
        ("a\udc80b", "UTF-8"),
    ],
)
def test_bad_keys(key: str, why: str) -> None:
    with pytest.raises(BadKey) as caught:
        check_key(key)
    assert why in str(caught.value)


def test_prefix_tolerates_one_trailing_slash() -> None:
    assert check_prefix("job_1/out/") == "job_1/out"
    assert check_prefix("job_1") == "job_1"
    for bad in ("", "/", "../", "a//", "/job_1"):
        with pytest.raises(BadKey):
            check_prefix(bad)
