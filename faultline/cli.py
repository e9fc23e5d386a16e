"""The `faultline` command: the parser and the dispatch; each subcommand lives in :mod:`faultline.commands`.

Conventions every subcommand keeps: ``-v``/``--verbose`` before or after the subcommand, ``--json``
on every command that prints a result (one JSON object, times in one RFC 3339 form:
:func:`common.times.rfc3339`), ``--version``, and the
exit statuses of :mod:`faultline.errors` (0 success, 1 failure, 2 usage, 69 a dependency
unreachable, 130 interrupted). An error is one line on standard error that says what to do next;
``-v`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from pydantic import ValidationError

from common.kafka_admin import BrokerUnreachable
from common.private import private_umask
from common.secret_files import SecretFileError
from common.settings import Settings, describe_settings_error
from common.terminal_safe import SafeStream
from faultline.commands import actions, admin, archive, backtest, replay, stages, views
from faultline.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_CODES_HELP,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Failure,
    Unavailable,
    UsageError,
)
from faultline.extras import install_hint

__all__ = ["EXAMPLES", "main", "package_version", "parser"]

_GROUPS = (replay, backtest, stages, views, actions, archive, admin)


def package_version() -> str:
    """The installed distribution's version (the source tree's when not installed)."""
    try:
        return version("faultline")
    except PackageNotFoundError:
        from faultline import __version__

        return __version__


def _common() -> argparse.ArgumentParser:
    """Options every subcommand also takes after its name (``faultline status -v``)."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's parser must not reset what the main parser already set.
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log more, and show tracebacks (to standard error)")
    return common


def _parser(examples: dict[str, str] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="faultline", description="Incident pipeline for GPU training clusters.",
                                epilog=EXIT_CODES_HELP)
    p.add_argument("-v", "--verbose", action="store_true", help="log more, and show tracebacks (to standard error)")
    p.add_argument("--version", action="version", version=f"faultline {package_version()}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    common = _common()

    def add(name: str, help_: str, example: str) -> argparse.ArgumentParser:
        if examples is not None:
            examples[name] = example
        return sub.add_parser(name, help=help_, description=help_, epilog=f"example: {example}\n\n{EXIT_CODES_HELP}",
                              formatter_class=argparse.RawDescriptionHelpFormatter, parents=[common])

    for group in _GROUPS:
        group.register(add)
    return p


def parser() -> argparse.ArgumentParser:
    """The whole command line (what ``faultline completion`` writes its script from)."""
    return _parser()


#: Every subcommand's example, as its ``--help`` shows it.
EXAMPLES: dict[str, str] = {}
_parser(EXAMPLES)


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    if not verbose:
        # clickhouse-connect retries through urllib3, and both warn per attempt; the error that follows says it all.
        for name in ("urllib3", "urllib3.connectionpool", "clickhouse_connect"):
            logging.getLogger(name).setLevel(logging.ERROR)


def _error(cmd: str, exc: BaseException) -> None:
    text = " ".join(str(exc).split()) if not isinstance(exc, Failure | Unavailable | UsageError) else str(exc)
    print(f"faultline {cmd}: {text or type(exc).__name__}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run one command; whatever it prints reaches the terminal safe (:mod:`common.terminal_safe`), whatever it
    writes is private (:mod:`common.private`)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)  # type: ignore[assignment]
    umask = private_umask()  # whatever it writes (archive, ledger, spool, logs) is this user's alone
    try:
        return _main(argv)
    finally:
        os.umask(umask)
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)  # a usage error exits 2 here, with argparse's message
    verbose = bool(getattr(args, "verbose", False))
    _configure_logging(verbose)
    try:
        settings = Settings()
    except ValidationError as exc:
        for line in describe_settings_error(exc):
            print(f"faultline: {line}", file=sys.stderr)
        return EXIT_USAGE
    except SecretFileError as exc:  # a FAULTLINE_*_FILE that cannot be read (common/secret_files.py)
        print(f"faultline: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.run(args, settings))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `faultline ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (UsageError, Unavailable, BrokerUnreachable, Failure) as exc:
        if verbose:
            logging.getLogger("faultline").exception("%s failed", args.cmd)
        _error(args.cmd, exc)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILURE if isinstance(exc, Failure) \
            else EXIT_UNAVAILABLE
    except Exception as exc:  # a person reads this: say what went wrong; -v shows where
        if verbose:
            raise
        hint = install_hint(exc, args.cmd) if isinstance(exc, ModuleNotFoundError) else None  # a role left out
        if hint:
            print(f"faultline {args.cmd}: {hint}", file=sys.stderr)
            return EXIT_FAILURE
        _error(args.cmd, exc)
        print("(run it again with -v for the details)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
