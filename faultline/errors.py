"""Exit statuses of the ``faultline`` command and the errors that choose them.

A script that runs ``faultline`` must be able to tell "it ran and found a problem" from "you
called it wrong" from "something it needs is not there" without parsing messages. The
statuses follow the conventions people already know:

======  ==========================  =====================================================
status  meaning                     examples
======  ==========================  =====================================================
0       success
1       failure                     the command ran and the work failed: a capture whose
                                    every line was bad, an incident that does not exist
2       usage                       a wrong option or argument (argparse's own status), a
                                    ``FAULTLINE_*`` setting that does not parse, a missing
                                    capture or policy file
69      a dependency is unreachable the Kafka broker or the archive did not answer
                                    (``EX_UNAVAILABLE`` of BSD's ``sysexits.h``)
130     interrupted                 Ctrl-C (128 + SIGINT, as shells report it)
141     output closed               the reader of a pipe left (``| head``; 128 + SIGPIPE)
======  ==========================  =====================================================

Commands raise :class:`UsageError` or :class:`Unavailable` (or
:class:`common.kafka_admin.BrokerUnreachable`, which the CLI treats as :class:`Unavailable`)
and :func:`faultline.cli.main` turns them into one line on standard error and the status
above. Every message says what went wrong and what to do next.
"""

from __future__ import annotations

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNAVAILABLE", "EXIT_USAGE", "EXIT_CODES_HELP",
           "Failure", "Unavailable", "UsageError"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

EXIT_CODES_HELP = (
    "exit status: 0 success; 1 failure (the work itself failed); 2 usage (a wrong option, argument or "
    "FAULTLINE_* setting); 69 a dependency (Kafka broker, archive) is unreachable; 130 interrupted; 141 the "
    "reader of the output left (| head)."
)
"""The epilog of ``faultline --help`` (and the README's table says the same)."""


class UsageError(Exception):
    """The command was called in a way that cannot work: exit status 2."""


class Unavailable(Exception):
    """Something the command needs (the broker, the archive) did not answer: exit status 69."""


class Failure(Exception):
    """The command ran and its work failed: exit status 1 (the message says why)."""
