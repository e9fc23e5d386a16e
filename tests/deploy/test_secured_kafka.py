"""Secured Kafka: a broker that requires TLS and SASL/SCRAM-SHA-512 (SASL_SSL) and enforces ACLs,
with every stage on it.

One broker for the module (:class:`deploy.local.kafka.LocalKafka` with a
:class:`~deploy.local.kafka_security.BrokerAuth` whose TLS certificate a private CA of the test
signed; never the shared plaintext one): clients without credentials, with a wrong password or
that do not trust the CA are refused; a replay (producer, Faust worker, readers, archive sink)
runs through it, verifying the broker against the CA (``FAULTLINE_KAFKA_SSL_CA_FILE``), and
decides as offline; the password is in no log; and with the ACL plan of :mod:`deploy.acls`
applied, each service's own user does its job and is refused the rest, the correlator's
internal topics (state snapshots, the ``emitted`` changelog) included.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common.kafka_admin import create_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from deploy.acls import SERVICES, acl_plan, apply_acls, correlator_app_id
from deploy.local.kafka import LocalKafka
from deploy.local.kafka_security import BrokerAuth, make_tls
from faultline.outcome import collate, decide_offline
from faultline.pipeline import (
    CorrelatorWorker,
    archive,
    collect,
    end_marker,
    publish_capture,
    replay,
    wait_for_end,
)
from producers.delivery import EventPublisher, event_key
from producers.spool.readback import ReadBack, record_digest
from sinks.executors.approvals import find_command, send_decision
from sinks.executors.launch import ExecutorOptions, make_executor
from sinks.executors.runner import ExecutorRunner
from streams.cells import DEFAULT_CELL
from streams.decisions import Approval, CommandResult
from streams.topics import topic_name
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")  # one incident, three commands (one waits for approval)
DEADLINE_S = 120.0

pytestmark = [pytest.mark.broker,
              needs_shared(SCENARIO)]


@dataclass
class Secured:
    """The module's secured broker, its admin and one SCRAM user per service."""

    kafka: LocalKafka
    auth: BrokerAuth
    passwords: dict[str, str] = field(repr=False)  # service -> password; the user is faultline-<service>

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    def admin_conf(self) -> dict[str, Any]:
        return self.kafka.client_config()

    def conf(self, service: str, password: str | None = None) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap,
                **self.auth.client_config(f"faultline-{service}", password or self.passwords[service])}

    def settings(self, service: str | None, tmp: Path, namespace: str) -> Settings:
        """Settings as a deployment would give them (service None: the admin, as `faultline replay` runs)."""
        user, password = ((f"faultline-{service}", self.passwords[service]) if service
                          else (self.auth.admin_user, self.auth.admin_password))
        return Settings(kafka=self.bootstrap, data_dir=tmp, namespace=namespace, archive=f"chdb://{tmp}/archive",
                        kafka_security_protocol=self.auth.protocol, kafka_sasl_mechanism="SCRAM-SHA-512",
                        kafka_username=user, kafka_password=password,
                        kafka_ssl_ca_file=self.auth.tls.ca if self.auth.tls else None)

    def secrets(self) -> list[str]:
        return [self.auth.admin_password, *self.passwords.values()]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    auth = BrokerAuth.generate(tls=make_tls(tmp_path_factory.mktemp("secured-kafka-ca")))
    with LocalKafka(tmp_path_factory.mktemp("secured-kafka"), heap="256m", auth=auth) as kafka:
        passwords = {service: secrets.token_urlsafe(18) for service in SERVICES}
        auth.add_users(kafka.bootstrap, {f"faultline-{s}": p for s, p in passwords.items()})
        yield Secured(kafka, auth, passwords)
        broker_log = kafka.log_path.read_text(errors="replace")
    for secret in [auth.admin_password, *passwords.values()]:
        assert secret not in broker_log, "a password is in the broker log"


def _errors_of(conf: dict[str, Any], attempt: float = 6.0) -> list[KafkaError]:
    """The client errors a metadata request with ``conf`` runs into (it must fail)."""
    errors: list[KafkaError] = []
    settings: dict[str, Any] = {**conf, "error_cb": errors.append, "log_level": 0}
    admin = AdminClient(settings)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=attempt)
    admin.poll(1)  # error_cb runs from poll
    return errors


def test_no_credentials_or_a_wrong_password_is_refused(secured: Secured) -> None:
    _errors_of({"bootstrap.servers": secured.bootstrap})  # plaintext: the broker closes the connection
    wrong = _errors_of(secured.conf("agent", password="not-" + secured.passwords["agent"]))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in wrong), wrong
    unknown = _errors_of({"bootstrap.servers": secured.bootstrap, **secured.auth.client_config("nobody", "x")})
    assert any(e.code() == KafkaError._AUTHENTICATION for e in unknown), unknown
    # ... while the right password is let in (so the refusals above are about the credentials)
    assert AdminClient(secured.conf("agent")).list_topics(timeout=30).brokers


def test_the_listener_is_tls_and_a_client_that_does_not_trust_its_ca_is_refused(secured: Secured) -> None:
    assert secured.auth.protocol == "SASL_SSL" and secured.conf("agent")["security.protocol"] == "SASL_SSL"
    no_ca = {**secured.conf("agent"), "ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"}  # the system's CAs
    untrusted = _errors_of(no_ca)
    assert any(e.code() == KafkaError._SSL for e in untrusted), untrusted
    plain_sasl = {**secured.conf("agent"), "security.protocol": "SASL_PLAINTEXT"}
    plain_sasl.pop("ssl.ca.location")
    _errors_of(plain_sasl)  # SASL without TLS: the broker closes the connection


def test_a_replay_through_the_secured_broker_decides_as_offline_and_logs_no_secret(
        secured: Secured, tmp_path: Path, unique_name: str, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    settings = secured.settings(None, tmp_path, unique_name)
    run = replay(SCENARIO, settings)
    want = decide_offline(SCENARIO.read_bytes().splitlines())
    got = run.contract()
    assert [(i["id"], i["category"], i["state"]) for i in got["incidents"]] == \
           [(i["id"], i["category"], i["state"]) for i in want["incidents"]]
    assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]]
    assert run.events > 3000 and run.archived_rows >= run.events

    out, err = capfd.readouterr()
    worker_logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*.log"))
    assert worker_logs  # the worker's log was written (so its check below means something)
    for secret in secured.secrets():
        for where, text in (("the worker log", worker_logs), ("the captured log", caplog.text),
                            ("stdout/stderr", out + err), ("repr(settings)", repr(settings)),
                            ("str(settings)", str(settings)), ("the settings as JSON", settings.model_dump_json())):
            assert secret not in text, f"a password is in {where}"
    with capfd.disabled():
        print(f"\nsecured replay: {run.lines} lines, {run.events} events, {len(run.incidents)} incident versions, "
              f"{len(run.commands)} commands, {run.archived_rows} rows archived")


# --------------------------------------------------------------------------- least privilege


@pytest.fixture(scope="module")
def governed(secured: Secured, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A namespace with its topics (created by the admin) and the ACL plan applied."""
    namespace = f"acl-{secrets.token_hex(4)}.replay-run"  # a capture ends (end_of_capture) only in a replay namespace
    create_namespace_topics(secured.admin_conf(), namespace, partitions=1)
    admin = AdminClient(secured.admin_conf())  # the correlator's internal topics, as a first worker makes them
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in _internal(namespace).values()]).values():
        future.result(timeout=30)
    grants = acl_plan(namespace)
    report = apply_acls(secured.admin_conf(), grants)
    assert len(report) == len(grants) and all(line.startswith("created ") for line in report), report
    assert apply_acls(secured.admin_conf(), grants) == [f"all {len(grants)} bindings already in place"]
    return namespace


def _executor_results(conf: dict[str, Any], namespace: str, tmp: Path, want: int) -> list[CommandResult]:
    """Run a (dry-run webhook) executor as its own user until ``want`` results are on the topic."""
    options = ExecutorOptions(backend="webhook", url="http://127.0.0.1:9/never-called", dry_run=True,
                              state_dir=tmp / "executor", fleet_size=100)
    create_namespace_topics(conf, namespace)  # as `faultline executor run` starts: it may not, and need not
    stop = threading.Event()
    with ExecutorRunner(make_executor(options), conf, namespace) as runner:
        thread = threading.Thread(target=runner.run, args=(stop,), kwargs={"poll_s": 0.2}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + DEADLINE_S
            while True:
                results = [CommandResult.model_validate_json(v)
                           for v in read_topic(conf, topic_name(namespace, "command-results"), timeout=10)]
                if len(results) >= want or not thread.is_alive():
                    break
                assert time.monotonic() < deadline, f"{len(results)} of {want} results"
                time.sleep(0.5)
        finally:
            stop.set()
            thread.join(30)
    assert not thread.is_alive()
    return results


def _wait_for_ends(conf: dict[str, Any], namespace: str, worker: CorrelatorWorker, count: int) -> None:
    """Until the control topic holds ``count`` end-of-capture markers (the worker judged ``count`` captures)."""
    deadline = time.monotonic() + DEADLINE_S
    while len(list(read_topic(conf, topic_name(namespace, "control"), timeout=10))) < count:
        assert worker.alive() and not worker.crashed(), worker.tail()
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.5)


def test_each_service_does_its_job_as_its_own_user(secured: Secured, governed: str, tmp_path: Path) -> None:
    lines = SCENARIO.read_bytes().splitlines()
    agent = EventPublisher(secured.conf("agent"), governed)
    n, events, _bad, last = publish_capture(agent, lines)
    agent.publish([end_marker(n, last)])
    agent.flush()

    worker = CorrelatorWorker(secured.settings("correlator", tmp_path, governed), secured.bootstrap, governed,
                              log_level="info")  # the startup banner and info logs, checked for secrets below
    try:
        wait_for_end(secured.admin_conf(), governed, worker, timeout=DEADLINE_S)
    finally:
        worker.stop()
    incidents, commands = collect(secured.admin_conf(), governed)
    want = decide_offline(lines)
    assert collate(incidents, commands)["commands"] == want["commands"]

    rows = archive(secured.settings("sink", tmp_path, governed), secured.conf("sink"), governed)
    assert rows >= events + len(incidents) + len(commands)

    results = _executor_results(secured.conf("executor"), governed, tmp_path, want=len(commands))
    assert {r.command for r in results} == {c.id for c in commands}
    held = next((c for c in commands if c.requires_approval), commands[0])
    assert find_command(secured.conf("operator"), governed, held.id) == held  # operators read what they decide
    send_decision(secured.conf("operator"), governed,
                  Approval(command=held.id, decision="approve", by="alice", at=datetime.now(UTC)))

    # A worker taking the partition over (a restart) rebuilds its state from it and reads the
    # changelog, under the same grants; it decides nothing twice.
    agent.publish([end_marker(n, last)])
    agent.flush()
    takeover = CorrelatorWorker(secured.settings("correlator", tmp_path, governed), secured.bootstrap, governed)
    try:
        _wait_for_ends(secured.admin_conf(), governed, takeover, count=2)
    finally:
        takeover.stop()
    assert collect(secured.admin_conf(), governed) == (incidents, commands), takeover.tail()

    log = worker.log_text() + takeover.log_text()
    assert "Authenticated as faultline-correlator via SCRAM-SHA-512" in log and "[^Worker]: Ready" in log, log[-2000:]
    assert "authorization" not in log.lower(), log[-2000:]
    for secret in secured.secrets():
        assert secret not in log, "a password is in the worker's info log"


def _produce_error(conf: dict[str, Any], topic: str) -> KafkaError | None:
    """The delivery error of one record to ``topic`` (None: delivered)."""
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 15_000, "log_level": 0})
    producer.produce(topic, b"forged", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors, "no delivery report"
    return errors[0]


def _read_error(conf: dict[str, Any], topic: str, group: str) -> KafkaError | None:
    """The first error subscribing to ``topic`` in ``group`` (None: a record came)."""
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": 0})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                return msg.error()
        raise AssertionError(f"reading {topic}: neither a record nor an error in 30 s")
    finally:
        consumer.close()


DENIED_WRITES = [  # (service, topic suffix) that must be refused
    ("agent", "commands"), ("agent", "incidents"), ("agent", "approvals"),
    ("operator", "commands"),
    ("correlator", "approvals"), ("correlator", "command-results"),
    ("sink", "events"), ("sink", "commands"), ("sink", "deadletters"),
    ("executor", "commands"), ("executor", "events"), ("executor", "approvals"),
]


@pytest.mark.parametrize(("service", "suffix"), DENIED_WRITES)
def test_a_service_may_not_write_where_it_has_no_business(secured: Secured, governed: str, service: str,
                                                           suffix: str) -> None:
    err = _produce_error(secured.conf(service), topic_name(governed, suffix))
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_allowed_writes_go_through(secured: Secured, governed: str) -> None:
    """The control case: the same probe, where the plan allows it, is delivered."""
    assert _produce_error(secured.conf("agent"), topic_name(governed, "events")) is None
    assert _produce_error(secured.conf("operator"), topic_name(governed, "approvals")) is None


@pytest.mark.parametrize(("service", "suffix", "group", "refusal"), [
    ("executor", "events", "executor.probe", KafkaError.TOPIC_AUTHORIZATION_FAILED),  # its own group
    ("sink", "approvals", "archive", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ("agent", "events", "executor.probe", KafkaError.GROUP_AUTHORIZATION_FAILED),  # no group at all
    ("operator", "approvals", "archive", KafkaError.GROUP_AUTHORIZATION_FAILED),
])
def test_a_service_may_not_read_what_it_does_not_need(secured: Secured, governed: str, service: str, suffix: str,
                                                      group: str, refusal: int) -> None:
    err = _read_error(secured.conf(service), topic_name(governed, suffix), f"{governed}.{group}")
    assert err is not None and err.code() == refusal, err


def _internal(namespace: str) -> dict[str, str]:
    """The correlator's own topics: its state snapshots and the ``emitted`` table's changelog."""
    app = correlator_app_id(namespace)
    return {"snapshots": f"{app}-snapshots", "changelog": f"{app}-emitted-changelog"}


OTHERS = [s for s in SERVICES if s != "correlator"]


@pytest.mark.parametrize("internal", ["snapshots", "changelog"])
@pytest.mark.parametrize("service", OTHERS)
def test_no_other_service_may_write_the_correlators_internal_topics(secured: Secured, governed: str, service: str,
                                                                    internal: str) -> None:
    """A forged snapshot or changelog entry would be state the correlator trusts: only it may write them."""
    err = _produce_error(secured.conf(service), _internal(governed)[internal])
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


@pytest.mark.parametrize("internal", ["snapshots", "changelog"])
@pytest.mark.parametrize(("service", "group"), [("sink", "archive"), ("executor", "executor.probe")])
def test_no_other_service_may_read_the_correlators_internal_topics(secured: Secured, governed: str, service: str,
                                                                   group: str, internal: str) -> None:
    err = _read_error(secured.conf(service), _internal(governed)[internal], f"{governed}.{group}")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_the_correlator_may_write_its_internal_topics(secured: Secured, governed: str) -> None:
    """The control case for the two tests above."""
    for name in _internal(governed).values():
        assert _produce_error(secured.conf("correlator"), name) is None


@pytest.mark.parametrize("service", SERVICES)
def test_no_service_creates_or_deletes_namespace_topics(secured: Secured, governed: str, service: str) -> None:
    admin = AdminClient(secured.conf(service))
    created = admin.create_topics([NewTopic(topic_name(governed, "events") + "-forged", 1, 1)])
    deleted = admin.delete_topics([topic_name(governed, "commands")])
    for future in [*created.values(), *deleted.values()]:
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=30)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED



def test_a_restarted_agent_reads_back_what_it_delivered_under_its_own_grants(
        secured: Secured, governed: str, tmp_path: Path) -> None:
    """The crash-safe spool's read-back (producers/spool/readback.py) needs READ without a group: the agent has it,
    so the records it delivered are found; the executor has no READ on events, so it gives up and says why."""
    conf = secured.conf("agent")
    pub = EventPublisher(conf, governed)
    marker = end_marker(1, None)
    pub.publish([marker])
    pub.flush()
    since = int(time.time() * 1000) - 600_000
    keys: dict[str, frozenset[bytes] | None] = {topic_name(governed, "events"): None}
    found = ReadBack(conf, keys, since)
    found.start()
    assert found.done.wait(60) and "found" in found.outcome, found.outcome
    assert record_digest(topic_name(governed, "events"), event_key(DEFAULT_CELL),
                         marker.model_dump_json().encode()) in found.found
    refused = ReadBack(secured.conf("executor"), keys, since, retry_s=(0.2, 0.2))
    refused.start()
    assert refused.done.wait(60) and "gave up" in refused.outcome and "not allowed" in refused.outcome, \
        refused.outcome
    assert not refused.found
