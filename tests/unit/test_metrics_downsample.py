"""Minute statistics of ring-buffer samples: mean and max per NPU and host figure, NA figures skipped."""

from panel.monitoring.metrics.downsample import mean_and_max, minute_of, minute_stats


def sample(t, cpu, npus):
    return {"t": t, "h": [cpu, 1000.0, 4000.0, 0.5], "n": npus}


def test_each_minute_gets_the_mean_and_max_of_its_own_samples():
    samples = [
        sample(120.0, 10.0, [[0, 0, 20, 3000, 90.0, 40, None]]),
        sample(121.0, 30.0, [[0, 0, 40, 5000, 110.0, 44, None]]),
        sample(180.5, 50.0, [[0, 0, 100, 60000, 300.0, 70, None]]),
    ]
    stats = minute_stats(samples)
    assert sorted(stats) == [120, 180]
    first = stats[120]
    assert first["samples"] == 2
    assert first["host"]["cpu"] == (20.0, 30.0)
    assert first["npus"][(0, 0)]["util"] == (30.0, 40)
    assert first["npus"][(0, 0)]["hbm_used"] == (4000.0, 5000)
    assert first["npus"][(0, 0)]["power"] == (100.0, 110.0)
    assert first["npus"][(0, 0)]["memory_used"] == (None, None)
    assert stats[180]["npus"][(0, 0)]["temp"] == (70.0, 70)


def test_a_figure_npu_smi_printed_as_na_is_left_out_of_the_mean():
    assert mean_and_max([None, 10.0, 20.0]) == (15.0, 20.0)
    assert mean_and_max([None, None]) == (None, None)


def test_chips_are_kept_apart_and_counted_separately():
    samples = [
        sample(60.0, 1.0, [[0, 0, 10, 1, 1, 1, None], [0, 1, 90, 2, 2, 2, None]]),
        sample(61.0, 1.0, [[0, 0, 30, 1, 1, 1, None]]),
    ]
    stats = minute_stats(samples)[60]
    assert stats["npus"][(0, 0)]["util"] == (20.0, 30)
    assert stats["npus"][(0, 1)]["util"] == (90.0, 90)
    assert stats["counts"] == {(0, 0): 2, (0, 1): 1}


def test_minutes_start_on_the_minute():
    assert minute_of(119.999) == 60
    assert minute_of(120.0) == 120
