"""Building an executor from options.

Issue 15, finding 7: the webhook's token is never on a command line; it comes from secrets.
Issue 27, item 6: two executors of one name and state directory, in two namespaces or clusters,
share no ledger entry and no breaker state.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from common.settings import Settings
from sinks.executors.core import Executor
from sinks.executors.launch import ExecutorOptions, make_backend, make_executor, trust_from, webhook_url
from sinks.executors.ledger import LedgerScopeError, ResultLedger
from sinks.executors.trust import Trust
from sinks.executors.webhook import WebhookBackend
from streams.decisions import Command
from streams.signing import SigningKeys, sign

from .commands import at, command
from .test_core import FakeBackend

KEYS = SigningKeys.parse("c1:correlator-secret-0123")


@pytest.mark.parametrize("url", ["https://tickets.example/hook?token=s3cret", "https://bot:s3cret@tickets.example/h"])
def test_a_url_with_credentials_is_refused_on_the_command_line(url: str) -> None:
    with pytest.raises(ValueError, match="FAULTLINE_WEBHOOK_URL") as refused:
        webhook_url(Settings(), url)
    assert "s3cret" not in str(refused.value)


def test_the_url_and_token_come_from_settings(tmp_path: object) -> None:
    settings = Settings(webhook_url="https://tickets.example/hook?token=s3cret", webhook_token="bearer-s3cret")
    assert webhook_url(settings, None) == "https://tickets.example/hook?token=s3cret"
    assert webhook_url(Settings(), "https://tickets.example/hook") == "https://tickets.example/hook"
    backend = make_backend(ExecutorOptions(backend="webhook", state_dir=tmp_path, url=webhook_url(settings, None),  # type: ignore[arg-type]
                                           webhook_token="bearer-s3cret"))
    assert isinstance(backend, WebhookBackend)
    assert backend.headers == {"Authorization": "Bearer bearer-s3cret"}
    assert "s3cret" not in backend.where and "s3cret" not in repr(settings)


def test_the_executors_trust_comes_from_settings() -> None:
    settings = Settings(signing_keys="c1:correlator-secret-0123", operator_keys="alice:alice-secret-0123456",
                        executor_keys="e1:executor-secret-01234", namespace="ns-a", cluster="east", dev_mode=False)
    trust = trust_from(settings)
    assert (trust.namespace, trust.cluster) == ("ns-a", "east")
    assert trust.operators is not None and trust.operators.ids == ["alice"]
    assert "secret" not in repr(trust)


def _scoped(state_dir: Path, namespace: str, cluster: str = "east", *, fleet: int = 10) -> tuple[Executor, FakeBackend]:
    """The executor ``faultline executor run --name tickets`` makes in ``namespace``, over ``state_dir``."""
    backend = FakeBackend()
    options = ExecutorOptions(backend="webhook", state_dir=state_dir, name="tickets", fleet_size=fleet,
                              window=timedelta(minutes=10),
                              trust=Trust(commands=KEYS, namespace=namespace, cluster=cluster))
    return make_executor(options, backend), backend


def _for(cid: str, namespace: str, cluster: str = "east", node: str = "gpu-node-07") -> Command:
    return sign(command(cid, node=node), KEYS, at(0), timedelta(hours=1), namespace=namespace, cluster=cluster)


def test_a_command_settled_in_one_namespace_is_no_duplicate_in_another(tmp_path: Path) -> None:
    """Same executor name, same state directory: an id settled for ``prod`` runs for ``staging`` (and for
    another cluster of ``prod``), and is a duplicate only where it was settled."""
    prod, prod_backend = _scoped(tmp_path, "prod")
    assert prod.handle(_for("c1", "prod"), at(1)).status == "done"
    staging, staging_backend = _scoped(tmp_path, "staging")
    west, west_backend = _scoped(tmp_path, "prod", "west")
    assert staging.handle(_for("c1", "staging"), at(2)).status == "done"
    assert west.handle(_for("c1", "prod", "west"), at(2)).status == "done"
    assert prod.handle(_for("c1", "prod"), at(3)).status == "skipped_duplicate"
    assert (prod_backend.executed, staging_backend.executed, west_backend.executed) == (["c1"], ["c1"], ["c1"])
    assert len(list(tmp_path.glob("tickets@*.ledger.sqlite"))) == 3


def test_the_breaker_counts_only_its_own_namespaces_fences(tmp_path: Path) -> None:
    """A fleet of 10 at 10%: one node per window. ``prod`` fenced one; a ``staging`` executor started
    after it (its breaker refilled from its ledger) may still fence one; a second ``prod`` one may not."""
    prod, _ = _scoped(tmp_path, "prod")
    assert prod.handle(_for("c1", "prod", node="gpu-node-01"), at(1)).status == "done"
    staging, _ = _scoped(tmp_path, "staging")
    staging.recover(at(2))
    assert staging.handle(_for("c2", "staging", node="gpu-node-02"), at(3)).status == "done"
    again, _ = _scoped(tmp_path, "prod")
    again.recover(at(4))
    refused = again.handle(_for("c3", "prod", node="gpu-node-03"), at(5))
    assert refused.status == "failed" and "circuit breaker open" in refused.detail


def test_a_ledger_file_refuses_another_scope(tmp_path: Path) -> None:
    path = tmp_path / "tickets.ledger.sqlite"
    ResultLedger(path, ("prod", "east")).close()
    ResultLedger(path, ("prod", "east")).close()
    with pytest.raises(LedgerScopeError, match="namespace 'prod', cluster 'east'"):
        ResultLedger(path, ("staging", "east"))


def test_a_runner_refuses_an_executor_of_another_namespace(tmp_path: Path) -> None:
    from sinks.executors.runner import ExecutorRunner

    prod, _ = _scoped(tmp_path, "prod")
    with pytest.raises(ValueError, match="acts in namespace 'prod', not 'staging'"):
        ExecutorRunner(prod, {"bootstrap.servers": "127.0.0.1:9"}, "staging")
