"""The CLI's global options (--address, --storage-option, --output) and the clients they open.

The options are only stored when parsed and checked when a command first needs
them, so ``--help`` of any command works without an address.  Client modules are
imported inside the methods: a metadata command on a local root loads no more
than it uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

from sparklog.errors import InvalidConfigurationError

if TYPE_CHECKING:
    from sparklog.client.admin import Admin
    from sparklog.protocol.actions import Action
    from sparklog.protocol.hooks import MirrorLinks
    from sparklog.storage.catalog import LogRoot

OUTPUTS = ("table", "json")
#: This invocation's arguments, as :func:`sparklog.cli.app.main` got them: the few options
#: whose meaning depends on their order among others (kafka-configs' --entity-type NAME
#: pairs) read them here, since parsed options lose their relative order.
COMMAND_LINE: list[str] = []
#: A person at a terminal should hear about an unreachable broker within seconds.
CLI_RETRY_TIMEOUT_MS = 5_000


@dataclass
class CliState:
    address: str | None = None
    storage_option_pairs: list[str] = field(default_factory=list)
    output: str = "table"
    checked: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict)

    @property
    def json(self) -> bool:
        return self.output == "json"

    def check(self) -> CliState:
        """Validate the address and storage options (once), naming what is accepted."""
        if not self.checked:
            from sparklog.client.address import parse_address
            from sparklog.storage_options import parse_storage_options

            parsed = parse_address(self.address)
            self.storage_options = parse_storage_options(self.storage_option_pairs)
            _refuse_remote_options_on_a_local_root(parsed.root, self.storage_options)
            self.checked = True
        return self

    def admin(self, *, create: bool = False) -> Admin:
        """An Admin; ``create=False`` (read-only commands) never creates a missing root."""
        from sparklog.client.admin import Admin
        from sparklog.client.transports import open_backend

        self.check()
        backend = open_backend(
            self.address,
            self.storage_options,
            retry_timeout_ms=CLI_RETRY_TIMEOUT_MS,
            create=create,
            mirror=_mirror_links,
        )
        admin = Admin(backend=backend)
        admin._owns_backend = True  # closing the Admin closes the backend we opened for it
        return admin

    def broker_names(self, action: Action[list[str]]) -> list[str] | None:
        """The reply of ``list_topics``/``list_groups`` through the small request path
        (:mod:`sparklog.client.transports.flight_actions`: no Arrow, no numpy), or None
        where it does not apply (a storage root; TLS or SASL configured)."""
        from sparklog.client.address import parse_address
        from sparklog.client.security import security_of

        self.check()
        parsed = parse_address(self.address)
        if parsed.bootstrap is None or security_of().protocol != "PLAINTEXT":
            return None
        from sparklog.client.transports.flight_actions import ActionClient

        client = ActionClient(parsed.bootstrap, retry_timeout_ms=CLI_RETRY_TIMEOUT_MS)
        return client.call(action)

    def client_config(self) -> dict[str, Any]:
        self.check()
        return {"storage_options": self.storage_options, "retry_timeout_ms": CLI_RETRY_TIMEOUT_MS}


def _mirror_links(root: LogRoot) -> MirrorLinks:
    """The mirroring application's hook for a root's mirror link calls (``sparklog mirror``
    on a storage root), imported only when a mirror command asks for it."""
    from sparklog.mirror.admin import RootLinks

    return RootLinks(root)


def _refuse_remote_options_on_a_local_root(root: str | None, options: dict[str, Any]) -> None:
    """``-S endpoint=...`` on a local root would be ignored in silence: refuse it."""
    from sparklog.storage.objectstore import OWN_OPTIONS, normalize_url

    if root is None or not normalize_url(root).startswith("file://"):
        return
    foreign = sorted(k for k in options if k not in OWN_OPTIONS)
    if foreign:
        raise InvalidConfigurationError(
            f"storage option(s) {', '.join(foreign)} are not accepted for a local root "
            f"({root}); accepted there: {', '.join(OWN_OPTIONS)} (the others configure "
            "object stores such as s3://)"
        )


def check_output(output: str) -> str:
    if output not in OUTPUTS:
        raise InvalidConfigurationError(
            f"--output {output!r} is not accepted; accepted: table, json"
        )
    return output


def state(ctx: typer.Context) -> CliState:
    """The checked global options of this invocation."""
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    return root.obj.check()
