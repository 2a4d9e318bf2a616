"""The part of the environment a report may show: this project's own settings, by name, nothing else.

The allow-list is read from the tables that declare them, so it cannot drift: ``paths.HOST_ROOTS`` for the
roots, and settings/variables.py's behaviour knobs (``Settings``), plus ``NVFM_CONFIG_*`` and the logging
variables LOG_FORMAT and VERBOSE. A listed name whose value
still looks secret is shown as redacted; everything else (a service-account token, KUBECONFIG, any
credential a user put in ``driver.env``) is never read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from driver_container import __version__
from driver_container.base.paths import ENV_NAMES
from driver_container.formats.redact import looks_secret
from driver_container.report.model import Member
from driver_container.settings import variables
from driver_container.settings.variables import FABRIC_OVERRIDE_PREFIX

CLI_ENV = variables.names("logging")


def settings_env_names() -> tuple[str, ...]:
    """The behaviour knobs' names (settings/variables.py), ``POD_NAME`` and ``HOSTNAME`` among them."""
    return variables.names("behaviour")


def allowed(name: str, names: frozenset[str]) -> bool:
    return name in names or name.startswith(FABRIC_OVERRIDE_PREFIX)


def environment_member(env: Mapping[str, str] | None = None) -> Member:
    """The allow-listed part of ``env`` (None: this process's environment, read here and only for this)."""
    env = os.environ if env is None else env
    names = frozenset((*ENV_NAMES, *settings_env_names(), *CLI_ENV))
    shown = {name: "<redacted>" if looks_secret(name) else env[name] for name in sorted(env) if allowed(name, names)}
    body = {"entrypoint_version": __version__, "environment": shown, "allow_list": sorted(names)}
    data = (json.dumps(body, indent=2) + "\n").encode()
    return Member("environment.json", "this process's environment, allow-listed names only", data)
