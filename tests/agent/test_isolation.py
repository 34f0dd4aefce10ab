"""Isolation on a shared node: host paths only under the operator's allowlist (symlinks and
``..`` followed, never the agent's own data), jobs as an unprivileged job user when the
agent is root (their workdir handed over, the data dir out of reach), outputs only of
the job's own files, and ``isolation: gvisor|kata`` refused by the process executor.

Tests marked ``root`` need the test run as root (as CI does); the rest run as anyone."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import trio

from runplane.agent.archives import Refused
from runplane.agent.client import Agent
from runplane.agent.errors import AgentError
from runplane.agent.executor import ExecSpec, Finished, LogLines, run_job
from runplane.agent.isolation import (
    HostPathRefused,
    HostPaths,
    JobUser,
    RunAsError,
    default_work_root,
    isolation_refusal,
    make_workdir,
    prepare_work_root,
    protect_data_dir,
    release_work_root,
    resolve_job_user,
    unreachable_parent,
)
from runplane.agent.outputs import match_outputs
from runplane.agent.protocol import JobFinished, JobLogs, MountSpec, OutputGlob
from runplane.agent.uids import DEFAULT_UID_RANGE, attempt_user
from runplane.agent.workspace import (
    Mount,
    MountError,
    _copy_dir,
    clone_git,
    prepare_mounts,
)
from tests.agent.test_client import FakeServer, make_agent, run_msg
from tests.agent.test_executor import tiny_wheel
from tests.agent.workroot import reachable_work_dir

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (jobs run as a job user)")

NOT_ALLOWED = "is not under a host path this node allows"
FLAG = "`runplane agent --host-path DIR`"


# --------------------------------------------------------------------------- host paths


def test_nothing_is_allowed_by_default(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("x")
    with pytest.raises(HostPathRefused) as caught:
        HostPaths().check(secret)
    message = str(caught.value)
    assert message.startswith(f"{secret} {NOT_ALLOWED} (allowed: none); ")
    assert f"the node's operator allows host paths with {FLAG}" in message


def test_an_allowed_dir_admits_what_really_lies_under_it(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "sub").mkdir(parents=True)
    (shared / "sub" / "a.txt").write_text("a")
    outside = tmp_path / "outside.txt"
    outside.write_text("o")
    (shared / "out-link").symlink_to(outside)
    (shared / "in-link").symlink_to(shared / "sub" / "a.txt")
    (tmp_path / "shared-link").symlink_to(shared)  # the allowed dir named through a link
    paths = HostPaths.of([tmp_path / "shared-link"], [])
    assert paths.allowed == (shared,)
    assert paths.check(shared / "sub" / "a.txt") == shared / "sub" / "a.txt"
    assert paths.check(shared / "in-link") == shared / "sub" / "a.txt"
    assert paths.check(shared) == shared
    with pytest.raises(HostPathRefused, match=f"resolves to {outside}\\) {NOT_ALLOWED}"):
        paths.check(shared / "out-link")
    with pytest.raises(HostPathRefused, match=NOT_ALLOWED):
        paths.check(shared / ".." / "outside.txt")
    with pytest.raises(HostPathRefused, match=NOT_ALLOWED):
        paths.check(tmp_path / "shared-other")  # a sibling whose name starts the same


def test_the_agents_own_data_is_never_allowed(tmp_path: Path) -> None:
    data = tmp_path / "agent"
    data.mkdir()
    (data / "credential").write_text("rpn_secret\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "cred").symlink_to(data / "credential")
    paths = HostPaths.of([tmp_path], [data])
    for path in (data / "credential", tmp_path / "shared" / "cred", data):
        with pytest.raises(HostPathRefused, match="inside the agent's own data dir"):
            paths.check(path)


def test_check_open_judges_what_was_really_opened(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    outside = tmp_path / "outside"
    outside.write_text("o")
    paths = HostPaths.of([tmp_path / "shared"], [])
    fd = os.open(outside, os.O_RDONLY)
    try:
        with pytest.raises(HostPathRefused, match=NOT_ALLOWED):
            paths.check_open(fd, tmp_path / "shared" / "looked-like-this")
    finally:
        os.close(fd)


async def test_a_file_input_of_the_credential_fails_naming_the_ref(tmp_path: Path) -> None:
    data = tmp_path / "agent"
    data.mkdir()
    credential = data / "credential"
    credential.write_text("rpn_secret\n")
    workdir = tmp_path / "w"
    why = "inside the agent's own data dir or job working directories: no input may copy"
    for allowed in ([], [tmp_path]):  # not allowed, or allowed around the data dir: refused
        mounts = [Mount("inputs[0]", MountSpec(type="file", path="cred", ref=str(credential)))]
        with pytest.raises(MountError) as caught:
            await prepare_mounts(
                workdir,
                mounts,
                scratch=tmp_path / "pull",
                host_paths=HostPaths.of(allowed, [data]),
            )
        message = str(caught.value)
        assert message.startswith(f"inputs[0] (file {credential} at /work/cred): {credential} ")
        assert why in message
        assert not (workdir / "cred").exists()


def test_dir_inputs_copy_files_dirs_and_links_but_nothing_special(tmp_path: Path) -> None:
    source = tmp_path / "shared" / "data"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (source / "sub" / "run.sh").chmod(0o750)
    (source / "link").symlink_to("sub/run.sh")
    os.mkfifo(source / "fifo")  # copying it would block: skipped
    target = tmp_path / "w" / "data"
    _copy_dir(source, target, HostPaths.of([tmp_path / "shared"], []))
    assert (target / "sub" / "run.sh").read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE((target / "sub" / "run.sh").stat().st_mode) == 0o750
    assert os.readlink(target / "link") == "sub/run.sh"
    assert not os.path.lexists(target / "fifo")
    with pytest.raises(HostPathRefused, match=NOT_ALLOWED):
        _copy_dir(source, tmp_path / "w2", HostPaths())


async def test_git_from_a_node_path_needs_the_allowlist_too(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for ref in (f"file://{repo}", f"FILE://{repo}", str(repo), f"{repo}#main"):
        with pytest.raises(HostPathRefused, match=NOT_ALLOWED):
            await clone_git(ref, tmp_path / "out", HostPaths())


async def test_git_remote_helpers_that_run_commands_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(Refused, match="git fetch failed"):
        await clone_git(f"ext::touch%s{marker}", tmp_path / "out", HostPaths())
    assert not marker.exists()


# --------------------------------------------------------------------------- isolation


def test_the_process_executor_gives_no_sandbox() -> None:
    assert isolation_refusal(None, "n1") is None
    assert isolation_refusal("none", "n1") is None
    assert isolation_refusal("gvisor", "n1") == (
        "node n1 cannot give isolation gvisor: its process executor runs jobs as plain "
        "processes; gvisor needs a container executor (a node with the capability "
        "isolation-gvisor)"
    )
    assert "cannot give isolation kata" in (isolation_refusal("kata", "n1") or "")


async def test_the_agent_fails_a_run_asking_a_sandbox(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    marker = tmp_path / "ran"
    await server.send(run_msg(["touch", str(marker)], isolation="gvisor"))
    fin = await server.wait(JobFinished)
    assert fin.outcome == "failed"
    assert fin.error == isolation_refusal("gvisor", "test-node")
    assert not marker.exists()
    assert not (agent.work_root / "job_1").exists()  # nothing prepared either
    lines = [t for m in server.of(JobLogs) for s, t in m.lines if s == "system"]
    assert lines == [fin.error]


async def test_the_agent_refuses_a_node_path_input_outside_its_allowlist(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "ok.txt").write_text("fine\n")
    agent = make_agent(tmp_path, server, host_paths=[shared, tmp_path / "agent"])
    await nursery.start(agent.run)
    credential = agent.data_dir / "credential"
    credential.write_text("rpn_secret\n")
    file_input = MountSpec(type="file", path="in.txt", ref=str(credential))
    await server.send(run_msg(["cat", "in.txt"], inputs=[file_input]))
    fin = await server.wait(JobFinished)
    assert fin.outcome == "failed"
    assert fin.error is not None
    assert fin.error.startswith(f"inputs[0] (file {credential} at /work/in.txt): ")
    assert "inside the agent's own data dir" in (fin.error or "")

    ok = MountSpec(type="file", path="in.txt", ref=str(shared / "ok.txt"))
    await server.send(run_msg(["cat", "in.txt"], job_id="job_2", inputs=[ok]))
    fin = await server.wait(JobFinished, lambda m: m.job_id == "job_2")
    assert fin.outcome == "succeeded", fin
    assert server.stdout("job_2") == ["fine"]


# --------------------------------------------------------------------------- the job user


def test_a_run_as_user_that_does_not_exist_is_refused() -> None:
    with pytest.raises(RunAsError, match="--run-as no-such-user-rp: no such user"):
        resolve_job_user("no-such-user-rp")


@pytest.mark.skipif(os.geteuid() == 0, reason="as root each job runs as a uid of its own")
def test_an_agent_that_is_not_root_runs_jobs_as_itself() -> None:
    assert resolve_job_user(None) is None
    assert resolve_job_user(pwd.getpwuid(os.geteuid()).pw_name) is None
    with pytest.raises(RunAsError, match="only an agent running as root"):
        resolve_job_user("root")


@root_only
def test_a_root_agent_runs_jobs_as_one_user_only_when_told() -> None:
    # without --run-as each attempt gets a uid of its own (tests/agent/test_job_uids.py)
    assert resolve_job_user(None) is None
    assert resolve_job_user("root") is None  # the opt-out: the agent's own user
    user = resolve_job_user("nobody")
    assert user is not None
    assert (user.uid, user.gid) == (65534, 65534)


@root_only
def test_the_work_root_must_be_reachable_by_the_job_user(tmp_path: Path) -> None:
    user = attempt_user(DEFAULT_UID_RANGE[0])
    data = tmp_path / "agent"
    data.mkdir()
    # pytest's tmp_path lies under /tmp/pytest-of-root (0700): the job user cannot pass
    blocked = unreachable_parent(tmp_path, user)
    assert blocked is not None
    with pytest.raises(RunAsError, match=f"the job user {user.name} cannot reach it"):
        prepare_work_root(data, user, tmp_path / "work")
    assert prepare_work_root(data, None, None) == data / "jobs"

    top = Path(tempfile.mkdtemp())
    try:
        top.chmod(0o711)
        root = prepare_work_root(data, user, top / "work")
        assert stat.S_IMODE(root.stat().st_mode) == 0o711
        assert root.stat().st_uid == 0
        (top / "link").symlink_to(root)
        with pytest.raises(RunAsError, match="not a symlink or another user's"):
            prepare_work_root(data, user, top / "link")
        workdir = root / "job_1" / "1"
        make_workdir(workdir, root)
        (workdir / "leftover").write_text("x")
        make_workdir(workdir, root)  # the same attempt again starts clean
        assert list(workdir.iterdir()) == []
        assert stat.S_IMODE((root / "job_1").stat().st_mode) == 0o711
        assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=True)
    assert default_work_root(data).parent == Path("/var/lib/runplane")


def test_the_default_work_root_goes_with_its_agent_when_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's stop removes its default work root outside the data dir once no job
    directory is left in it (quick starts and test agents leave nothing behind); one
    still holding a job's directory, or the operator's --work-dir, stays."""
    import runplane.agent.isolation as isolation

    monkeypatch.setattr(isolation, "DEFAULT_WORK_PARENT", tmp_path / "var")
    data = tmp_path / "data"
    root = default_work_root(data)
    root.mkdir(parents=True)
    (root / "job_1").mkdir()
    release_work_root(root, data)
    assert root.is_dir()  # a job's directory is left: kept
    (root / "job_1").rmdir()
    release_work_root(root, data)
    assert not root.exists()
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    release_work_root(chosen, data)
    assert chosen.is_dir()


async def test_an_agent_whose_job_user_is_unusable_stops_saying_so(tmp_path: Path) -> None:
    agent = Agent("http://127.0.0.1:9", tmp_path / "agent", run_as="no-such-user-rp")
    with pytest.raises(AgentError, match="--run-as no-such-user-rp: no such user"):
        await agent.run()


@root_only
async def test_jobs_run_as_the_job_user_and_cannot_read_the_agents_files(
    tmp_path: Path, range_uid: JobUser
) -> None:
    user = range_uid
    work_root = reachable_work_dir()
    assert work_root is not None
    work_root.mkdir(mode=0o711)
    # a data dir next to the work root (both reachable), left world-readable by its operator
    data = work_root.parent / "agent"
    data.mkdir(mode=0o755)
    secret = data / "credential"
    secret.write_text("rpn_secret\n")
    secret.chmod(0o644)
    protect_data_dir(data, secret)  # what the agent does at start
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    workdir = work_root / "job_1" / "1"
    make_workdir(workdir, work_root)
    (workdir / "from-agent.txt").write_text("placed by the agent\n")
    script = (
        "id -u; id -g; id -G; echo $HOME; cat from-agent.txt; echo made > mine.txt; "
        f"cat {secret} || echo denied"
    )
    events: list[object] = []

    async def report(event: object) -> None:
        events.append(event)

    spec = ExecSpec(
        job_id="job_1",
        command=["sh", "-c", script],
        env={},
        workdir=workdir,
        inline_files={"inline.txt": "inline\n"},
        user=user,
    )
    finished = await run_job(spec, report)
    assert finished.outcome == "succeeded", events
    stdout = [t for e in events if isinstance(e, LogLines) for s, t in e.lines if s == "stdout"]
    stderr = [t for e in events if isinstance(e, LogLines) for s, t in e.lines if s == "stderr"]
    assert stdout == [
        str(user.uid),
        str(user.gid),
        str(user.gid),  # no supplementary groups (root's are gone)
        str(workdir),
        "placed by the agent",
        "denied",
    ]
    assert any("Permission denied" in line for line in stderr)
    for path in (workdir, workdir / "from-agent.txt", workdir / "inline.txt", workdir / "mine.txt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (user.uid, user.gid), path
    # the agent (root) still reads what the job wrote; outputs are only the job's own files
    assert (workdir / "mine.txt").read_text() == "made\n"
    (workdir / "agents.txt").write_text("root's\n")
    matched = match_outputs(workdir, [OutputGlob(artifact="a", glob="*.txt")], owner=user.uid)
    assert sorted(f.rel for f in matched.files) == [
        "from-agent.txt",
        "inline.txt",
        "mine.txt",
    ]
    assert matched.notes == ["output agents.txt skipped: not a file of the job's user"]


@root_only
async def test_requirements_install_as_the_job_user(tmp_path: Path, range_uid: JobUser) -> None:
    user = range_uid
    work_root = reachable_work_dir()
    assert work_root is not None
    work_root.mkdir(mode=0o711)
    workdir = work_root / "job_1" / "1"
    make_workdir(workdir, work_root)
    wheel = tiny_wheel(workdir / "wheels")
    (workdir / "requirements.txt").write_text(f"--no-index\n./wheels/{wheel.name}\n")
    spec = ExecSpec(
        job_id="job_1",
        command=["python3", "-c", "import rp_tinypkg as t; print(t.GREETING)"],
        # the system python: the test venv's lives under /root, which the job user cannot enter
        env={"PATH": "/usr/bin:/bin", "RUNPLANE_REQUIREMENTS": "1"},
        workdir=workdir,
        user=user,
    )
    lines: list[tuple[str, str]] = []

    async def report(event: object) -> None:
        if isinstance(event, LogLines):
            lines.extend(event.lines)

    finished = await run_job(spec, report)
    assert isinstance(finished, Finished)
    assert finished.outcome == "succeeded", lines
    assert ("stdout", "hello from rp_tinypkg") in lines
    deps = workdir.with_name("1.deps")
    assert deps.stat().st_uid == user.uid
    assert stat.S_IMODE(deps.stat().st_mode) == 0o700


def test_outputs_of_other_users_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    other = os.geteuid() + 1
    matched = match_outputs(tmp_path, [OutputGlob(artifact="a", glob="a.txt")], owner=other)
    assert matched.files == []
    assert matched.missing == ["a.txt"]
    mine = match_outputs(tmp_path, [OutputGlob(artifact="a", glob="a.txt")], owner=os.geteuid())
    assert [f.rel for f in mine.files] == ["a.txt"]


def test_a_run_order_carries_a_sandbox_only_when_one_is_asked() -> None:
    from runplane.agent.protocol import Run, RunSpec, decode_server, encode
    from runplane.jobs import repo
    from runplane.jobs.orders import run_order
    from runplane.jobs.spec import SubmitJobBody, resolve
    from runplane.stacks import load_catalog

    def row(isolation: str) -> repo.JobRow:
        body = SubmitJobBody.model_validate(
            {"stack": "shell", "command": ["true"], "isolation": isolation}
        )
        spec = resolve(body, load_catalog(None)).spec
        new = repo.NewJob(
            id="job_1", org_id="o", project="", submitted_by="", spec=spec, spec_hash="",
            priority=0,
        )  # fmt: skip
        return repo.JobRow.of(repo.new_row(new, 0))

    plain = run_order(row("none"), 1)
    assert plain.spec.isolation is None
    assert "isolation" not in encode(plain)  # agents from before the field still read it
    gvisor = run_order(row("gvisor"), 1)
    assert '"isolation":"gvisor"' in encode(gvisor).replace(" ", "")
    # an isolation this agent has never heard of is read (and then refused), not ignored
    later = Run(job_id="job_1", attempt=1, spec=RunSpec(command=["true"], isolation="firecracker"))
    decoded = decode_server(encode(later))
    assert isinstance(decoded, Run) and decoded.spec.isolation == "firecracker"
    assert "cannot give isolation firecracker" in (isolation_refusal("firecracker", "n") or "")
