"""Count every copy of every record by id: what "lost", "twice" and "with two contents" mean in the tests.

A set comparison hides a record published twice; these counts do not. ``Copies`` takes the
raw records as read from a topic (or rows from the archive, or executions from a backend)
and says, per id, how many copies there are and how many distinct contents.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["Copies"]


@dataclass
class Copies:
    """Every copy of every record, by id."""

    what: str
    count: Counter[Hashable] = field(default_factory=Counter)
    contents: dict[Hashable, set[bytes]] = field(default_factory=dict)

    @classmethod
    def of(cls, what: str, records: Iterable[bytes], key: Callable[[bytes], Hashable]) -> Copies:
        copies = cls(what)
        for raw in records:
            k = key(raw)
            copies.count[k] += 1
            copies.contents.setdefault(k, set()).add(raw)
        return copies

    @classmethod
    def counted(cls, what: str, ids: Iterable[Hashable]) -> Copies:
        """Copies of bare ids (executions, rows): no contents to compare."""
        return cls(what, Counter(ids))

    @property
    def ids(self) -> set[Hashable]:
        return set(self.count)

    @property
    def extra_copies(self) -> int:
        """Copies beyond the first of each id."""
        return sum(n - 1 for n in self.count.values())

    def twice(self) -> dict[Hashable, int]:
        """Ids seen more than once, with their counts."""
        return {k: n for k, n in self.count.items() if n > 1}

    def conflicting(self) -> list[Hashable]:
        """Ids whose copies differ in content."""
        return [k for k, c in self.contents.items() if len(c) > 1]

    def assert_each_once(self, expected: Iterable[Hashable], context: str = "") -> None:
        """Every expected id exactly once, and nothing else."""
        want = set(expected)
        lost, unknown, twice = want - self.ids, self.ids - want, self.twice()
        assert not (lost or unknown or twice), (
            f"{context}{self.what}: {len(lost)} lost {sorted(map(str, lost))[:5]}, {len(unknown)} unknown "
            f"{sorted(map(str, unknown))[:5]}, {len(twice)} more than once {dict(list(twice.items())[:5])}")

    def assert_at_least_once_identical(self, expected: Iterable[Hashable], context: str = "") -> None:
        """Every expected id at least once, nothing else, every copy of an id byte-identical."""
        want = set(expected)
        lost, unknown, conflicting = want - self.ids, self.ids - want, self.conflicting()
        assert not (lost or unknown or conflicting), (
            f"{context}{self.what}: {len(lost)} lost {sorted(map(str, lost))[:5]}, {len(unknown)} unknown "
            f"{sorted(map(str, unknown))[:5]}, {len(conflicting)} with two contents {conflicting[:5]}")

    def assert_at_most_once(self, context: str = "") -> None:
        twice = self.twice()
        assert not twice, f"{context}{self.what}: more than once: {twice}"
