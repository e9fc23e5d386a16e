"""The node's BMC, polled through ``ipmitool``: ``bmc`` observations.

Every ``interval_s`` (default 30 s) the poller runs ``ipmitool chassis power
status`` and ``ipmitool sel elist`` -- on the local BMC, or over the network
with ``-I lanplus -H host -U user -E`` (the password goes to ipmitool in its
``IPMI_PASSWORD`` environment variable: never on a command line, never
logged) -- and emits:

- ``power: on|off`` when the chassis power changes (and on the first poll,
  and again after the BMC comes back);
- ``sel: <line>`` once for each *new* SEL record. The last record seen (its
  id and text) is kept in the state dir, so a restart does not resend old
  records; if that record is gone the log was cleared and every record is
  new. The first start ever sends no history: old records are not news.
- ``reachable: false`` when ipmitool fails or times out: once per outage,
  and again at the next outage after the BMC answered in between.

:data:`RunIpmitool` is the seam: tests replace :class:`Ipmitool` with
recorded outputs.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr

from common.child_env import minimal_env
from producers.bmc.sel import parse_sel_line
from producers.node.state import load_state, save_state
from producers.registry import SourceContext, SourceSettings
from producers.source import Observation, observation

__all__ = ["BmcPoller", "BmcSettings", "Ipmitool", "IpmiError", "RunIpmitool", "create", "new_sel_lines"]

log = logging.getLogger("faultline.agent.bmc")

#: ``run_ipmitool(args) -> stdout``; raises :class:`IpmiError` when the BMC does not answer.
RunIpmitool = Callable[[list[str]], str]

_PASSWORD_ENV = "IPMI_PASSWORD"


class IpmiError(RuntimeError):
    """ipmitool failed, timed out or is missing."""


class BmcSettings(SourceSettings):
    interval_s: float = Field(30.0, gt=0, description="Seconds between two polls.")
    host: str | None = Field(None, description="BMC address for -I lanplus; unset: the local BMC.")
    user: str | None = Field(None, description="lanplus user name.")
    password: SecretStr | None = Field(None, description="lanplus password (prefer password_env).")
    password_env: str = Field("FAULTLINE_BMC_PASSWORD", description="Environment variable holding the password.")
    interface: str = Field("lanplus", description="ipmitool -I interface for a remote BMC.")
    ipmitool: str = Field("ipmitool", description="The ipmitool executable.")
    timeout_s: float = Field(20.0, gt=0, description="Seconds one ipmitool call may take.")


class Ipmitool:
    """Runs ``ipmitool`` against the local BMC, or a remote one over ``interface``."""

    def __init__(
        self,
        executable: str = "ipmitool",
        host: str | None = None,
        user: str | None = None,
        password: SecretStr | None = None,
        interface: str = "lanplus",
        timeout_s: float = 20.0,
    ) -> None:
        self._prefix = [executable]
        self._env = minimal_env()  # not the agent's environment, with its Kafka password
        if host:
            self._prefix += ["-I", interface, "-H", host, "-U", user or "", "-E"]
            self._env[_PASSWORD_ENV] = password.get_secret_value() if password else ""
        self.timeout_s = timeout_s

    def __call__(self, args: list[str]) -> str:
        what = "ipmitool " + " ".join(args)
        try:
            done = subprocess.run(
                self._prefix + args, capture_output=True, text=True, timeout=self.timeout_s, env=self._env
            )
        except FileNotFoundError as exc:
            raise IpmiError(f"{self._prefix[0]} not found (install ipmitool)") from exc
        except subprocess.TimeoutExpired as exc:
            raise IpmiError(f"{what}: no answer within {self.timeout_s:g}s") from exc
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise IpmiError(f"{what}: exit {done.returncode}: {reason}")
        return done.stdout


def _power(output: str) -> str | None:
    """``Chassis Power is on`` -> ``"on"``."""
    words = output.strip().lower().split()
    return words[-1] if words and words[-1] in ("on", "off") else None


def _sel_id(line: str) -> int | None:
    head = line.split("|", 1)[0].strip()
    try:
        return int(head, 16)
    except ValueError:
        return None


def new_sel_lines(output: str, last_id: int, last_line: str) -> list[str]:
    """The SEL lines of ``output`` after the record ``last_id`` (whose text was ``last_line``);
    every line when that record is gone (the log was cleared)."""
    lines = [line.strip() for line in output.splitlines() if _sel_id(line) is not None]
    if last_id < 0 or any(_sel_id(line) == last_id and line == last_line for line in lines):
        return [line for line in lines if (_sel_id(line) or 0) > last_id]
    return lines


class BmcPoller:
    """The ``bmc`` source (see the module docstring)."""

    name = "bmc"

    def __init__(self, node: str, run: RunIpmitool, state_path: Path, interval_s: float = 30.0) -> None:
        self.node = node
        self.run = run
        self.state_path = state_path
        self.interval_s = interval_s
        self._reachable = True
        self._power: str | None = None
        saved = load_state(state_path)
        self._first_start = saved is None
        self._last_id = int((saved or {}).get("last_id", -1))
        self._last_line = str((saved or {}).get("last_line", ""))

    def poll(self, now: datetime) -> list[Observation]:
        try:
            power = _power(self.run(["chassis", "power", "status"]))
            sel = self.run(["sel", "elist"])
        except IpmiError as exc:
            return self._unreachable(now, exc)
        if not self._reachable:
            log.info("BMC of %s answers again", self.node)
            self._reachable, self._power = True, None
        found: list[Observation] = []
        if power is not None and power != self._power:
            self._power = power
            found.append(observation("bmc", now, node=self.node, power=power))
        found.extend(observation("bmc", now, node=self.node, sel=line) for line in self._new_sel(sel))
        return found

    def _unreachable(self, now: datetime, exc: IpmiError) -> list[Observation]:
        if not self._reachable:
            return []
        log.warning("BMC of %s does not answer: %s", self.node, exc)
        self._reachable = False
        return [observation("bmc", now, node=self.node, reachable=False)]

    def _new_sel(self, output: str) -> list[str]:
        """New, parseable SEL lines; remembers the last record seen."""
        fresh = new_sel_lines(output, self._last_id, self._last_line)
        if fresh:
            self._last_line = fresh[-1]
            self._last_id = _sel_id(fresh[-1]) or 0
            save_state(self.state_path, {"last_id": self._last_id, "last_line": self._last_line})
        if self._first_start:
            self._first_start = False
            if not fresh:
                save_state(self.state_path, {"last_id": self._last_id, "last_line": self._last_line})
            return []
        return [line for line in fresh if parse_sel_line(line) is not None]

    def close(self) -> None:
        """Nothing to release (each ipmitool call is its own process)."""


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> BmcPoller:
    """The ``bmc`` section's factory."""
    cfg = BmcSettings.model_validate(settings)
    password = cfg.password
    if password is None and os.environ.get(cfg.password_env):
        password = SecretStr(os.environ[cfg.password_env])
    run = Ipmitool(cfg.ipmitool, cfg.host, cfg.user, password, cfg.interface, cfg.timeout_s)
    return BmcPoller(ctx.node, run, ctx.state_path("bmc.json"), cfg.interval_s)
