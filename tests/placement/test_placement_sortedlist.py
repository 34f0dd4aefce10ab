"""The blocked sorted list behind the index, against a plain sorted Python list."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runplane.placement import sortedlist
from runplane.placement.sortedlist import SortedList

Op = tuple[str, int, int]


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "remove", "copy", "probe"]),
            st.integers(0, 60),
            st.integers(0, 1),
        ),
        max_size=300,
    )
)
def test_matches_a_sorted_list_including_copy_on_write(ops: list[Op]) -> None:
    old_load = sortedlist.LOAD
    sortedlist.LOAD = 2  # tiny blocks: splits, merges and shared blocks everywhere
    try:
        lists = [SortedList()]
        models: list[list[tuple[int]]] = [[]]
        for kind, value, side in ops:
            idx = side % len(lists)
            lst, model = lists[idx], models[idx]
            if kind == "add":
                lst.add((value,))
                model.append((value,))
                model.sort()
            elif kind == "remove":
                if (value,) in model:
                    lst.remove((value,))
                    model.remove((value,))
                else:
                    try:
                        lst.remove((value,))
                    except ValueError:
                        pass
                    else:
                        raise AssertionError("removed a missing value")
            elif kind == "copy":
                lists.append(lst.copy())
                models.append(model[:])
            else:
                assert list(lst.irange((value,))) == [v for v in model if v >= (value,)]
                assert lst.count_from((value,)) == sum(1 for v in model if v >= (value,))
            for each, expected in zip(lists, models, strict=True):
                assert list(each) == expected
                assert len(each) == len(expected)
    finally:
        sortedlist.LOAD = old_load
