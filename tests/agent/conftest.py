from __future__ import annotations

from collections.abc import Iterator

import pytest

from runplane.agent.isolation import JobUser
from runplane.agent.uids import UidPool, UidRange
from tests.agent.workroot import remove_work_dirs


@pytest.fixture(autouse=True)
def _remove_work_dirs() -> Iterator[None]:
    yield
    remove_work_dirs()


@pytest.fixture
def range_uid() -> Iterator[JobUser]:
    """A uid of the default range held as an agent holds one (runplane/agent/uids.py: its
    lock taken), so an agent starting meanwhile on this host (another test run) neither
    gives it out nor sweeps its processes as a dead agent's leftovers; given back after."""
    pool = UidPool(UidRange.default())
    pool.check()
    user = pool.take("test")
    yield user
    pool.release("test")
    pool.close()
