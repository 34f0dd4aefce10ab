"""Pydantic models of a stack manifest: the spec's Stack catalog entry, field for field.

Every model is strict (a TOML string where a boolean belongs is an error, no coercion) and
refuses unknown keys, so a typo in a manifest is reported instead of silently ignored. The
models check shapes only; the cross-field rules (a default must satisfy its own field, keys
unique, ...) live in :func:`runplane.stacks.manifest.manifest_issues` and run from the
``Stack`` validator, so a ``Stack`` that exists is always consistent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

FieldType = Literal["int", "number", "bool", "enum", "select", "string"]
Mode = Literal["run", "session"]


# Validation context key: ``{"skip_checks": True}`` lets the manifest parser run the
# consistency checks itself, so that each problem keeps its own field path.
SKIP_CHECKS = "skip_checks"


def _bound(value: Any) -> int | float | None:
    # One check instead of an int | float union, whose errors would name each member.
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    raise PydanticCustomError("number_type", "Input should be a number")


Bound = Annotated[int | float | None, PlainValidator(_bound)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class GpuRequirement(_Model):
    required: bool = False
    min_vram_gb: int = Field(0, ge=0)


class CpuRequirement(_Model):
    min_cores: int = Field(0, ge=0)


class RamRequirement(_Model):
    min_gb: int = Field(0, ge=0)


class StackRequires(_Model):
    gpu: GpuRequirement = Field(default_factory=GpuRequirement)
    cpu: CpuRequirement = Field(default_factory=CpuRequirement)
    ram: RamRequirement = Field(default_factory=RamRequirement)


class StackField(_Model):
    """One declared config field (the spec's StackField)."""

    key: str
    type: FieldType
    values: list[Any] = Field(default_factory=list)
    default: Any = None
    min: Bound = None
    max: Bound = None
    description: str = ""


class MetricSpec(_Model):
    key: str
    higher_is_better: bool = True


class StreamSpec(_Model):
    """A ``[[streams]]`` table: a realtime stream the stack's jobs publish (``docs/streams.md``).
    ``transport`` defaults by kind: ``webrtc`` for video, ``sse`` otherwise."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
    kind: Literal["video", "data", "telemetry"] = "data"
    transport: Literal["sse", "webrtc"] | None = None
    fps: int = Field(0, ge=0, le=1000)
    width: int = Field(0, ge=0, le=16384)
    height: int = Field(0, ge=0, le=16384)
    enabled: bool = True
    description: str = ""

    @property
    def transport_or_default(self) -> str:
        return self.transport or ("webrtc" if self.kind == "video" else "sse")


class OutputSpec(_Model):
    artifact: str
    glob: str
    optional: bool = False


class StackExample(_Model):
    name: str
    description: str = ""
    setup: str = ""
    run: str = ""
    code: str = ""
    gpu: bool = False
    display: bool = False


class LaunchPreset(_Model):
    id: str
    title: str
    description: str = ""
    cover: str = ""
    config: dict[str, Any] = Field(default_factory=dict)


class LaunchTask(_Model):
    id: str
    title: str
    description: str = ""
    cover: str = ""
    command: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    settings: list[str] = Field(default_factory=list)
    presets: list[LaunchPreset] = Field(default_factory=list)


class StackLaunch(_Model):
    cover: str = ""
    badge: str = ""
    featured: bool = False
    tasks: list[LaunchTask] = Field(default_factory=list)


def _default_modes() -> list[Mode]:
    return ["run"]


class Stack(_Model):
    """A catalog entry. Field order is the spec's and the order of the full view."""

    name: str
    version: str
    image: str
    modes: list[Mode] = Field(default_factory=_default_modes)
    display_name: str = ""
    description: str = ""
    categories: list[str] = Field(default_factory=list)
    requires: StackRequires = Field(default_factory=StackRequires)
    config: list[StackField] = Field(default_factory=list)
    metrics: list[MetricSpec] = Field(default_factory=list)
    default_command: list[str] = Field(default_factory=list)
    default_outputs: list[OutputSpec] = Field(default_factory=list)
    #: realtime streams its jobs publish (an addition to the spec's StackView)
    streams: list[StreamSpec] = Field(default_factory=list)
    docs: str = ""
    examples: list[StackExample] = Field(default_factory=list)
    launch: StackLaunch | None = None
    unavailable: bool = False

    @model_validator(mode="before")
    @classmethod
    def _display_name_defaults_to_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("display_name"):
            name = data.get("name")
            if isinstance(name, str):
                return {**data, "display_name": name}
        return data

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Stack:
        if info.context and info.context.get(SKIP_CHECKS):
            return self
        from runplane.stacks.manifest import manifest_issues

        issues = manifest_issues(self)
        if issues:
            raise ValueError("; ".join(f"{path}: {message}" for path, message in issues))
        return self

    def config_field(self, key: str) -> StackField | None:
        for item in self.config:
            if item.key == key:
                return item
        return None

    def command_or_default(self, command: list[str] | None) -> list[str]:
        """The job's argv: its own command when given (non-empty), else the stack default."""
        return list(command) if command else list(self.default_command)
