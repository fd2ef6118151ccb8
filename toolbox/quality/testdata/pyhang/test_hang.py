import time


def test_a_quick():
    assert True


def test_b_hangs():
    time.sleep(3600)
