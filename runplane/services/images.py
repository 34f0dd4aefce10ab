"""The images service: a job's (or a pod service's) image resolved to a digest at submit,
the run order's image with the org's registry credential, and the org's registry
credentials (``runplane/images/``, docs/containers.md).

Nothing is cached: every submit asks the registry, so a new submit sees a tag that moved
while a rerun (which copies the stored spec) keeps the digest its first run resolved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from runplane.agent import protocol as p
from runplane.images import client, credentials
from runplane.images.client import Basic, RegistryError
from runplane.images.credentials import Credential, RegistryCredentialBody
from runplane.images.reference import BadReference, Reference, parse
from runplane.images.routing import Routing
from runplane.jobs.jobspec import ContainerImage, JobSpec
from runplane.jobs.rows import JobRow
from runplane.persistence import Store
from runplane.problems import FieldProblem, Problem
from runplane.sealing import Sealer
from runplane.settings import Settings

log = logging.getLogger("runplane.images")

#: Retry-After of a 503 when the registry gave none
RETRY_AFTER_SEC = 30
#: A submit waits at most this long for an image's resolution (each call: 10 s)
RESOLVE_SEC = 20.0
NAMED_HINT = "or name the registry in RUNPLANE_INSECURE_REGISTRIES or RUNPLANE_REGISTRY_MIRRORS"


def _problem(exc: RegistryError, key: str, asked: str) -> Problem:
    """The answer to a submit whose image could not be resolved (``key`` names it)."""
    if exc.kind == "unavailable":
        retry = str(exc.retry_after or RETRY_AFTER_SEC)
        detail = f"{key} {asked!r}: the registry cannot be reached ({exc.reason}); try again later"
        return Problem(503, "registry_unavailable", detail, headers={"Retry-After": retry})
    code, what = {
        "unknown": ("unknown_image", "no such image"),
        "denied": ("registry_denied", "the registry refused"),
        "refused": ("egress_refused", "not reachable from the server"),
    }[exc.kind]
    reason = f"{exc.reason} ({NAMED_HINT})" if exc.kind == "refused" else exc.reason
    message = f"{key} {asked!r}: {what}: {reason}"
    return Problem(422, code, message, [FieldProblem(key, code, message)])


class Images:
    def __init__(self, store: Store, settings: Settings, sealer: Callable[[], Sealer]) -> None:
        self.store = store
        self.sealer = sealer
        self.stack_images = settings.stack_images
        self.routing = Routing.of(
            settings.registry_mirrors, settings.insecure_registries, settings.egress_allow
        )

    # -- resolution at submit

    async def resolve(self, spec: JobSpec, org_id: str, *, own: bool) -> JobSpec:
        """``spec`` with its image resolved (``image`` becomes ``<name>@sha256:<hex>``,
        ``container`` says what was asked): a job's own image always, its stack's only
        with ``RUNPLANE_STACK_IMAGES=resolve``. A pod's job is left alone (its services
        carry their images). 422 naming ``image`` (no such image, refused), 503 (the
        registry cannot be reached)."""
        if spec.pod or not spec.image or (not own and self.stack_images != "resolve"):
            return spec
        found = await self.container(spec.image, org_id, "image", "job" if own else "stack")
        return spec.model_copy(update={"image": found.ref, "container": found})

    async def container(
        self, asked: str, org_id: str, key: str, source: str = "job"
    ) -> ContainerImage:
        """``asked`` resolved at its registry (``key`` names it in a Problem)."""
        try:
            ref = parse(asked)
        except BadReference as exc:
            message = f"{key} {asked[:80]!r}: {exc}"
            raise Problem(
                422, "invalid_image", message, [FieldProblem(key, "invalid", message)]
            ) from None
        auth = await self._basic(org_id, ref)
        try:
            with trio.move_on_after(RESOLVE_SEC) as waited:
                found = await client.resolve(ref, self.routing.endpoint(ref.registry), auth)
            if waited.cancelled_caught:
                raise RegistryError("unavailable", f"no answer within {RESOLVE_SEC:g} s")
        except RegistryError as exc:
            log.info(
                "image not resolved",
                extra={"org_id": org_id, "image": asked, "kind": exc.kind, "reason": exc.reason},
            )
            raise _problem(exc, key, asked) from None
        return ContainerImage.model_validate(
            {
                "asked": asked,
                "ref": ref.pinned(found.digest),
                "platforms": found.platforms,
                "source": source,
            }
        )

    async def _credential(self, org_id: str, ref: Reference) -> Credential | None:
        """The org's credential for the registry ``ref`` is pulled from: its mirror when
        it has one (a registry's credential never goes to another host)."""
        pull = self.routing.pull_host(ref.registry)
        return await credentials.for_registry(self.store, org_id, pull)

    async def _basic(self, org_id: str, ref: Reference) -> Basic | None:
        found = await self._credential(org_id, ref)
        return None if found is None else found.basic(self.sealer())

    # -- run orders

    async def orders(self, row: JobRow) -> dict[str, p.ImageOrder]:
        """For a run order: each image the job runs in (its own, its pod services'), by
        its ``ref``: where the node pulls it, over plain HTTP or not, and the org's
        credential for that registry (opened now, for this attempt only)."""
        out: dict[str, p.ImageOrder] = {}
        for container in row.spec.containers():
            ref = parse(container.ref)
            pull = self.routing.pull_host(ref.registry)
            auth = await self._basic(row.org_id, ref)
            out[container.ref] = p.ImageOrder(
                ref=container.ref,
                source=f"{pull}/{ref.repository}@{ref.digest}",
                insecure=self.routing.is_insecure(pull),
                auth=p.RegistryAuth(username=auth.username, password=auth.password)
                if auth
                else None,
            )
        return out

    # -- an org's credentials

    async def create_credential(
        self, body: RegistryCredentialBody, *, org_id: str, created_by: str
    ) -> Credential:
        cred = credentials.new(self.sealer(), body, org_id=org_id, created_by=created_by)
        await credentials.insert(self.store, cred)
        log.info(
            "registry credential created",
            extra={"credential_id": cred.id, "org_id": org_id, "registry": cred.registry},
        )
        return cred

    async def credentials(self, org_id: str | None) -> list[Credential]:
        return await credentials.listing(self.store, org_id)

    async def delete_credential(self, cred_id: str, org_id: str | None) -> Credential:
        return await credentials.delete(self.store, cred_id, org_id)
