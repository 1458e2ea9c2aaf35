"""The CLI's global options (--address, --storage-option, --output) and the clients they open."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import typer

from sparklog.client.address import parse_address, parse_storage_options
from sparklog.client.admin import Admin
from sparklog.errors import ConfigError

OUTPUTS = ("table", "json")
#: A person at a terminal should hear about an unreachable broker within seconds.
CLI_RETRY_TIMEOUT_MS = 5_000


@dataclass
class CliState:
    address: str | None = None
    storage_option_pairs: list[str] = field(default_factory=list)
    output: str = "table"

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ConfigError(f"--output {self.output!r} is not accepted; accepted: table, json")
        parse_address(self.address)  # fail early, naming what is accepted
        self.storage_options: dict[str, Any] = parse_storage_options(self.storage_option_pairs)

    @property
    def json(self) -> bool:
        return self.output == "json"

    def admin(self) -> Admin:
        return Admin(
            self.address,
            storage_options=self.storage_options,
            retry_timeout_ms=CLI_RETRY_TIMEOUT_MS,
        )

    def client_config(self) -> dict[str, Any]:
        return {"storage_options": self.storage_options, "retry_timeout_ms": CLI_RETRY_TIMEOUT_MS}


def state(ctx: typer.Context) -> CliState:
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    return root.obj
