"""A small blocked sorted list (the sortedcontainers layout, reduced to what the index uses).

Values live in sorted blocks of at most ``2 * LOAD`` items with a list of block maxima, so
an insert or removal costs a bisect over the maxima, a bisect in one block and a memmove
of at most ``2 * LOAD`` pointers: O(log n) comparisons plus a bounded copy, whatever n.

:meth:`SortedList.copy` is copy-on-write: the copy shares the blocks, and whichever side
writes to a shared block first copies that block, so a copy costs O(n / LOAD).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import Any

LOAD = 256

Item = tuple[Any, ...]


class SortedList:
    __slots__ = ("_len", "_lists", "_maxes", "_owned")

    def __init__(self) -> None:
        self._lists: list[list[Item]] = []
        self._maxes: list[Item] = []
        self._owned: list[bool] = []  # False: the block may be shared with a copy
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Item]:
        for block in self._lists:
            yield from block

    def copy(self) -> SortedList:
        """A copy sharing the blocks (copy-on-write)."""
        other = SortedList()
        other._lists = self._lists[:]
        other._maxes = self._maxes[:]
        other._len = self._len
        other._owned = [False] * len(self._lists)
        self._owned = [False] * len(self._lists)
        return other

    def _block(self, i: int) -> list[Item]:
        """Block ``i``, copied first if it may be shared."""
        if not self._owned[i]:
            self._lists[i] = self._lists[i][:]
            self._owned[i] = True
        return self._lists[i]

    def add(self, value: Item) -> None:
        maxes = self._maxes
        if not maxes:
            self._lists.append([value])
            self._owned.append(True)
            maxes.append(value)
            self._len = 1
            return
        i = bisect_left(maxes, value)
        if i == len(maxes):
            i -= 1
            block = self._block(i)
            block.append(value)
            maxes[i] = value
        else:
            block = self._block(i)
            insort(block, value)
        self._len += 1
        if len(block) > 2 * LOAD:
            half = block[LOAD:]
            del block[LOAD:]
            maxes[i] = block[-1]
            self._lists.insert(i + 1, half)
            self._owned.insert(i + 1, True)
            maxes.insert(i + 1, half[-1])

    def remove(self, value: Item) -> None:
        """Remove one ``value``; ``ValueError`` when absent."""
        maxes = self._maxes
        i = bisect_left(maxes, value)
        if i == len(maxes):
            raise ValueError(f"{value!r} not in list")
        j = bisect_left(self._lists[i], value)
        if self._lists[i][j] != value:
            raise ValueError(f"{value!r} not in list")
        block = self._block(i)
        del block[j]
        self._len -= 1
        if not block:
            del self._lists[i]
            del self._owned[i]
            del maxes[i]
        elif j == len(block):
            maxes[i] = block[-1]

    def count_from(self, start: Item) -> int:
        """How many values are ``>= start``."""
        maxes = self._maxes
        i = bisect_left(maxes, start)
        if i == len(maxes):
            return 0
        lists = self._lists
        n = len(lists[i]) - bisect_left(lists[i], start)
        for block in lists[i + 1 :]:
            n += len(block)
        return n

    def irange(self, start: Item | None = None) -> Iterator[Item]:
        """Values ``>= start`` (all when ``None``), ascending. Do not mutate while iterating."""
        lists = self._lists
        if not lists:
            return
        if start is None:
            i, j = 0, 0
        else:
            i = bisect_left(self._maxes, start)
            if i == len(lists):
                return
            j = bisect_left(lists[i], start)
        nblocks = len(lists)
        while True:
            block = lists[i]
            n = len(block)
            while j < n:
                yield block[j]
                j += 1
            i += 1
            if i >= nblocks:
                return
            j = 0
