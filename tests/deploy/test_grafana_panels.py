"""The Grafana provisioning and dashboards: every panel's SQL runs on a real archive.

Static checks read ``deploy/grafana`` (data source, dashboard provider, dashboards, and the
``panel_expectations.yaml`` sidecar that says what each panel's query returns). The broker test
runs every panel and template-variable query against the archive the public scenarios were
replayed into (``replayed_archive``, from :mod:`tests.sinks.replayed`), after substituting the
ClickHouse plugin's macros the way the plugin does (``pkg/macros/macros.go`` of
grafana/clickhouse-datasource) and the dashboard variables with concrete values.

Namespaces: the archive keeps each namespace's rows in a database of its own
(:mod:`sinks.archive.namespaces`), so a dashboard's ``namespace`` variable holds a database and
every archive object a query reads is qualified with it (`` `${namespace}`.incident_facts ``).
The operators' questions are parameterized views (``report_*``), and ClickHouse cannot call one
qualified with a database whose name holds a dot: those panels call the ``ns_report_*`` copies
in the data source's own database with the namespace's database as ``db``
(:func:`sinks.archive.migrations.namespace_reports`).
The broker tests replay one more scenario, its job renamed, into a second namespace and run
every query for each namespace: a panel shows what its namespace's own database gives, and no
row of the other's.
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

from common.settings import REPO_ROOT, Settings
from sinks.archive import Archive
from tests.harness.shared import scenario

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
NAMESPACE = "namespace"  # the variable that picks a namespace: its value is the namespace's database
QUALIFIED = "`${namespace}`."  # how a query names the database of an archive object it reads
# The operators' questions read parameterized views, and ClickHouse cannot call one qualified with
# a database whose name holds a dot (`faultline.replay-x`.report_recovery(...) is "Unknown table
# function"): a panel calls the copy in the data source's own database that reads the database
# its db parameter names, ns_report_recovery(db = ${namespace:sqlstring}, since_ms = ..., ...).
REPORT_CALL = re.compile(r"\bns_(report_\w+)\(db = \$\{namespace:sqlstring\}, ")


def _in_own_database(sql: str) -> str:
    """``sql`` as run in the namespace's own database: nothing qualified, the report views themselves."""
    return REPORT_CALL.sub(r"\1(", sql.replace(QUALIFIED, ""))


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
    """``${job:sqlstring}`` (Grafana quotes and escapes it), never ``'${job}'`` pasted between quotes.

    The one identifier is the namespace's database, `` `${namespace}`.table ``: Grafana has no
    identifier format, and the variable's values are the namespace registry's databases (names
    of letters, digits, ``.``, ``_`` and ``-``: :func:`sinks.archive.namespaces.check_namespace`)."""
    for q in QUERIES:
        sql = _in_own_database(q.sql)
        assert not re.search(r"'\$\{?[A-Za-z]\w*\}?'", sql), q.id
        for var in re.findall(r"\$\{([A-Za-z]\w*)(:\w+)?\}", sql):
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


def _namespace_var(board: dict[str, Any]) -> dict[str, Any] | None:
    return next((v for v in board["templating"]["list"] if v["name"] == NAMESPACE), None)


def test_archive_dashboards_pick_a_namespace() -> None:
    """Every archive dashboard has a ``namespace`` variable: one namespace at a time (each is a
    database of its own: no query spans two), from the archive's registry, the live one first so
    that it is what a dashboard opens on; the same variable on each."""
    variables = []
    for path in DASHBOARDS:
        board = _load(path)
        var = _namespace_var(board)
        assert var is not None, f"{board['uid']}: no namespace variable"
        assert var["type"] == "query" and var["datasource"] == {"type": PLUGIN, "uid": DATASOURCE_REF}
        assert (var["includeAll"], var["multi"], var["allowCustomValue"]) == (False, False, False), board["uid"]
        assert var["query"] == var["definition"] and "FROM namespaces FINAL" in var["query"], board["uid"]
        names = [v["name"] for v in board["templating"]["list"]]
        assert names.index(NAMESPACE) == names.index("datasource") + 1, board["uid"]  # before what depends on it
        variables.append(var)
    assert all(var == variables[0] for var in variables)


def test_every_archive_query_reads_the_chosen_namespace() -> None:
    """Each table or view a query reads (after FROM or JOIN) is qualified with the namespace's
    database, or is a report view's ``ns_`` copy given that database as ``db``; unqualified, it would
    read the data source's own database whatever was chosen."""
    for q in QUERIES:
        if q.name == f"${NAMESPACE}":
            continue
        read = re.findall(r"\b(?:FROM|JOIN)\s+(?!\()(\S+)", REPORT_CALL.sub(QUALIFIED + r"\1(", q.sql))
        assert read, q.id
        for name in read:
            assert name.startswith(QUALIFIED) and name != QUALIFIED, f"{q.id}: {name} is not in the chosen namespace"


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


SECOND = "t-grafana.second"  # the second namespace: a dot in its name, as replays, demos and cells have
SECOND_JOB = f"{JOB}-b"  # its one job: the xid79_multi_node scenario replayed again, the job renamed
ALL_JOBS = "(all jobs)"  # report_checkpoint_loss's row over every job


@dataclass(frozen=True)
class Namespace:
    """One namespace of the replayed archive and the job its timeline dashboard is looked at for."""

    name: str
    database: str
    job: str


@dataclass(frozen=True)
class Outcome:
    columns: tuple[str, ...]
    rows: int
    error: str | None = None
    result: tuple[str, ...] = ()  # the rows, each as repr (sorted: ties may come in any order)
    jobs: frozenset[str] = frozenset()  # the values of a `job` column, if the query returns one


# (namespace, query id): the query as Grafana runs it, and in the namespace's database alone
Outcomes = dict[tuple[str, str], tuple[Outcome, Outcome | None]]


def _run(archive: Archive, sql: str) -> Outcome:
    try:
        columns = tuple(row["name"] for row in archive.query(f"DESCRIBE ({sql})"))
        rows = archive.query(sql)
    except Exception as exc:  # reported per query by the tests below
        return Outcome((), 0, f"{type(exc).__name__}: {exc}")
    jobs = frozenset(str(r["job"]) for r in rows if r.get("job") is not None)
    return Outcome(columns, len(rows), result=tuple(sorted(repr(tuple(r.values())) for r in rows)), jobs=jobs)


@pytest.fixture(scope="module")
def namespaces(replayed_archive: Replayed, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Namespace, Namespace]:
    """The replayed namespace (the live one: the archive's own database) and a second one, into which
    the xid79_multi_node scenario is replayed again with its job renamed (no row of it is the first's)."""
    from faultline.pipeline import replay

    with Archive.open(replayed_archive.url) as archive:
        live = Namespace(archive.namespace, archive.database, JOB)
    work = tmp_path_factory.mktemp("second-namespace")
    capture = work / "xid79_renamed.jsonl"
    capture.write_text(scenario("xid79_multi_node").read_text().replace(f'"{JOB}"', f'"{SECOND_JOB}"'))
    settings = Settings(kafka=kafka_bootstrap, data_dir=work, namespace=live.name, archive=replayed_archive.url)
    replay(capture, settings, archive_namespace=SECOND)
    with Archive.open(replayed_archive.url, SECOND, live=live.name, create=False) as archive:
        second = Namespace(SECOND, archive.database, SECOND_JOB)
    assert second.database != live.database
    return live, second


@pytest.fixture(scope="module")
def outcomes(replayed_archive: Replayed, namespaces: tuple[Namespace, Namespace]
             ) -> Outcomes:
    """Every dashboard query run for each namespace over the time range the events span, as Grafana
    sends it (through the data source's own database, the namespace's database in the variable),
    next to the same query run in the namespace's own database with no qualification: what the
    namespace alone holds (None for the namespace variable, which reads the registry)."""
    results: Outcomes = {}
    with Archive.open(replayed_archive.url) as archive:
        [span] = archive.query("SELECT min(ts) AS first, max(ts) AS last FROM events")
        start, end = span["first"] - timedelta(hours=1), span["last"] + timedelta(hours=1)
        interval = max((end - start) / 200, timedelta(seconds=1))
        for ns in namespaces:
            with Archive.open(replayed_archive.url, ns.name, live=namespaces[0].name, create=False) as own:
                for q in QUERIES:
                    sql = render(q.sql, start, end, interval, {"job": ns.job, NAMESPACE: ns.database})
                    assert "$" not in sql, f"{q.id}: unsubstituted macro or variable in {sql}"
                    alone = None
                    if q.name != f"${NAMESPACE}":
                        alone = _run(own, render(_in_own_database(q.sql), start, end, interval, {"job": ns.job}))
                    results[(ns.name, q.id)] = (_run(archive, sql), alone)
    return results


@pytest.mark.broker
@pytest.mark.parametrize("query", QUERIES, ids=[q.id for q in QUERIES])
def test_query_runs_and_returns_what_its_panel_expects(query: Query, outcomes: Outcomes,
                                                       namespaces: tuple[Namespace, Namespace]) -> None:
    for ns in namespaces:
        outcome, _ = outcomes[(ns.name, query.id)]
        assert outcome.error is None, f"{ns.name}: {outcome.error}"
        assert list(outcome.columns) == query.expected["columns"], ns.name
    live, _ = outcomes[(namespaces[0].name, query.id)]
    if query.expected["rows"]:
        assert live.rows > 0, "no rows where the replayed scenarios should give some"


@pytest.mark.broker
@pytest.mark.parametrize("query", QUERIES, ids=[q.id for q in QUERIES])
def test_a_namespace_shows_its_own_rows_and_no_others(query: Query, namespaces: tuple[Namespace, Namespace],
                                                      outcomes: Outcomes) -> None:
    """With one namespace chosen, a panel shows exactly what that namespace's database gives, and
    none of the other's jobs; the second namespace (one scenario) fills the panels that expect rows."""
    for ns, other in (namespaces, namespaces[::-1]):
        shown, alone = outcomes[(ns.name, query.id)]
        if alone is None:  # the namespace variable itself: it lists them all (see below)
            continue
        assert shown.error is None and alone.error is None, shown.error or alone.error
        assert other.job not in shown.jobs, f"{ns.name}: rows of {other.name}'s job {other.job}"
        assert shown.result == alone.result, f"{ns.name}: not what its own database holds"
    second, _ = outcomes[(namespaces[1].name, query.id)]
    assert second.jobs - {ALL_JOBS} <= {SECOND_JOB}, second.jobs
    if query.expected["rows"] and query.dashboard in ("faultline-incident-timeline", "faultline-questions"):
        assert second.rows > 0, "no rows of the second namespace's job"


@pytest.mark.broker
def test_the_namespace_variable_offers_every_namespace_live_first(replayed_archive: Replayed,
                                                                  namespaces: tuple[Namespace, Namespace]) -> None:
    """Its first column is the value (the database the panels read), its second the text shown
    (the namespace), as the ClickHouse plugin's variable queries take them."""
    var_sqls = {q.sql for q in QUERIES if q.name == f"${NAMESPACE}"}
    assert len(var_sqls) == 1  # the same query on every dashboard that has the variable
    with Archive.open(replayed_archive.url) as archive:
        options = [tuple(r.values()) for r in archive.query(var_sqls.pop())]
    live, second = namespaces
    assert options[0] == (live.database, live.name) and (second.database, second.name) in options


@pytest.mark.broker
def test_the_job_variable_offers_the_replayed_jobs(outcomes: Outcomes,
                                                   namespaces: tuple[Namespace, Namespace]) -> None:
    [job_var] = [q for q in QUERIES if q.name == "$job"]
    live, second = (outcomes[(ns.name, job_var.id)][0] for ns in namespaces)
    assert {JOB, "ft-7b", "pt-34b", "sft-13b", "ft-3b"} <= live.jobs and SECOND_JOB not in live.jobs
    assert second.jobs == {SECOND_JOB}
