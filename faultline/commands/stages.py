"""Commands that run a stage of the pipeline: worker, sink, executor, agent, capture; and the demo."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

from common.settings import Settings
from faultline.commands import Add
from streams.health import StageKind

__all__ = ["register"]


def register(add: Add) -> None:
    d = add("demo", "Simulate a small fleet in which a GPU fails; print incidents and commands as they happen.",
            "faultline demo")
    d.add_argument("--seconds", type=float, default=20, help="wall-clock length of the demo")
    d.add_argument("--json", action="store_true", help="print the decisions as the contract's JSON on standard "
                   "output (the running commentary goes to standard error)")
    d.set_defaults(run=_demo)

    add("worker", "Run the Faust correlator worker (reads FAULTLINE_* settings).",
        "FAULTLINE_KAFKA=127.0.0.1:9092 faultline worker").set_defaults(run=_worker)

    sk = add("sink", "Archive the namespace's topics into ClickHouse until stopped (SIGTERM).",
             "FAULTLINE_ARCHIVE=http://clickhouse:8123 faultline sink run")
    sk.add_argument("action", choices=["run"])
    sk.set_defaults(run=_sink)

    e = add("executor", "Carry the namespace's commands out (Slurm, Kubernetes or a webhook), each at most once.",
            "faultline executor run --backend slurm --fleet-size 512")
    e.add_argument("action", choices=["run"])
    e.add_argument("--backend", choices=["slurm", "kubernetes", "webhook"], required=True)
    e.add_argument("--url", help="webhook: where tickets and notifications are POSTed, without credentials "
                   "(a URL with a token: FAULTLINE_WEBHOOK_URL; a bearer token: FAULTLINE_WEBHOOK_TOKEN)")
    e.add_argument("--name", help="executor name (default: the backend's); names its results, ledger and group")
    e.add_argument("--dry-run", action="store_true", help="report what would run; change nothing")
    e.add_argument("--state-dir", type=Path, help="where the ledger lives (default: <data_dir>/executors)")
    e.add_argument("--fleet-size", type=int, help="nodes in the fleet, for the circuit breaker (default: ask)")
    e.add_argument("--max-share", type=float, default=0.10, help="most of the fleet fenced per window (0.10)")
    e.add_argument("--window-min", type=float, default=10.0, help="the circuit breaker's window in minutes (10)")
    e.add_argument("--job-label", action="append", default=[], metavar="LABEL",
                   help="kubernetes: a pod label that names its job (repeatable; the job source's job_labels; "
                        "default faultline.io/job)")
    e.set_defaults(run=_executor)

    a = add("agent", "Run the node agent: every configured source of this node, published to Kafka.",
            "faultline agent --config producers/agent.example.yaml")
    a.add_argument("--config", type=Path, required=True, help="agent YAML (see producers/agent.example.yaml)")
    a.set_defaults(run=_agent)

    cp = add("capture", "Record what this node's producers observe, in the contract's capture format, for replay.",
             "faultline capture --config producers/agent.example.yaml --out node.jsonl --seconds 600")
    cp.add_argument("--config", type=Path, required=True, help="agent YAML: which sources to run")
    cp.add_argument("--out", type=Path, required=True, help="capture file (appended)")
    cp.add_argument("--seconds", type=float, help="stop after this long (default: until Ctrl-C)")
    cp.set_defaults(run=_capture)


def _heartbeat(settings: Settings, conf: dict[str, Any] | None, stage: StageKind, *, namespace: str | None = None,
               instance: str | None = None, lag_of: str | None = None) -> AbstractContextManager[object]:
    """The stage's own heartbeat (common/heartbeat.py) while it runs: its version, this process's dev mode and
    the lag it measures itself (``lag_of``: its name in common.metrics); nothing without a broker to tell."""
    if conf is None:
        return nullcontext()
    from common import metrics
    from common.heartbeat import HeartbeatPublisher, default_instance
    from faultline import __version__

    return HeartbeatPublisher(conf, namespace or settings.namespace, stage, version=__version__,
                              dev_mode=settings.dev_mode, instance=instance or default_instance(),
                              interval_s=settings.heartbeat_interval_s,
                              lag=(lambda: metrics.stage_lag(lag_of)) if lag_of else (lambda: None))


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from faultline.demo import run_demo

    return run_demo(settings, seconds=args.seconds, json_out=args.json)


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    from common.settings import MissingKeys
    from correlators.app import make_app
    from faultline.preflight import check_policy

    check_policy(settings.policy)  # a bad FAULTLINE_POLICY is one line here, not a crash inside Faust

    sys.argv = ["faultline", "worker", "-l", "info" if args.verbose else "warn", "--without-web"]
    try:
        app = make_app(settings)
    except MissingKeys as exc:
        print(f"faultline worker: {exc}", file=sys.stderr)
        return 1
    conf = settings.kafka_config(settings.kafka) if settings.kafka else None
    with _heartbeat(settings, conf, "worker", lag_of="correlator"):
        app.main()
    return 0


def _serve_metrics(settings: Settings) -> None:
    if settings.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, addr=settings.metrics_bind)


def _sink(args: argparse.Namespace, settings: Settings) -> int:
    from common.heap import tune_for_streaming
    from faultline.preflight import ensure_broker, open_archive
    from sinks.archive.endpoint_listen import configure, listen_for
    from sinks.archive_sink import ArchiveSink

    try:  # the embedded archive's fixed port and password for Grafana, if set; a bad password file stops here
        configure(listen_for(settings.archive_endpoint_port, settings.archive_endpoint_password_file))
    except ValueError as exc:
        print(f"faultline sink: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    bootstrap = ensure_broker(settings)
    _serve_metrics(settings)
    conf = settings.kafka_config(bootstrap)
    with open_archive(settings, settings.namespace) as archive, _heartbeat(settings, conf, "sink", lag_of="sink"), \
            ArchiveSink(archive, bootstrap, settings.namespace, consumer_config=conf) as sink:
        print(f"archiving {settings.namespace}.* from {bootstrap} into {settings.archive_shown}", file=sys.stderr)
        tune_for_streaming()  # this process is the sink and nothing else (common/heap.py)
        sink.run(stop)
    return 0


def _executor(args: argparse.Namespace, settings: Settings) -> int:
    from common.heartbeat import default_instance
    from common.kafka_admin import create_namespace_topics
    from common.settings import MissingKeys
    from faultline.preflight import ensure_broker
    from sinks.executors.launch import ExecutorOptions, make_executor, trust_from, webhook_url
    from sinks.executors.runner import ExecutorRunner

    try:
        trust = trust_from(settings)
        url = webhook_url(settings, args.url) if args.backend == "webhook" else None
    except (MissingKeys, ValueError) as exc:
        print(f"faultline executor: {exc}", file=sys.stderr)
        return 1
    token = settings.webhook_token.get_secret_value() if settings.webhook_token else None
    options = ExecutorOptions(backend=args.backend, state_dir=args.state_dir or settings.data_dir / "executors",
                              name=args.name, dry_run=args.dry_run, url=url, fleet_size=args.fleet_size,
                              max_share=args.max_share, window=timedelta(minutes=args.window_min),
                              trust=trust, webhook_token=token, job_labels=tuple(args.job_label))
    conf = settings.kafka_config(ensure_broker(settings))
    create_namespace_topics(conf, settings.namespace)
    _serve_metrics(settings)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    executor = make_executor(options)
    with _heartbeat(settings, conf, "executor", instance=default_instance(executor.name)), \
            ExecutorRunner(executor, conf, settings.namespace) as runner:
        print(f"executor {runner.executor.name}: carrying out {settings.namespace}.commands; Ctrl-C stops it",
              file=sys.stderr)
        runner.run(stop)
    return 0


def _agent(args: argparse.Namespace, settings: Settings) -> int:
    from producers.agent import load_config, run_agent

    try:  # the heartbeat needs the agent's broker, namespace and node; a bad config is run_agent's to report
        config = load_config(args.config)
        bootstrap = config.kafka or settings.kafka
    except Exception:  # noqa: BLE001 -- run_agent says what is wrong with it, in its words
        config, bootstrap = None, None
    conf = settings.kafka_config(bootstrap) if bootstrap else None
    with _heartbeat(settings, conf, "agent", namespace=config.namespace if config else None,
                    instance=config.node if config else None):
        return run_agent(args.config, settings)


def _capture(args: argparse.Namespace, settings: Settings) -> int:
    from producers.agent import run_capture

    return run_capture(args.config, args.out, args.seconds)
