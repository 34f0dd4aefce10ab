"""runplane's generic actor runtime: actors, supervisors, a registry, broadcast.

It knows nothing of jobs, HTTP or storage; see ``docs/runtime.md``.
"""

from .actor import DEFAULT_ASK_TIMEOUT, Actor, ActorContext, ActorRef, Asks
from .broadcast import (
    Cursor,
    Hub,
    HubStatistics,
    Ring,
    RingStatistics,
)
from .errors import (
    ActorCrashed,
    ActorError,
    ActorGone,
    AskTimeout,
    Lagged,
    MailboxClosed,
    MailboxFull,
    SupervisorEscalated,
)
from .mailbox import MailboxStatistics
from .registry import ActorKind, Kind, Registry, RegistryStatistics
from .reply import Reply
from .supervisor import ChildSpec, Restart, Supervisor, SupervisorStatistics
from .tick import SharedTick

__all__ = [
    "DEFAULT_ASK_TIMEOUT",
    "Actor",
    "ActorContext",
    "ActorCrashed",
    "ActorError",
    "ActorGone",
    "ActorKind",
    "ActorRef",
    "AskTimeout",
    "Asks",
    "ChildSpec",
    "Cursor",
    "Hub",
    "HubStatistics",
    "Kind",
    "Lagged",
    "MailboxClosed",
    "MailboxFull",
    "MailboxStatistics",
    "Registry",
    "RegistryStatistics",
    "Reply",
    "Restart",
    "Ring",
    "RingStatistics",
    "SharedTick",
    "Supervisor",
    "SupervisorEscalated",
    "SupervisorStatistics",
]
