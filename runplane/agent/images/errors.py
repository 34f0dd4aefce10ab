"""Why a job's image could not be made ready: the text is the attempt's error."""

from __future__ import annotations


class ImageError(Exception):
    """The image is not ready and will not be for this attempt (its str says why)."""


class PullFailed(ImageError):
    """The registry or the network refused the pull (retried before it fails the attempt)."""


class DigestMismatch(ImageError):
    """What came is not what the digest names: refused (never retried, never cached)."""


class CacheFull(ImageError):
    """No room in the image cache (its limit, or the disk under it)."""
