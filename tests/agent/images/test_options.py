"""``runplane agent --executor container --image-cache-gb N``: the options and where the
cache goes (``<data dir>/images``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from runplane.agent.client import Agent
from runplane.agent.images.store import DEFAULT_CACHE_GB
from runplane.agent.jobplan import EXECUTORS
from runplane.cli import agent_command
from tests.agent.test_client import FACTS


def test_the_agent_command_offers_the_container_executor_and_the_cache_size() -> None:
    shown = CliRunner().invoke(agent_command, ["--help"], terminal_width=200).output
    assert "process|sandbox|container" in shown
    assert "--image-cache-gb N" in shown
    assert f"(default {DEFAULT_CACHE_GB:g})" in " ".join(shown.split())
    refused = CliRunner().invoke(
        agent_command, ["--server", "http://127.0.0.1:9", "--image-cache-gb", "0"]
    )
    assert refused.exit_code == 2 and "--image-cache-gb" in refused.output


def test_a_cache_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the image cache must be more than 0 GB"):
        Agent("http://127.0.0.1:9", tmp_path / "agent", facts=FACTS, image_cache_gb=-1)
    assert Agent("http://127.0.0.1:9", tmp_path / "agent", facts=FACTS).runner.images is None


def test_a_container_agent_keeps_its_images_in_its_data_dir(tmp_path: Path) -> None:
    if "container" not in EXECUTORS:
        pytest.skip("the container executor is not accepted by this agent's setup yet")
    agent = Agent(
        "http://127.0.0.1:9",
        tmp_path / "agent",
        facts=FACTS,
        executor="container",
        image_cache_gb=1.5,
    )
    store = agent.runner.images
    assert store is not None
    assert store.root == tmp_path / "agent" / "images"
    assert store.limit_bytes == int(1.5 * 1024**3)
