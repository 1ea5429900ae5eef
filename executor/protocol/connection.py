"""Per-connection handshake state: what a client may do, and when.

A connection starts ``NEW``. A successful ``initialize`` moves it to ``INITIALIZING`` (a
failed one leaves it ``NEW`` so the client may retry); the ``initialized`` notification moves
it to ``READY``. Every method other than ``initialize`` needs ``READY``.
"""

from __future__ import annotations

import enum

from executor.errors import InvalidRequest
from executor.protocol import methods

__all__ = ["HandshakeState", "Phase"]


class Phase(enum.Enum):
    """Where a connection stands in the handshake."""

    NEW = "new"
    INITIALIZING = "initializing"
    READY = "ready"


class HandshakeState:
    """The handshake state machine of one connection (no I/O)."""

    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = Phase.NEW

    def check_initialize(self) -> None:
        """Refuse a second successful ``initialize`` on this connection."""
        if self.phase is not Phase.NEW:
            raise InvalidRequest("initialize may only be sent once per connection")

    def initialize_succeeded(self) -> None:
        """Record a successful ``initialize``."""
        self.phase = Phase.INITIALIZING

    def initialized_received(self) -> bool:
        """Record ``initialized``; False if it came before a successful ``initialize``."""
        if self.phase is Phase.NEW:
            return False
        self.phase = Phase.READY
        return True

    def check_method(self, method: str) -> None:
        """Refuse ``method`` unless the handshake is complete."""
        if self.phase is Phase.READY:
            return
        family = methods.family(method)
        if self.phase is Phase.NEW:
            raise InvalidRequest(f"client must call initialize before using {family} methods")
        raise InvalidRequest(f"client must send initialized before using {family} methods")
