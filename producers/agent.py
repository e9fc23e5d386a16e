"""The node agent: one process per node running every configured source (``faultline agent``).

Each source of the config's ``sources:`` section (see :mod:`producers.registry`
and ``producers/agent.example.yaml``) runs on a thread of its own, polled every
``interval_s``; a source that fails to start or to poll is logged and backs off
alone (1 s doubling to 5 min) while the others go on. The main thread turns
the observations into events through :func:`producers.capture.parse_capture_line`
-- the replay's parser, so live and replay cannot drift -- optionally appends
them to a capture file, and publishes through a
:class:`~producers.spool.SpoolingPublisher` (so a broker outage or restart
loses nothing), what arrived together several events to a record
(``batch_max_events``). SIGTERM or SIGINT stops it cleanly: sources are closed, what
can be delivered within a few seconds is, and the rest stays spooled for the
next start.
"""

from __future__ import annotations

import json
import logging
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Protocol

import yaml
from prometheus_client import start_http_server
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.deadletters import dead_letter
from producers import metrics
from producers.batching import Batching
from producers.capture import BadInput, parse_capture_line
from producers.exported_metrics import ExportedMetrics
from producers.registry import SOURCES, SourceContext, SourceFactory, load_factory
from producers.source import Observation, Source
from producers.spool import SpoolingPublisher
from streams.cells import CELL_NAME
from streams.decisions import DeadLetter
from streams.events import Event

if TYPE_CHECKING:
    from common.settings import Settings

__all__ = ["Agent", "AgentConfig", "ConfigError", "SourceRunner", "SpoolConfig", "load_config", "run_agent"]

log = logging.getLogger("faultline.agent")

_MIB = 1 << 20
_PUMP_EVERY_S = 0.5
_QUEUE_MAX = 10_000
_BATCH_MAX = 1_000
_BACKOFF_S = (1.0, 300.0)
_STOP_BUDGET_S = 10.0


class ConfigError(ValueError):
    """The agent config is not usable; the message says what to fix."""


class SpoolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_mib: int = Field(256, ge=2, description="Disk the spool may use before the oldest records go.")
    segment_mib: int = Field(4, ge=1, description="Size of one spool file.")
    max_inflight: int = Field(1000, ge=1, description="Records handed to Kafka at a time.")
    message_timeout_s: float = Field(300.0, gt=0, description="How long Kafka retries one record.")


class AgentConfig(BaseModel):
    """The agent's YAML config (documented knob by knob in ``producers/agent.example.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(default_factory=socket.gethostname, description="This node's name.")
    rack: str | None = Field(None, description="The rack, sent with the GPU inventory.")
    kafka: str | None = Field(None, description="Bootstrap servers; unset: $FAULTLINE_KAFKA.")
    namespace: str | None = Field(None, description="Topic prefix; unset: $FAULTLINE_NAMESPACE or 'faultline'.")
    cell: str | None = Field(None, pattern=CELL_NAME.pattern,
                             description="This node's cell (the events key); unset: $FAULTLINE_CELL or 'default'.")
    state_dir: Path = Field(Path("/var/lib/faultline-agent"), description="Spool, read positions, last ids.")
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus port; 0 = off.")
    capture_file: Path | None = Field(None, description="Append every observation here (capture format).")
    max_future_s: float = Field(
        3600.0, gt=0, description="An observation stamped further ahead of this node's clock is refused (a "
        "dead letter): a source clock gone wrong (a BMC reset to 2099) would move the correlator's event "
        "clock forward and close every open window. Past times are kept (a SEL read late is still true).")
    spool: SpoolConfig = Field(default_factory=SpoolConfig)
    batch_max_events: int = Field(
        200, ge=1, le=10_000, description="Events per Kafka record: what the sources observed together (one "
        "wake-up of the agent, one source at a time) travels as one batch record (streams/batch.py), which the "
        "correlator takes at a fraction of the per-record cost. 1: one event per record, the shape consumers older "
        "than batches read -- set it while upgrading, until the correlator and sink read batches.")
    sources: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Section name -> settings.")

    @field_validator("sources", mode="before")
    @classmethod
    def _known_sources(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(SOURCES))
            if unknown:
                raise ValueError(f"unknown sources {unknown}; known: {sorted(SOURCES)}")
            return {name: settings or {} for name, settings in value.items()}
        return value


def load_config(path: Path) -> AgentConfig:
    """Read and validate the YAML config at ``path``."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
        return AgentConfig.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"agent config {path}: {exc}") from None


class SourceRunner:
    """Polls one source on its own thread and puts ``(name, observations)`` on ``out``."""

    def __init__(
        self,
        name: str,
        factory: SourceFactory,
        ctx: SourceContext,
        settings: Mapping[str, Any],
        out: queue.Queue[tuple[str, list[Observation]]],
        stop: threading.Event,
        source: Source | None = None,
    ) -> None:
        self.name = name
        self._factory, self._ctx, self._settings = factory, ctx, settings
        self._out, self._stop = out, stop
        self.source = source
        self._backoff = _BACKOFF_S[0]
        self.thread = threading.Thread(target=self._run, name=f"source-{name}", daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            interval = self._step()
            if interval is None:
                return
            next_at = max(next_at + interval, time.monotonic())
        if self.source is not None:
            self._close()

    def _step(self) -> float | None:
        """Start the source if needed and poll it; the seconds until the next step (None: give up)."""
        if self.source is None:
            try:
                self.source = self._factory(self._ctx, self._settings)
            except Exception:
                return self._failed("start")
            if self.source is None:
                return None  # not available on this node; the factory said why
        try:
            found = self.source.poll(datetime.now(UTC))
        except Exception:
            return self._failed("poll")
        self._backoff = _BACKOFF_S[0]
        if found:
            metrics.OBSERVATIONS.labels(self.name).inc(len(found))
            self._put(found)
        return self.source.interval_s

    def _failed(self, what: str) -> float:
        log.exception("source %s: %s failed; trying again in %.0f s", self.name, what, self._backoff)
        metrics.SOURCE_ERRORS.labels(self.name).inc()
        delay, self._backoff = self._backoff, min(self._backoff * 2, _BACKOFF_S[1])
        return delay

    def _put(self, found: list[Observation]) -> None:
        while not self._stop.is_set():
            try:
                self._out.put((self.name, found), timeout=0.5)
                return
            except queue.Full:
                continue

    def _close(self) -> None:
        assert self.source is not None
        try:
            self.source.close()
        except Exception:
            log.exception("source %s: close failed", self.name)


class Publisher(Protocol):
    """Where the agent's events go: the spooling Kafka publisher, or nowhere (`faultline capture`)."""

    def pump(self) -> None: ...
    def publish(self, events: Iterable[Event]) -> None: ...
    def dead_letter(self, dl: DeadLetter) -> None: ...
    def close(self, timeout_s: float) -> None: ...
    def backlog(self) -> int: ...


class CaptureOnly:
    """A publisher that sends nothing: the agent only records observations to its capture file."""

    def pump(self) -> None:
        return None

    def publish(self, events: Iterable[Event]) -> None:
        return None

    def dead_letter(self, dl: DeadLetter) -> None:
        return None

    def close(self, timeout_s: float) -> None:
        return None

    def backlog(self) -> int:
        return 0


class Agent:
    """All of a node's sources, one publisher (see the module docstring)."""

    def __init__(self, config: AgentConfig, publisher: Publisher) -> None:
        self.config = config
        self.publisher = publisher
        self.exported = ExportedMetrics()
        self.stop = threading.Event()
        self._queue: queue.Queue[tuple[str, list[Observation]]] = queue.Queue(_QUEUE_MAX)
        self._capture: IO[str] | None = None
        ctx = SourceContext(node=config.node, state_dir=config.state_dir, rack=config.rack)
        runners = (self._runner(name, settings, ctx) for name, settings in config.sources.items())
        self.runners = [runner for runner in runners if runner is not None]

    def _runner(self, name: str, settings: dict[str, Any], ctx: SourceContext) -> SourceRunner | None:
        """A runner for ``name`` with its source started now if it can be; ``None`` when the
        source is not available on this node. A bad section is a :class:`ConfigError`."""
        factory = load_factory(name)
        source: Source | None = None
        try:
            source = factory(ctx, settings)
        except ValidationError as exc:
            raise ConfigError(f"sources.{name}: {exc}") from None
        except Exception:
            log.exception("source %s: start failed; the agent will try again", name)
        else:
            if source is None:
                return None  # the factory said why
        return SourceRunner(name, factory, ctx, settings, self._queue, self.stop, source)

    def run(self, deadline: float | None = None) -> None:
        """Run until :attr:`stop` is set (or the monotonic ``deadline``), then stop cleanly."""
        if self.config.capture_file is not None:
            self._capture = open(self.config.capture_file, "a", encoding="utf-8")  # closed in _shutdown
        for runner in self.runners:
            runner.thread.start()
        log.info("agent for %s running sources %s", self.config.node, [r.name for r in self.runners])
        last_pump = time.monotonic()
        try:
            while not self.stop.is_set() and (deadline is None or time.monotonic() < deadline):
                self._handle_batch(timeout=_PUMP_EVERY_S)
                if time.monotonic() - last_pump >= _PUMP_EVERY_S:
                    self.publisher.pump()
                    last_pump = time.monotonic()
        finally:
            self._shutdown()

    def _handle_batch(self, timeout: float) -> None:
        """Parse and publish what the sources have put on the queue (waiting up to ``timeout``)."""
        try:
            batch = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return
        while len(batch) < _BATCH_MAX:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        events: list[Event] = []
        now = datetime.now(UTC)
        for name, observations in batch:
            events.extend(self._events(name, observations, now))
        if self._capture is not None:
            self._capture.flush()
        self.publisher.publish(events)

    def _events(self, name: str, observations: list[Observation], now: datetime) -> list[Event]:
        events: list[Event] = []
        horizon = now + timedelta(seconds=self.config.max_future_s)
        for obs in observations:
            line = json.dumps(obs, separators=(",", ":"))
            if self._capture is not None:
                self._capture.write(line + "\n")
            try:
                parsed = parse_capture_line(line)
                ahead = max((e.ts for e in parsed), default=now)
                if ahead > horizon:
                    raise BadInput(f"stamped {ahead.isoformat()}, {(ahead - now).total_seconds():.0f}s ahead of "
                                   f"this node's clock (max_future_s={self.config.max_future_s:.0f}); check the "
                                   "source's clock (NTP, or the BMC's: ipmitool sel time get)", kind="bad_timestamp")
            except BadInput as exc:
                log.warning("source %s: unusable observation (%s)", name, exc.reason)
                metrics.PARSE_ERRORS.labels(name).inc()
                self.publisher.dead_letter(
                    dead_letter("agent", f"{name}: {exc.reason}", line)
                )
                continue
            for event in parsed:
                self.exported.observe(event)
            events.extend(parsed)
        return events

    def _shutdown(self) -> None:
        self.stop.set()
        until = time.monotonic() + _STOP_BUDGET_S
        for runner in self.runners:
            if runner.thread.is_alive():
                runner.thread.join(max(0.0, until - time.monotonic()))
        self._handle_batch(timeout=0)
        self.publisher.close(timeout_s=_STOP_BUDGET_S)
        if self._capture is not None:
            self._capture.close()
        log.info("agent stopped; %d records still spooled", self.publisher.backlog())


def _publisher(config: AgentConfig, settings: Settings) -> SpoolingPublisher:
    bootstrap = config.kafka or settings.kafka
    if not bootstrap:
        raise ConfigError("no Kafka: set 'kafka' in the agent config or FAULTLINE_KAFKA")
    spool = config.spool
    return SpoolingPublisher(
        settings.kafka_config(bootstrap),
        config.namespace or settings.namespace,
        config.state_dir / "spool",
        max_bytes=spool.max_mib * _MIB,
        segment_bytes=spool.segment_mib * _MIB,
        max_inflight=spool.max_inflight,
        message_timeout_s=spool.message_timeout_s,
        cell=config.cell or settings.cell,
        batching=Batching(max_events=config.batch_max_events, per_source=True) if config.batch_max_events > 1
        else None,
    )


def run_capture(config_path: Path, out: Path, seconds: float | None) -> int:
    """``faultline capture``: run this node's sources and record what they observe to ``out``, sending nothing."""
    config = load_config(config_path).model_copy(update={"capture_file": out, "metrics_port": 0})
    config.state_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(config, CaptureOnly())
    signal.signal(signal.SIGTERM, lambda *_: agent.stop.set())
    signal.signal(signal.SIGINT, lambda *_: agent.stop.set())
    agent.run(deadline=time.monotonic() + seconds if seconds else None)
    return 0


def run_agent(config_path: Path, settings: Settings) -> int:
    """``faultline agent --config FILE``: run until SIGTERM or SIGINT; 0 on a clean stop."""
    config = load_config(config_path)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    held: list[Agent] = []
    asked: list[int] = []

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        asked.append(signum)
        for a in held:
            a.stop.set()

    # before the spool is opened (it writes its cursor at once): a SIGTERM while starting stops it cleanly too
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    agent = Agent(config, _publisher(config, settings))
    held.append(agent)
    if asked:
        agent.stop.set()
    if config.metrics_port:
        start_http_server(config.metrics_port, addr=settings.metrics_bind)
    agent.run()
    return 0
