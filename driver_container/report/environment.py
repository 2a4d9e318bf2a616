"""The part of the environment a report may show: this project's own settings, by name, nothing else.

The allow-list is read from the code that reads them, so it cannot drift: ``paths.HOST_ROOTS`` for the
roots, and the names ``Settings.from_env`` asks for (recorded by handing it a mapping that answers
nothing), plus ``NVFM_CONFIG_*`` and the CLI's own LOG_FORMAT and VERBOSE. A listed name whose value
still looks secret is shown as redacted; everything else (a service-account token, KUBECONFIG, any
credential a user put in ``driver.env``) is never read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from driver_container import __version__
from driver_container.base.paths import ENV_NAMES
from driver_container.formats.redact import looks_secret
from driver_container.report.model import Member
from driver_container.settings import FABRIC_OVERRIDE_PREFIX, Settings

CLI_ENV = ("LOG_FORMAT", "VERBOSE")


class _AskedFor(Mapping[str, str]):
    """An empty environment that remembers every name it was asked for."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __getitem__(self, name: str) -> str:
        self.names.append(name)
        raise KeyError(name)

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        self.names.append(name)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def settings_env_names() -> tuple[str, ...]:
    asked = _AskedFor()
    Settings.from_env(asked)
    return tuple(dict.fromkeys(asked.names))


def allowed(name: str, names: frozenset[str]) -> bool:
    return name in names or name.startswith(FABRIC_OVERRIDE_PREFIX)


def environment_member(env: Mapping[str, str]) -> Member:
    names = frozenset((*ENV_NAMES, *settings_env_names(), *CLI_ENV))
    shown = {name: "<redacted>" if looks_secret(name) else env[name] for name in sorted(env) if allowed(name, names)}
    body = {"entrypoint_version": __version__, "environment": shown, "allow_list": sorted(names)}
    data = (json.dumps(body, indent=2) + "\n").encode()
    return Member("environment.json", "this process's environment, allow-listed names only", data)
