"""The Grafana provisioning and dashboards: every panel's SQL runs on a real archive.

Static checks read ``deploy/grafana`` (data source, dashboard provider, dashboards, and the
``panel_expectations.yaml`` sidecar that says what each panel's query returns). The broker test
runs every panel and template-variable query against the archive the public scenarios were
replayed into (``replayed_archive``, from :mod:`tests.sinks.replayed`), after substituting the
ClickHouse plugin's macros the way the plugin does (``pkg/macros/macros.go`` of
grafana/clickhouse-datasource) and the dashboard variables with concrete values.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from common.settings import REPO_ROOT
from sinks.archive import Archive

if TYPE_CHECKING:
    from tests.sinks.replayed import Replayed

pytest_plugins = ["tests.sinks.replayed"]

GRAFANA = REPO_ROOT / "deploy" / "grafana"
ALL_DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
PLUGIN = "grafana-clickhouse-datasource"
DATASOURCE_REF = "${datasource}"  # every panel picks its data source with the dashboard's variable


def _plugin(path: Path) -> str:
    """The data source type a dashboard's ``datasource`` variable offers."""
    board = json.loads(path.read_text())
    [var] = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    return str(var["query"])


DASHBOARDS = [p for p in ALL_DASHBOARDS if _plugin(p) == PLUGIN]  # the archive's (SQL) dashboards
METRIC_DASHBOARDS = [p for p in ALL_DASHBOARDS if _plugin(p) == "prometheus"]
MACROS = {"fromTime", "toTime", "fromTime_ms", "toTime_ms", "timeFilter", "timeFilter_ms", "timeInterval",
          "timeInterval_ms", "interval_s"}
GLOBALS = {"__from", "__to"}  # Grafana's own time range variables, epoch milliseconds
JOB = "pt-70b"  # the xid79_multi_node scenario's job: signals, an incident, fences and a restart


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    return data


EXPECTATIONS = _load(GRAFANA / "panel_expectations.yaml")


@dataclass(frozen=True)
class Query:
    """One SQL query of a dashboard: a panel's target or a template variable."""

    dashboard: str
    name: str  # the panel title, or "$<variable>"
    sql: str
    expected: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.dashboard}:{self.name}"


def _dashboard_queries(path: Path) -> Iterator[Query]:
    board = _load(path)
    uid = board["uid"]
    expected = EXPECTATIONS.get(uid, {})
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            yield Query(uid, f"${var['name']}", var["query"], expected.get("variables", {}).get(var["name"], {}))
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield Query(uid, panel["title"], target["rawSql"], expected.get("panels", {}).get(panel["title"], {}))


QUERIES = [q for path in DASHBOARDS for q in _dashboard_queries(path)]


# --------------------------------------------------------------------------- macro substitution


def _seconds(t: datetime) -> int:
    return int(t.timestamp())


def _millis(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _expander(expand: Callable[[str], str]) -> Callable[[re.Match[str]], str]:
    return lambda match: expand(match.group(1).strip())


def render(sql: str, start: datetime, end: datetime, interval: timedelta, variables: dict[str, str]) -> str:
    """``sql`` as the ClickHouse plugin sends it for this time range, interval and variable values."""
    secs, ms = max(int(interval.total_seconds()), 1), max(int(interval.total_seconds() * 1000), 1)
    frm, to = f"toDateTime({_seconds(start)})", f"toDateTime({_seconds(end)})"
    frm_ms, to_ms = f"fromUnixTimestamp64Milli({_millis(start)})", f"fromUnixTimestamp64Milli({_millis(end)})"
    with_arg: dict[str, Callable[[str], str]] = {
        "timeFilter_ms": lambda c: f"{c} >= {frm_ms} AND {c} <= {to_ms}",
        "timeFilter": lambda c: f"{c} >= {frm} AND {c} <= {to}",
        "timeInterval_ms": lambda c: f"toStartOfInterval(toDateTime64({c}, 3), INTERVAL {ms} millisecond)",
        "timeInterval": lambda c: f"toStartOfInterval(toDateTime({c}), INTERVAL {secs} second)",
    }
    for name, expand in with_arg.items():
        sql = re.sub(rf"\$__{name}\(([^)]*)\)", _expander(expand), sql)
    plain = {"fromTime_ms": frm_ms, "toTime_ms": to_ms, "fromTime": frm, "toTime": to, "interval_s": str(secs)}
    for name, value in plain.items():
        sql = re.sub(rf"\$__{name}\b", value, sql)
    sql = sql.replace("${__from}", str(_millis(start))).replace("${__to}", str(_millis(end)))  # Grafana's globals
    for name, value in variables.items():
        quoted = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"  # Grafana's sqlstring format
        sql = sql.replace(f"${{{name}:sqlstring}}", quoted)
        sql = sql.replace(f"${{{name}}}", value)
        sql = re.sub(rf"\${name}\b", value, sql)
    return sql


def test_render_matches_the_plugin() -> None:
    start, end = datetime.fromtimestamp(1_700_000_000), datetime.fromtimestamp(1_700_003_600.5)
    sql = render("SELECT $__timeInterval(ts) t FROM x WHERE $__timeFilter(ts) AND j = '${job}' AND k = $job "
                 "AND a > $__fromTime_ms AND b < $__toTime AND $__interval_s > 0 AND ${__from} < ${__to}",
                 start, end, timedelta(seconds=20), {"job": "j1"})
    assert sql == ("SELECT toStartOfInterval(toDateTime(ts), INTERVAL 20 second) t FROM x WHERE "
                   "ts >= toDateTime(1700000000) AND ts <= toDateTime(1700003600) AND j = 'j1' AND k = j1 "
                   "AND a > fromUnixTimestamp64Milli(1700000000000) AND b < toDateTime(1700003600) AND 20 > 0 "
                   "AND 1700000000000 < 1700003600500")
    assert render("j = ${job:sqlstring}", start, end, timedelta(seconds=1), {"job": "o'brien"}) == "j = 'o\\'brien'"


# --------------------------------------------------------------------------- provisioning, statically


def test_datasource_points_the_clickhouse_plugin_at_a_server_from_the_environment() -> None:
    [ds] = _load(GRAFANA / "provisioning" / "datasources" / "clickhouse.yaml")["datasources"]
    assert ds["type"] == PLUGIN
    data, secure = ds["jsonData"], ds["secureJsonData"]
    assert data["protocol"] in ("http", "native") and isinstance(data["port"], int)
    for value in (data["host"], data["username"]):
        assert re.fullmatch(r"\$\{[A-Z_]+\}", value), value  # substituted by Grafana from its environment
    # The password from a file (a Docker or Kubernetes secret), never the environment (issue 27).
    assert re.fullmatch(r"\$__file\{/run/secrets/[a-z_]+\}", secure["password"]), secure["password"]
    assert "password" not in data  # secrets only in secureJsonData


def test_dashboard_provider_loads_files() -> None:
    [provider] = _load(GRAFANA / "provisioning" / "dashboards" / "dashboards.yaml")["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


def test_dashboards_are_well_formed() -> None:
    boards = [_load(p) for p in DASHBOARDS]
    assert len(boards) >= 3 and len({b["uid"] for b in _boards()}) == len(ALL_DASHBOARDS)
    for board in boards:
        panels = board["panels"]
        assert len({p["id"] for p in panels}) == len(panels) and len({p["title"] for p in panels}) == len(panels)
        for panel in panels:
            assert panel["datasource"] == {"type": PLUGIN, "uid": DATASOURCE_REF}, panel["title"]
            [target] = panel["targets"]
            assert target["datasource"]["uid"] == DATASOURCE_REF and target["editorType"] == "sql"
            timeseries = panel["type"] == "timeseries"
            assert (target["format"], target["queryType"]) == ((0, "timeseries") if timeseries else (1, "table"))


def _boards() -> list[dict[str, Any]]:
    return [_load(p) for p in ALL_DASHBOARDS]


def test_dashboards_import_anywhere() -> None:
    """No data source uid is written into a dashboard: a ``datasource`` variable of the right plugin picks
    one wherever the dashboard is imported, and ``__requires`` says what it needs."""
    for board in _boards():
        [var] = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
        assert var["name"] == "datasource" and var["current"] == {}, board["uid"]
        assert any(r["type"] == "datasource" and r["id"] == var["query"] for r in board["__requires"]), board["uid"]
        text = json.dumps(board)
        assert "faultline-clickhouse" not in text and "faultline-prometheus" not in text, board["uid"]
        refs = re.findall(r'"uid": "([^"]*)"', json.dumps([board["panels"], board["templating"]["list"]]))
        assert refs and set(refs) == {DATASOURCE_REF}, board["uid"]


def test_sql_interpolates_variables_as_quoted_strings() -> None:
    """``${job:sqlstring}`` (Grafana quotes and escapes it), never ``'${job}'`` pasted between quotes."""
    for q in QUERIES:
        assert not re.search(r"'\$\{?[A-Za-z]\w*\}?'", q.sql), q.id
        for var in re.findall(r"\$\{([A-Za-z]\w*)(:\w+)?\}", q.sql):
            assert var[1] == ":sqlstring", f"{q.id}: ${{{var[0]}{var[1]}}}"


def test_every_query_has_expectations_and_every_expectation_a_query() -> None:
    declared = {f"{uid}:{name}" for uid, e in EXPECTATIONS.items() for name in e.get("panels", {})}
    declared |= {f"{uid}:${name}" for uid, e in EXPECTATIONS.items() for name in e.get("variables", {})}
    assert {q.id for q in QUERIES} == declared
    assert all(q.expected["columns"] and isinstance(q.expected["rows"], bool) for q in QUERIES)


def test_queries_use_only_known_macros_and_declared_variables() -> None:
    for path in DASHBOARDS:
        board = _load(path)
        names = {v["name"] for v in board.get("templating", {}).get("list", [])}
        for q in (q for q in QUERIES if q.dashboard == board["uid"]):
            assert set(re.findall(r"\$__(\w+)", q.sql)) <= MACROS, q.id
            assert set(re.findall(r"\$\{(__\w+)\}", q.sql)) <= GLOBALS, q.id
            assert set(re.findall(r"\$\{?([A-Za-z]\w*)", q.sql)) <= names, q.id  # $__macros start with "_"


# --------------------------------------------------------------------------- the pipeline-health dashboard

PROMTOOL = shutil.which("promtool")


def _metric_exprs() -> list[tuple[str, str]]:
    return [(f"{_load(p)['uid']}:{panel['title']}", target["expr"])
            for p in METRIC_DASHBOARDS for panel in _load(p)["panels"] for target in panel["targets"]]


def _exported_sample_names() -> set[str]:
    """Every sample name the services expose: whatever their metric modules register."""
    from prometheus_client import REGISTRY

    import common.metrics  # noqa: F401
    import producers.exported_metrics  # noqa: F401
    import producers.metrics  # noqa: F401
    import sinks.archive_sink  # noqa: F401
    import sinks.executors.runner  # noqa: F401

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {family.name + s for family in REGISTRY.collect() for s in suffixes.get(family.type, ("",))} | {"up"}


def test_there_is_a_pipeline_health_dashboard_over_the_services_metrics() -> None:
    exprs = _metric_exprs()
    assert [_load(p)["uid"] for p in METRIC_DASHBOARDS] == ["faultline-pipeline-health"]
    used = {name for _, e in exprs for name in re.findall(r"\b(faultline_\w+|up)\b(?=[{\[\s)]|$)", e)}
    assert used and used <= _exported_sample_names(), sorted(used - _exported_sample_names())
    for needed in ("faultline_consumer_lag_records", "faultline_dead_letters_total", "faultline_producer_dropped_total",
                   "faultline_producer_spool_backlog_bytes", "faultline_detection_to_command_seconds_bucket"):
        assert needed in used, needed
    for panel in (panel for p in METRIC_DASHBOARDS for panel in _load(p)["panels"]):
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_REF}, panel["title"]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package `prometheus`)")
def test_pipeline_health_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel's query (as a recording rule, Grafana's $__rate_interval as 5m)."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{n}", "expr": e.replace("$__rate_interval", "5m")}
        for n, (_, e) in enumerate(_metric_exprs())]}]}
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run([PROMTOOL or "", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- every query, on the replayed archive


@dataclass(frozen=True)
class Outcome:
    columns: tuple[str, ...]
    rows: int
    error: str | None = None


@pytest.fixture(scope="module")
def outcomes(replayed_archive: Replayed) -> dict[str, Outcome]:
    """Every dashboard query run on the replayed archive, over the time range its events span."""
    results: dict[str, Outcome] = {}
    with Archive.open(replayed_archive.url) as archive:
        [span] = archive.query("SELECT min(ts) AS first, max(ts) AS last FROM events")
        start, end = span["first"] - timedelta(hours=1), span["last"] + timedelta(hours=1)
        interval = max((end - start) / 200, timedelta(seconds=1))
        for q in QUERIES:
            sql = render(q.sql, start, end, interval, {"job": JOB})
            assert "$" not in sql, f"{q.id}: unsubstituted macro or variable in {sql}"
            try:
                columns = tuple(row["name"] for row in archive.query(f"DESCRIBE ({sql})"))
                rows = len(archive.query(sql))
            except Exception as exc:  # reported per query by the test below
                results[q.id] = Outcome((), 0, f"{type(exc).__name__}: {exc}")
                continue
            results[q.id] = Outcome(columns, rows)
    return results


@pytest.mark.broker
@pytest.mark.parametrize("query", QUERIES, ids=[q.id for q in QUERIES])
def test_query_runs_and_returns_what_its_panel_expects(query: Query, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[query.id]
    assert outcome.error is None, outcome.error
    assert list(outcome.columns) == query.expected["columns"]
    if query.expected["rows"]:
        assert outcome.rows > 0, "no rows where the replayed scenarios should give some"


@pytest.mark.broker
def test_the_job_variable_offers_the_replayed_jobs(replayed_archive: Replayed) -> None:
    [job_var] = [q for q in QUERIES if q.name == "$job"]
    with Archive.open(replayed_archive.url) as archive:
        jobs = [r["job"] for r in archive.query(job_var.sql)]
    assert {JOB, "ft-7b", "pt-34b", "sft-13b", "ft-3b"} <= set(jobs)
