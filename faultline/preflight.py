"""Checks that run before any work starts, so that nothing is published that cannot be finished.

``faultline replay`` and ``faultline demo`` publish a capture to Kafka, start a correlator and
archive what it decided. Anything that can fail for want of a file or a service fails here, in
this order (cheapest first), with one line that names the setting and what to do:

1. the correlator policy (``--policy`` / ``FAULTLINE_POLICY``) exists and is a valid policy:
   :class:`~faultline.errors.UsageError` (exit 2);
2. the archive (``FAULTLINE_ARCHIVE``) opens: :class:`~faultline.errors.Unavailable` (exit 69);
3. the broker (``FAULTLINE_KAFKA``, or the local one) answers: ``BrokerUnreachable`` (exit 69).

The views (``status``, ``incident``, ``timeline``, ``report``) open the archive through
:func:`open_archive` for the same message.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from common.kafka_admin import BrokerUnreachable, check_broker
from common.redact import mask_url
from common.settings import Settings
from faultline.errors import Failure, Unavailable, UsageError
from faultline.terminal import plural

if TYPE_CHECKING:  # the archive comes with the `sink` extra; brokers are checked by every role
    from sinks.archive.store import Archive

__all__ = ["check_policy", "ensure_broker", "open_archive", "preflight", "yaml_problem"]

log = logging.getLogger("faultline.preflight")


def check_policy(policy: Path | None) -> None:
    """The policy file loads and validates (the built-in one when ``policy`` is None)."""
    import yaml
    from pydantic import ValidationError

    from correlators.policy import load_policy

    if policy is None:
        return
    if not Path(policy).is_file():
        raise UsageError(f"policy file {policy} does not exist (--policy or FAULTLINE_POLICY); copy "
                         "correlators/policy.yaml, edit it, and point at the copy")
    try:
        load_policy(policy)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"policy file {policy}: {problems} ({plural(exc.error_count(), 'problem')}; "
                         "correlators/policy.yaml documents every key)") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"policy file {policy} is not valid YAML: {yaml_problem(exc)}") from None
    except (ValueError, OSError) as exc:
        raise UsageError(f"policy file {policy}: {exc}") from None


def yaml_problem(exc: Exception) -> str:
    """Where and what: ``line 4, column 1: expected ',' or ']', but got '<stream end>'`` (lines from 1), on one
    line; the first line of the message when the parser knows no place."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = " ".join(str(getattr(exc, "problem", None) or "").split()) or \
        (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else what


def open_archive(settings: Settings, namespace: str | None = None, *, live: str | None = None,
                 create: bool = True) -> Archive:
    """The archive's ``namespace`` (None: the live one; see :meth:`Archive.open`), or :class:`Unavailable`
    naming ``FAULTLINE_ARCHIVE`` and what to try."""
    from sinks.archive.namespaces import NamespaceError
    from sinks.archive.store import Archive

    url = settings.archive_url
    try:
        return Archive.open(url, namespace, live=live, create=create)
    except NamespaceError as exc:  # a namespace that is not there: nothing to show, not a wrong call
        raise Failure(str(exc)) from None
    except ValueError as exc:  # a URL of the wrong form
        raise UsageError(f"FAULTLINE_ARCHIVE: {exc}") from None
    except Exception as exc:
        text = str(exc).strip()
        errno = re.search(r"\[Errno -?\d+\] ([^\]\)\"']+)", text)  # "Connection refused", not urllib3's wrapping
        reason = errno.group(1).strip() if errno else (text.splitlines() or [type(exc).__name__])[0][:300]
        if url.startswith("chdb://"):
            hint = ("check that the directory is writable and that the process that holds it (the sink, "
                    "normally) is alive: it serves the archive to every other command")
        else:
            hint = ("check that ClickHouse runs there and the user may read it, or unset FAULTLINE_ARCHIVE to "
                    "use the embedded archive under FAULTLINE_DATA_DIR")
        raise Unavailable(f"the archive at {mask_url(url)} (FAULTLINE_ARCHIVE) could not be opened: {reason}. "
                          f"{hint[0].upper()}{hint[1:]}.") from exc


def ensure_broker(settings: Settings) -> str:
    """The configured broker, or the local one (started in the background if needed)."""
    if settings.kafka:
        bootstrap = settings.kafka
    else:
        from deploy.local.kafka import KafkaLaunchError, start_detached

        log.info("FAULTLINE_KAFKA unset: using the local broker on 127.0.0.1:%d", settings.local_kafka_port)
        try:
            bootstrap = start_detached(settings.data_dir / "kafka", port=settings.local_kafka_port)
        except KafkaLaunchError as exc:
            # The port is taken: by a broker another checkout started, we use it; by anything else, say so.
            bootstrap = f"127.0.0.1:{settings.local_kafka_port}"
            try:
                check_broker(settings.kafka_config(bootstrap), timeout=5)
            except BrokerUnreachable:
                raise exc from None
            log.warning("using the Kafka broker already listening on %s", bootstrap)
    check_broker(settings.kafka_config(bootstrap))
    return bootstrap


def preflight(settings: Settings) -> str:
    """Policy, archive, broker, in that order; the broker's bootstrap address once all passed."""
    check_policy(settings.policy)
    with open_archive(settings, live=settings.namespace):
        pass
    bootstrap = ensure_broker(settings)
    log.info("pre-flight checks passed: policy, archive %s, broker %s", settings.archive_shown, bootstrap)
    return bootstrap
