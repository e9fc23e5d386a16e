"""The `faultline` command: the parser and the dispatch; each subcommand lives in :mod:`faultline.commands`."""

from __future__ import annotations

import argparse
import logging
import sys

from common.settings import Settings
from faultline.commands import actions, admin, archive, replay, stages, views
from faultline.extras import install_hint

__all__ = ["EXAMPLES", "main"]

_GROUPS = (replay, stages, views, actions, archive, admin)


def _parser(examples: dict[str, str] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="faultline", description="Incident pipeline for GPU training clusters.")
    p.add_argument("-v", "--verbose", action="store_true", help="log more (to standard error)")
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name: str, help_: str, example: str) -> argparse.ArgumentParser:
        if examples is not None:
            examples[name] = example
        return sub.add_parser(name, help=help_, description=help_, epilog=f"example: {example}",
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    for group in _GROUPS:
        group.register(add)
    return p


#: Every subcommand's example, as its ``--help`` shows it.
EXAMPLES: dict[str, str] = {}
_parser(EXAMPLES)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()
    try:
        return int(args.run(args, settings))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a person reads this: say what went wrong and what to do
        if args.verbose:
            raise
        hint = install_hint(exc) if isinstance(exc, ModuleNotFoundError) else None  # a role left out
        print(f"faultline {args.cmd}: {hint or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
