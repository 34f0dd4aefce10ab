"""Admission policy: caps per layer (platform < org < project < user), the effective
policy with provenance, admission ceilings and resource clamps. Pure except ``repo.py``
(SQL for the stored documents); the admission actor (``runplane/actors/admission.py``)
owns the documents in memory and the quota ledger."""

from runplane.policy.caps import (
    AXES,
    CONCURRENCY_AXES,
    RESOURCE_AXES,
    Caps,
    EffectivePolicy,
    PolicyCaps,
    PolicyDoc,
    PolicyDocBody,
    above_platform,
    ceilings,
    effective,
    empty_doc,
    platform_caps,
)
from runplane.policy.clamp import LIMIT_KEYS, Clamp, clamp

__all__ = [
    "AXES",
    "CONCURRENCY_AXES",
    "LIMIT_KEYS",
    "RESOURCE_AXES",
    "Caps",
    "Clamp",
    "EffectivePolicy",
    "PolicyCaps",
    "PolicyDoc",
    "PolicyDocBody",
    "above_platform",
    "ceilings",
    "clamp",
    "effective",
    "empty_doc",
    "platform_caps",
]
