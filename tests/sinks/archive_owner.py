"""A process that owns a chDB archive and keeps writing to it, for the live-archive tests.

    python -m tests.sinks.archive_owner URL [--bare] [--still]

Opens the archive (so it becomes the directory's owner and serves it), writes the sample
records (:mod:`tests.sinks.records`), prints ``ready <role>`` and then writes one heartbeat
event every 20 ms, as a sink does, until its standard input closes; then it closes the archive
and prints ``closed``. With ``--still`` it writes no heartbeats (its rows stay what they were).
With ``--bare`` it opens the directory with a plain clickhouse-connect client instead, the way
an older faultline did: it holds the lock and serves nobody.

It serves at ``FAULTLINE_ARCHIVE_ENDPOINT_PORT`` with the password in
``FAULTLINE_ARCHIVE_ENDPOINT_PASSWORD_FILE`` when they are set, as ``faultline sink run`` does;
a password file it must refuse makes it print ``refused <why>`` and exit 2.
"""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime

import clickhouse_connect

from common.settings import Settings
from sinks.archive.endpoint_listen import configure, listen_for
from sinks.archive.store import Archive
from streams.events import AgentHeartbeat, Event
from tests.sinks.records import sample_records


def main(url: str, bare: bool, still: bool = False) -> int:
    settings = Settings()
    try:
        configure(listen_for(settings.archive_endpoint_port, settings.archive_endpoint_password_file))
    except ValueError as exc:
        print(f"refused {exc}", flush=True)
        return 2
    if bare:
        client = clickhouse_connect.get_client(dsn=url)
        print("ready bare", flush=True)
        sys.stdin.read()
        client.close()
        print("closed", flush=True)
        return 0
    stop = threading.Event()
    with Archive.open(url) as archive:
        s = sample_records()
        archive.write_events(s.events)
        archive.write_incidents(s.incidents)
        archive.write_commands(s.commands)
        archive.write_results(s.results)
        archive.write_deadletters(s.deadletters)
        print(f"ready {archive.role}", flush=True)
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        n = 0
        while not stop.wait(0.02):
            if not still:
                archive.write_events([Event(id=f"owner-hb-{n}", ts=datetime.now(UTC), source="node_agent", node="n9",
                                            body=AgentHeartbeat())])
                n += 1
    print("closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--bare" in sys.argv[2:], "--still" in sys.argv[2:]))
