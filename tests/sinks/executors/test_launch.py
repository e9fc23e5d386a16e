"""Issue 15, finding 7: the webhook's token is never on a command line; it comes from secrets."""

from __future__ import annotations

import pytest

from common.settings import Settings
from sinks.executors.launch import ExecutorOptions, make_backend, trust_from, webhook_url
from sinks.executors.webhook import WebhookBackend


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
