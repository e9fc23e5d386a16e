"""Shell completion for ``faultline``, written from the command's own parser so it never drifts from it.

``source <(faultline completion bash)`` (or into ``/etc/bash_completion.d/faultline``); zsh reads the
same script through its bash compatibility: ``autoload -U +X bashcompinit && bashcompinit`` first,
which ``faultline completion zsh`` prints ahead of it.

What completes: the subcommands; each one's options; the values of an option with choices (``-o``)
and of a positional with choices (``report lemons|checkpoints``). Any other value (an incident id, a
file for ``--html``) falls back to the shell's file names.
"""

from __future__ import annotations

import argparse
import shlex

__all__ = ["SHELLS", "script"]

SHELLS = ("bash", "zsh")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for its subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, list[str]]]:
    """Every option string and positional choice of ``parser``; the choices of each option that has them."""
    words: list[str] = []
    values: dict[str, list[str]] = {}
    for action in parser._actions:
        if action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            words += action.option_strings
            if action.choices:
                for opt in action.option_strings:
                    values[opt] = [str(c) for c in action.choices]
        elif action.choices and not isinstance(action, argparse._SubParsersAction):
            words += [str(c) for c in action.choices]
    return words, values


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (module docstring)."""
    if shell not in SHELLS:
        raise ValueError(f"no completion for {shell!r}: one of {', '.join(SHELLS)}")
    subs = _subparsers(parser)
    top, _ = _words(parser)
    value_cases: list[str] = []
    word_cases: list[str] = []
    for name, sub in sorted(subs.items()):
        words, values = _words(sub)
        for opt, choices in values.items():
            value_cases.append(f"        {shlex.quote(name + ':' + opt)}) "
                               f"COMPREPLY=($(compgen -W {shlex.quote(' '.join(choices))} -- \"$cur\")); return;;")
        word_cases.append(f"        {shlex.quote(name)}) COMPREPLY=($(compgen -W {shlex.quote(' '.join(words))} "
                          "-- \"$cur\"));;")
    lines = [
        "# faultline shell completion (faultline completion bash|zsh): written from the command's own parser",
        "_faultline() {",
        "    local cur prev cmd i",
        '    cur="${COMP_WORDS[COMP_CWORD]}"',
        '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    cmd=""',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break;; esac',
        "    done",
        '    if [[ -z "$cmd" ]]; then',
        f"        COMPREPLY=($(compgen -W {shlex.quote(' '.join([*sorted(subs), *top]))} -- \"$cur\"))",
        "        return",
        "    fi",
        '    case "$cmd:$prev" in',
        *value_cases,
        "    esac",
        '    case "$cmd" in',
        *word_cases,
        "    esac",
        "}",
        "complete -o default -F _faultline faultline",
    ]
    head = ["autoload -U +X bashcompinit && bashcompinit"] if shell == "zsh" else []
    return "\n".join(head + lines) + "\n"
