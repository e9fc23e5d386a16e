#!/bin/bash
# First start of the ClickHouse container only (docker-entrypoint-initdb.d): a read-only user for
# Grafana, whose dashboards run whatever SQL they hold. The archive's own user (CLICKHOUSE_USER)
# owns the tables; the sink creates them on start. Both passwords are Docker secrets, read from
# their files (never the environment: `docker inspect` shows it).
set -euo pipefail
password=$(cat "$CLICKHOUSE_PASSWORD_FILE")
grafana_password=$(cat "$GRAFANA_CLICKHOUSE_PASSWORD_FILE")
clickhouse client --user "$CLICKHOUSE_USER" --password "$password" --multiquery <<SQL
CREATE USER IF NOT EXISTS grafana IDENTIFIED WITH sha256_password BY '${grafana_password}'
    SETTINGS readonly = 2;
GRANT SELECT ON ${CLICKHOUSE_DB}.* TO grafana;
SQL
