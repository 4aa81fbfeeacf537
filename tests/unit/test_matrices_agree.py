"""The compat matrix (what a profile installs) and the launch matrix (what its engine needs) agree: for
every profile and every launch-matrix row with `needs` that applies to its vllm-ascend release, the
profile's CANN and every driver it may install meet the row's needs. A profile once installed a driver
older than its own vLLM's default graph mode needs, and the planner said so only after the install."""

from workers.ascend.compat import DriverRule, load_matrix
from workers.ascend.vercmp import Version
from workers.engine.launch.launch_matrix import load, within


def rows_with_needs():
    data = load()
    for section, entries in data.items():
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("needs"):
                yield section, entry


def disagreements(profiles, rows) -> list[str]:
    found = []
    for profile in profiles:
        for section, row in rows:
            since, until = row.get("vllm_ascend_since"), row.get("vllm_ascend_until")
            if not within(profile.vllm_ascend, since, until):
                continue
            where = f"{profile.name} vs {section} {row.get('mode') or row.get('key') or row}"
            need_cann, need_driver = row["needs"].get("cann"), row["needs"].get("driver")
            if need_cann and Version(profile.cann) < Version(need_cann):
                found.append(f"{where}: CANN {profile.cann} < {need_cann}")
            if need_driver and profile.driver is None:
                found.append(f"{where}: no driver rule, the row needs >= {need_driver}")
            elif need_driver and profile.driver.lowest() < Version(need_driver):
                found.append(
                    f"{where}: allows drivers from {profile.driver.lowest()}, needs >= {need_driver}"
                )
    return found


def test_every_profile_meets_what_its_engines_features_need():
    rows = list(rows_with_needs())
    assert rows, "the launch matrix has no row with needs: this test would check nothing"
    assert disagreements(load_matrix(), rows) == []


def test_a_profile_whose_drivers_are_older_than_its_default_graph_mode_needs_is_a_disagreement():
    newest = load_matrix()[0]
    without_floor = type(newest)(**{**newest.__dict__, "driver": DriverRule(accepts=("25.2.x", "25.5.x"))})
    found = disagreements([without_floor], list(rows_with_needs()))
    assert found == [
        f"{newest.name} vs graph_modes FULL_AND_PIECEWISE: allows drivers from 25.2.rc0, needs >= 25.5.1"
    ]


def test_the_floor_keeps_older_drivers_of_the_canns_series_out():
    rule = load_matrix()[0].driver
    assert (rule.allows("25.5.1"), rule.allows("26.1.0")) == (True, True)
    assert (rule.allows("25.5.0"), rule.allows("25.3.rc1"), rule.allows("25.2.0")) == (False, False, False)
    assert rule.describe().endswith(">= 25.5.1")
