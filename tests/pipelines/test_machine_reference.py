"""The incremental state machine against the one it replaced (``reference_machine.py``):
random DAGs (needs on earlier stages, some ``allow_failure``) driven by random event
sequences from a fixed seed; after every event both must agree on everything a caller
sees: each stage, the run's status and times, what is launchable, what changed, what to
kill, and whether a retry is refused."""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any

import pytest

from runplane.pipelines import machine as new
from tests.pipelines import reference_machine as old

SEED = 42
DAGS = 300
STEPS = 40
PHASES = ["queued", "assigned", "running", "succeeded", "failed", "timeout", "cancelled"]


def random_dag(rng: random.Random) -> list[tuple[str, tuple[str, ...], bool]]:
    names = [f"s{i}" for i in range(rng.randint(1, 12))]
    stages = []
    for i, name in enumerate(names):
        needs = tuple(rng.sample(names[:i], rng.randint(0, min(i, 3))))
        stages.append((name, needs, rng.random() < 0.2))
    return stages


def build(module: ModuleType, dag: list[tuple[str, tuple[str, ...], bool]]) -> Any:
    return module.initial([module.Stage(n, needs, allow_failure=a) for n, needs, a in dag])


def seen(module: ModuleType, state: Any) -> dict[str, Any]:
    return {
        "stages": [
            (s.name, s.phase.value, s.job_id, s.error, s.reason, dict(s.final_metrics), s.retry)
            for s in state.stages
        ],
        "run": (state.status.value, state.started_at, state.finished_at, state.retries),
        "launchable": module.launchable(state),
        "progress": state.progress(),
    }


def pick_event(rng: random.Random, state: Any, step: int) -> tuple[str, tuple[Any, ...]]:
    """An event as (kind, args), built for either module."""
    stages = state.stages
    ready = new.launchable(state)
    roll = rng.random()
    if ready and roll < 0.45:
        name = rng.choice(ready)
        kind = rng.choices(["Launched", "Waiting", "LaunchFailed"], [8, 1, 1])[0]
        if kind == "Launched":
            return kind, (name, f"job_{name}_{step}", step)
        if kind == "Waiting":
            return kind, (name, rng.choice(["quota a", "quota b"]))
        return kind, (name, "could not launch", step)
    if roll < 0.03:
        return "CancelRequested", (step,)
    if roll < 0.08:
        return "retry", (step,)
    stage = rng.choice(stages)
    job = stage.job_id or f"job_adopted_{stage.name}"
    retry = stage.retry if rng.random() < 0.9 else max(0, stage.retry - 1)
    phase = rng.choice(PHASES)
    error = "boom" if phase in ("failed", "timeout") else None
    return "JobPhase", (stage.name, job, phase, step, error, {"m": float(step)}, retry)


def apply(module: ModuleType, state: Any, kind: str, args: tuple[Any, ...]) -> Any:
    """The outcome as seen, or why the retry was refused."""
    if kind == "retry":
        try:
            outcome = module.retry(state, *args)
        except module.NotRetryable as exc:
            return state, ("refused", str(exc))
    else:
        outcome = module.transition(state, getattr(module, kind)(*args))
    said = (sorted(outcome.changed), outcome.run_changed, outcome.kill)
    return outcome.state, said


@pytest.mark.parametrize("chunk", range(3))
def test_matches_the_reference_on_random_dags(chunk: int) -> None:
    rng = random.Random(SEED + chunk)
    for _ in range(DAGS // 3):
        dag = random_dag(rng)
        mine, theirs = build(new, dag), build(old, dag)
        for step in range(1, STEPS + 1):
            kind, args = pick_event(rng, mine, step)
            mine, said_mine = apply(new, mine, kind, args)
            theirs, said_theirs = apply(old, theirs, kind, args)
            assert said_mine == said_theirs, (dag, step, kind, args)
            assert seen(new, mine) == seen(old, theirs), (dag, step, kind, args)


def test_an_older_state_reads_as_it_was_and_can_branch() -> None:
    """Transitions update shared tables in place; an earlier state still reads its own
    stages, and a transition from it does not disturb the later one."""
    state = new.initial([new.Stage("a"), new.Stage("b", ("a",)), new.Stage("c", ("a",))])
    launched = new.transition(state, new.Launched("a", "job_a", 1)).state
    done = new.transition(launched, new.JobPhase("a", "job_a", "succeeded", 2)).state
    assert new.launchable(done) == ["b", "c"]
    before = seen(new, done)
    assert [s.phase.value for s in launched.stages] == ["queued", "pending", "pending"]
    assert new.launchable(launched) == []
    failed = new.transition(launched, new.JobPhase("a", "job_a", "failed", 3, "boom")).state
    assert failed.status is new.Status.FAILED
    assert [s.phase.value for s in failed.stages] == ["failed", "skipped", "skipped"]
    assert seen(new, done) == before  # the later state is untouched by the branch
    assert [s.phase.value for s in state.stages] == ["pending"] * 3


def test_a_wide_fan_out_is_linear_in_its_width() -> None:
    """A root, 5,000 stages that need it and a join: every report is O(1), so the whole
    run is a few tens of thousands of small steps (the old machine took minutes here).
    Counted, not timed: the join's count of needs not yet met goes down by one per
    finished stage, and it is launchable exactly when the last one finished."""
    width = 5000
    middle = [f"m{i}" for i in range(width)]
    stages = [new.Stage("root"), *(new.Stage(m, ("root",)) for m in middle)]
    state = new.initial([*stages, new.Stage("join", tuple(middle))])
    state = new.transition(state, new.Launched("root", "job_root", 1)).state
    state = new.transition(state, new.JobPhase("root", "job_root", "succeeded", 2)).state
    assert new.launchable(state, 3) == ["m0", "m1", "m2"]
    assert len(new.launchable(state)) == width
    for m in middle:
        state = new.transition(state, new.Launched(m, f"job_{m}", 3)).state
    for i, m in enumerate(middle):
        assert state.tables.unmet["join"] == width - i
        state = new.transition(state, new.JobPhase(m, f"job_{m}", "succeeded", 4)).state
    assert new.launchable(state) == ["join"]
    assert state.progress()["succeeded"] == width + 1


def test_the_history_is_bounded_and_a_state_too_old_says_so() -> None:
    """The tables forget changes older than a few per stage: a state that old cannot be
    read back (an error, never a wrong answer); recent ones still can."""
    state = first = new.initial([new.Stage("a")])
    states = []
    for i in range(200):  # alternate wait reasons: one change each
        state = new.transition(state, new.Waiting("a", f"quota {i % 2}")).state
        states.append(state)
    assert len(state.tables.history) <= new.HISTORY_PER_STAGE + 64
    with pytest.raises(RuntimeError, match="too old"):
        first.stage("a")
    assert states[-3].stage("a").reason == "quota 1"
    assert state.stage("a").reason == "quota 1" and states[-2].stage("a").reason == "quota 0"
