#!/bin/bash
# First start of the ClickHouse container only (docker-entrypoint-initdb.d): a read-only user for
# Grafana, whose dashboards run whatever SQL they hold. The archive's own user (CLICKHOUSE_USER)
# owns the tables; the sink creates them on start.
set -euo pipefail
clickhouse client --user "$CLICKHOUSE_USER" --password "$CLICKHOUSE_PASSWORD" --multiquery <<SQL
CREATE USER IF NOT EXISTS grafana IDENTIFIED WITH sha256_password BY '${GRAFANA_CLICKHOUSE_PASSWORD}'
    SETTINGS readonly = 2;
GRANT SELECT ON ${CLICKHOUSE_DB}.* TO grafana;
SQL
