"""`one_ahead`: a loader without a length is read one batch ahead (as Lightning's training loop reads
it); an error fetching the batch ahead is raised when that batch is asked for."""

import pytest

from surge.data.look_ahead import one_ahead


def test_each_item_is_handed_out_once_the_next_is_fetched():
    fetched = []

    def source():
        for i in range(3):
            fetched.append(i)
            yield i

    it = one_ahead(source())
    assert next(it) == 0 and fetched == [0, 1]
    assert next(it) == 1 and fetched == [0, 1, 2]
    assert list(it) == [2]
    assert list(one_ahead(iter([]))) == []


def test_an_error_ahead_is_raised_at_its_own_batch():
    def source():
        yield 0
        raise OSError("batch 1 is broken")

    it = one_ahead(source())
    assert next(it) == 0
    with pytest.raises(OSError, match="batch 1"):
        next(it)
