"""The ACL plan (deploy/acls.py) offline: least privilege as properties of the table.

The broker-side proof (each service works under its grants and is refused the rest) is
tests/deploy/test_secured_kafka.py.
"""

from __future__ import annotations

import pytest

from deploy.acls import DEFAULT_USERS, SERVICES, acl_plan, correlator_app_id, render_plan
from faultline.cli import main
from streams.topics import TOPICS, topic_name

NS = "cell-a"


def _can(service: str, operation: str, suffix: str) -> bool:
    return any(g.service == service and g.operation == operation and g.resource == "topic"
               and g.name == topic_name(NS, suffix) for g in acl_plan(NS))


def test_only_the_correlator_writes_commands_and_incidents() -> None:
    for suffix in ("commands", "incidents", "control"):
        assert [s for s in SERVICES if _can(s, "WRITE", suffix)] == ["correlator"], suffix


def test_only_people_approve_and_only_executors_report_results() -> None:
    assert [s for s in SERVICES if _can(s, "WRITE", "approvals")] == ["operator"]
    assert [s for s in SERVICES if _can(s, "WRITE", "command-results")] == ["executor"]
    assert sorted(s for s in SERVICES if _can(s, "WRITE", "events")) == ["agent", "operator"]


def test_only_the_correlator_touches_its_state_snapshots() -> None:
    """A snapshot is data (it cannot run code), but a forged one could install a state the log never made:
    without FAULTLINE_SNAPSHOT_KEY, this grant is the trust boundary."""
    name = f"{correlator_app_id(NS)}-snapshots"
    grants = [g for g in acl_plan(NS) if g.resource == "topic" and g.name == name]
    assert {g.service for g in grants} == {"correlator"}
    assert sorted(g.operation for g in grants) == ["ALTER", "CREATE", "READ", "WRITE"]
    assert all(g.pattern == "literal" for g in grants)


def test_operators_read_the_commands_they_decide_on_and_write_no_command() -> None:
    """An approval names the exact content of the command it releases (issue 15): the operator reads it first."""
    assert _can("operator", "READ", "commands") and not _can("operator", "WRITE", "commands")
    assert not _can("operator", "READ", "approvals")


def test_the_sink_only_reads_but_for_its_own_heartbeat() -> None:
    """Its one write is the heartbeat every stage publishes (streams/health.py): nothing it archives."""
    writes = {g.name for g in acl_plan(NS) if g.service == "sink" and g.operation != "READ"}
    assert writes == {f"{NS}.heartbeats"} and _can("sink", "READ", "heartbeats")


def test_no_one_creates_or_alters_namespace_topics_or_touches_the_cluster() -> None:
    app = correlator_app_id(NS)
    for g in acl_plan(NS):
        assert g.operation in ("READ", "WRITE", "CREATE", "ALTER"), g
        if g.operation in ("CREATE", "ALTER"):
            assert (g.service, g.resource) == ("correlator", "topic") and g.name.startswith(f"{app}-"), g
        if g.pattern == "prefixed":  # one group per executor name, and only there
            assert (g.service, g.resource, g.name) == ("executor", "group", f"{NS}.executor."), g


def test_every_grant_names_a_declared_topic_of_this_namespace_or_the_correlators_own() -> None:
    declared = {topic_name(NS, s) for s in TOPICS}
    app = correlator_app_id(NS)
    for g in acl_plan(NS):
        if g.resource == "topic":
            assert g.name in declared or g.name.startswith(f"{app}-"), g
        assert g.why


def test_users_default_per_service_and_can_be_renamed() -> None:
    assert {g.user for g in acl_plan(NS)} == set(DEFAULT_USERS.values())
    renamed = acl_plan(NS, {"sink": "archive-writer"})
    assert {g.user for g in renamed if g.service == "sink"} == {"archive-writer"}
    with pytest.raises(ValueError, match="unknown services"):
        acl_plan(NS, {"scheduler": "x"})


def test_plan_is_printed_with_every_principal(capsys: pytest.CaptureFixture[str]) -> None:
    text = render_plan(acl_plan(NS))
    for user in DEFAULT_USERS.values():
        assert f"User:{user}" in text
    assert f"{NS}.executor.*" in text
    assert main(["acls", "plan", "--user", "agent=node-agent"]) == 0
    assert "User:node-agent" in capsys.readouterr().out
