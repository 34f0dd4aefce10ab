from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agent.workroot import remove_work_dirs


@pytest.fixture(autouse=True)
def _remove_work_dirs() -> Iterator[None]:
    yield
    remove_work_dirs()
