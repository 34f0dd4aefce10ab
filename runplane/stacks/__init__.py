"""The stack catalog: manifests, loading, config validation and views. Pure Python.

See ``docs/stacks.md``. Typical use::

    catalog = load_catalog(settings.stacks_dir)
    stack = catalog.get("sim-cartpole")
    resolved, problems = validate_config(stack, body.config)
    env = {**config_env(resolved), **body.env}
"""

from runplane.stacks.catalog import BUILTIN, Catalog, load_catalog
from runplane.stacks.config import (
    ENV_ALL,
    ENV_PREFIX,
    ConfigProblem,
    ConfigValidation,
    check_value,
    config_env,
    config_env_name,
    config_env_value,
    validate_config,
)
from runplane.stacks.manifest import (
    ManifestError,
    ManifestInvalid,
    load_manifest,
    manifest_issues,
    parse_manifest,
    parse_manifest_text,
)
from runplane.stacks.models import (
    CpuRequirement,
    GpuRequirement,
    LaunchPreset,
    LaunchTask,
    MetricSpec,
    OutputSpec,
    RamRequirement,
    Stack,
    StackExample,
    StackField,
    StackLaunch,
    StackRequires,
)
from runplane.stacks.views import (
    DEFAULT_VIEW,
    VIEWS,
    UnknownViewError,
    parse_view,
    stack_view,
    stacks_view,
)

__all__ = [
    "BUILTIN",
    "DEFAULT_VIEW",
    "ENV_ALL",
    "ENV_PREFIX",
    "VIEWS",
    "Catalog",
    "ConfigProblem",
    "ConfigValidation",
    "CpuRequirement",
    "GpuRequirement",
    "LaunchPreset",
    "LaunchTask",
    "ManifestError",
    "ManifestInvalid",
    "MetricSpec",
    "OutputSpec",
    "RamRequirement",
    "Stack",
    "StackExample",
    "StackField",
    "StackLaunch",
    "StackRequires",
    "UnknownViewError",
    "check_value",
    "config_env",
    "config_env_name",
    "config_env_value",
    "load_catalog",
    "load_manifest",
    "manifest_issues",
    "parse_manifest",
    "parse_manifest_text",
    "parse_view",
    "stack_view",
    "stacks_view",
    "validate_config",
]
