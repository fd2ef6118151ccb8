import pytest

from calc import add


def test_add():
    assert add(1, 2) == 3


def test_add_wrong():
    assert add(2, 2) == 5


@pytest.mark.skip(reason="planted skip")
def test_skipped():
    pass


def test_add_negative():
    assert add(-1, -1) == -2
