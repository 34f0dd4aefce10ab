"""GET /v1/stacks projections: full, summary, launch."""

from __future__ import annotations

import json

import pytest

from runplane.stacks import (
    DEFAULT_VIEW,
    VIEWS,
    Catalog,
    Stack,
    UnknownViewError,
    parse_manifest,
    parse_view,
    stack_view,
    stacks_view,
)

# The spec's Stack (catalog entry) fields.
STACK_FIELDS = {
    "name",
    "version",
    "image",
    "modes",
    "display_name",
    "description",
    "categories",
    "requires",
    "config",
    "metrics",
    "default_command",
    "default_outputs",
    "docs",
    "examples",
    "launch",
    "unavailable",
}
FIELD_FIELDS = {"key", "type", "values", "default", "min", "max", "description"}
EXAMPLE_FIELDS = {"name", "description", "setup", "run", "code", "gpu", "display"}
LAUNCH_FIELDS = {"cover", "badge", "featured", "tasks"}
TASK_FIELDS = {
    "id",
    "title",
    "description",
    "cover",
    "command",
    "config",
    "settings",
    "presets",
}
PRESET_FIELDS = {"id", "title", "description", "cover", "config"}
SUMMARY_FIELDS = {
    "name",
    "version",
    "display_name",
    "description",
    "categories",
    "modes",
    "unavailable",
    "requires",
}


def test_views_and_default() -> None:
    assert sorted(VIEWS) == ["full", "launch", "summary"]
    assert parse_view(DEFAULT_VIEW) == "full"
    assert parse_view(None) == "full"
    assert parse_view("") == "full"
    for view in VIEWS:
        assert parse_view(view) == view


@pytest.mark.parametrize("bad", ["Full", "summary ", "compact", "launch,summary"])
def test_unknown_view_is_an_error(bad: str, builtin_catalog: Catalog) -> None:
    with pytest.raises(UnknownViewError) as info:
        parse_view(bad)
    assert info.value.view == bad
    assert info.value.accepted == ["full", "launch", "summary"]
    assert "accepted: full, launch, summary" in str(info.value)
    with pytest.raises(UnknownViewError):
        stacks_view(builtin_catalog, bad)
    with pytest.raises(ValueError):
        stack_view(builtin_catalog.list()[0], bad)


def test_full_view_has_every_stack_field(builtin_stacks: list[Stack]) -> None:
    for stack in builtin_stacks:
        view = stack_view(stack)
        assert set(view) == STACK_FIELDS, stack.name
        assert set(view["requires"]) == {"gpu", "cpu", "ram"}
        assert set(view["requires"]["gpu"]) == {"required", "min_vram_gb"}
        assert set(view["requires"]["cpu"]) == {"min_cores"}
        assert set(view["requires"]["ram"]) == {"min_gb"}
        for field in view["config"]:
            assert set(field) == FIELD_FIELDS
        for metric in view["metrics"]:
            assert set(metric) == {"key", "higher_is_better"}
        for output in view["default_outputs"]:
            assert set(output) == {"artifact", "glob", "optional"}
        for example in view["examples"]:
            assert set(example) == EXAMPLE_FIELDS
        if view["launch"] is not None:
            assert set(view["launch"]) == LAUNCH_FIELDS
            for task in view["launch"]["tasks"]:
                assert set(task) == TASK_FIELDS
                for preset in task["presets"]:
                    assert set(preset) == PRESET_FIELDS
        assert json.loads(json.dumps(view)) == view


def test_full_view_of_stack_without_launch_has_null_launch() -> None:
    stack = parse_manifest({"name": "bare", "version": "1", "image": "i"})
    view = stack_view(stack, "full")
    assert set(view) == STACK_FIELDS
    assert view["launch"] is None
    assert view["display_name"] == "bare"
    assert view["modes"] == ["run"]


def test_full_view_round_trips_through_the_parser(builtin_stacks: list[Stack]) -> None:
    for stack in builtin_stacks:  # streams are the manifest's, shown per job, not here
        assert parse_manifest(stack_view(stack)) == stack.model_copy(update={"streams": []})


def test_summary_view(builtin_stacks: list[Stack]) -> None:
    for stack in builtin_stacks:
        view = stack_view(stack, "summary")
        assert set(view) == SUMMARY_FIELDS
        assert view["requires"] == stack.requires.model_dump()


def test_launch_view_omits_image_docs_examples(builtin_stacks: list[Stack]) -> None:
    for stack in builtin_stacks:
        view = stack_view(stack, "launch")
        assert set(view) == STACK_FIELDS - {"image", "docs", "examples"}
        assert view["config"] == stack_view(stack)["config"]


def test_stacks_view_lists_every_stack_sorted(builtin_catalog: Catalog) -> None:
    for view in (None, *VIEWS):
        body = stacks_view(builtin_catalog, view)
        assert [s["name"] for s in body] == builtin_catalog.names()
    shuffled = list(reversed(builtin_catalog.list()))
    assert stacks_view(shuffled, "summary") == stacks_view(builtin_catalog, "summary")


def test_unavailable_stacks_are_listed_and_flagged() -> None:
    gone = parse_manifest({"name": "gone", "version": "1", "image": "i", "unavailable": True})
    [view] = stacks_view([gone], "summary")
    assert view["unavailable"] is True
