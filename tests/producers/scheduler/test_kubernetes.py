"""The kubernetes source through the real client, against recorded API responses on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from producers.capture import parse_capture_line
from producers.registry import SourceContext
from producers.scheduler.kubernetes import KubernetesSettings, KubernetesSource, api_client, create
from producers.scheduler.kubernetes_pods import PodRules
from tests.producers.scheduler.k8s_api_server import FakeApiServer, fake_api_server

NOW = datetime(2026, 4, 22, 3, 30, tzinfo=UTC)
UUIDS = ["GPU-1a93c00c-983f-97a3-67ee-1c6b937fb67c", "GPU-2e56bd2c-b465-7d30-52c2-427c93f21e22",
         "GPU-9cdf59c7-82c4-b24b-d34f-8fe1ef803563", "GPU-066fb740-5741-8e44-6c0e-0caf98bde99e"]


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        yield server


def source_for(api: FakeApiServer, **kwargs: object) -> KubernetesSource:
    client = api_client(KubernetesSettings(host=api.url))
    rules = PodRules(gpu_uuids={"gpu-01": UUIDS})
    return KubernetesSource(client, rules, page_size=2, **kwargs)  # type: ignore[arg-type]


def events(obs: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(o["event"], o.get("job") or o.get("node")) for o in obs]


def test_a_job_runs_fails_restarts_and_is_deleted(api: FakeApiServer) -> None:
    source = source_for(api, nodes=False)
    api.scene(pods="pods_1_running.json")
    [started] = source.poll(NOW)
    assert started == {
        "ts": "2026-04-22T03:00:12.000+00:00", "source": "scheduler", "event": "job_started", "job": "llama-ft",
        "allocation": [{"node": "gpu-01", "gpus": [0, 1, 2, 3], "ranks": [0, 1, 2, 3], "gpu_uuids": UUIDS},
                       {"node": "gpu-02", "gpus": [4, 5, 6, 7], "ranks": [4, 5, 6, 7]}],
        "world_size": 8, "elastic": {"min_gpus": 8, "max_gpus": 8}, "owner": "ml-team", "max_restarts": 3,
    }  # the CPU pod is not a job; eval-7 is still pending
    assert parse_capture_line(json.dumps(started))[0].body.kind == "job_started"
    assert source.poll(NOW) == []

    api.scene(pods="pods_2_failed.json")
    obs = source.poll(NOW)
    assert events(obs) == [("job_failed", "llama-ft"), ("job_started", "eval-7")]
    assert obs[0]["ts"] == "2026-04-22T03:04:20.000+00:00"
    assert obs[1]["allocation"] == [{"node": "gpu-02", "gpus": [3], "ranks": [0]}]
    assert obs[1]["owner"] == "training"  # no owner label: the namespace

    api.scene(pods="pods_3_restarted.json")  # worker-0 restarted in place, worker-1 recreated elsewhere
    obs = source.poll(NOW)
    assert events(obs) == [("job_started", "llama-ft"), ("job_finished", "eval-7")]
    assert [a["node"] for a in obs[0]["allocation"]] == ["gpu-01", "gpu-03"]

    api.scene(pods="pods_4_deleting.json")
    assert events(source.poll(NOW)) == [("job_cancelled", "llama-ft")]
    api.scene(pods="pods_5_gone.json")
    assert source.poll(NOW) == []  # eval-7 ended already, llama-ft too
    assert all("/api/v1/pods?" in r and "limit=2" in r for r in api.requests)
    assert any("continue=2" in r for r in api.requests)  # four pods: two pages
    source.close()


def test_pods_deleted_while_running_are_a_cancelled_job(api: FakeApiServer) -> None:
    source = source_for(api, nodes=False)
    api.scene(pods="pods_1_running.json")
    source.poll(NOW)
    api.scene(pods="pods_5_gone.json")
    assert source.poll(NOW) == [{"ts": "2026-04-22T03:30:00.000+00:00", "source": "scheduler",
                                 "event": "job_cancelled", "job": "llama-ft"}]


def test_node_readiness_from_the_ready_condition(api: FakeApiServer) -> None:
    source = source_for(api, jobs=False)
    api.scene(nodes="nodes_1_ready.json")
    assert source.poll(NOW) == [{"ts": "2026-04-22T03:30:00.000+00:00", "source": "scheduler",
                                 "event": "node_not_ready", "node": "gpu-03",
                                 "reason": "NodeStatusUnknown: Kubelet stopped posting node status."}]
    api.scene(nodes="nodes_2_not_ready.json")
    obs = source.poll(NOW)
    assert events(obs) == [("node_not_ready", "gpu-02"), ("node_ready", "gpu-03")]
    assert all(parse_capture_line(json.dumps(o))[0].body.kind == "node_state" for o in obs)
    assert source.poll(NOW) == []


def test_a_namespace_and_a_label_selector_narrow_the_listing(api: FakeApiServer) -> None:
    client = api_client(KubernetesSettings(host=api.url))
    source = KubernetesSource(client, namespace="training", label_selector="faultline.io/job=llama-ft", nodes=False)
    api.scene(pods="pods_2_failed.json")
    assert events(source.poll(NOW)) == []  # first seen already failed: not news
    path, _, query = api.requests[-1].partition("?")
    assert path == "/api/v1/namespaces/training/pods"
    assert parse_qs(query)["labelSelector"] == ["faultline.io/job=llama-ft"]


def test_create_from_the_config_section(api: FakeApiServer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    source = create(SourceContext(node="agent-1", state_dir=tmp_path),
                    {"host": api.url, "token_file": str(token), "interval_s": 30, "gpu_uuids": {"gpu-01": UUIDS}})
    assert (source.name, source.interval_s) == ("kubernetes", 30)
    api.scene(pods="pods_1_running.json", nodes="nodes_1_ready.json")
    assert events(source.poll(NOW)) == [("job_started", "llama-ft"), ("node_not_ready", "gpu-03")]
    source.close()
