"""``environmentConfig/read``: this host's Codex configuration layers (docs/environment-config.md).

``service`` answers a request; ``layers`` finds and loads the files (``projects`` and
``git`` for the project layers, ``managed`` for the legacy managed file); ``selection``
keeps the requested keys; ``toml_read``/``toml_limits`` parse like the reference and
``toml_text`` renders like it.
"""

from __future__ import annotations

import asyncio

from executor.environment_config.service import SYSTEM_DIR_ENV, EnvironmentConfigService
from executor.protocol import methods
from executor.protocol.config_messages import (
    EnvironmentConfigReadParams,
    EnvironmentConfigReadResult,
)
from executor.routing import RequestContext, Route, route

__all__ = ["SYSTEM_DIR_ENV", "EnvironmentConfigService", "environment_config_routes"]


def environment_config_routes(service: EnvironmentConfigService | None = None) -> list[Route]:
    """The ``environmentConfig/read`` route (reads run in a worker thread)."""
    reader = service or EnvironmentConfigService.from_environment()

    async def read(_ctx: RequestContext, params: EnvironmentConfigReadParams) -> object:
        result: EnvironmentConfigReadResult = await asyncio.to_thread(reader.read, params)
        return result.to_wire()

    return [route(methods.ENVIRONMENT_CONFIG_READ, EnvironmentConfigReadParams, read)]
