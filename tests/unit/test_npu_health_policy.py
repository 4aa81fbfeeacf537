"""The NPU health policy (panel.nodes.health.npu_health) on a fake clock: which signals make a chip suspect or
failed, how long it takes, what brings it back, and what an admin's override forgives."""

from panel.nodes.health.npu_health import (
    CHIP_GONE,
    ECC_DOUBLE,
    FAILED,
    FAULT_CODE,
    HEALTH_WORD,
    LIMITS,
    LINK_DOWN,
    LINK_FLAPS,
    OK,
    SUSPECT,
    next_state,
    node_failed,
    observe,
    overridden,
)


def chip(health="OK", **probe):
    return {"npu_id": 0, "chip_id": 0, "health": health, "probe": probe or None}


def run(samples, state=OK, start=0.0, step=1.0):
    """Feed samples one a `step` apart; the chip's states after each."""
    memory, states = {}, []
    for index, npu in enumerate(samples):
        now = start + index * step
        memory, verdict = observe(memory, npu, now)
        state = next_state(state, verdict, memory, now)
        states.append(state)
    return states, memory, verdict


def test_a_healthy_chip_stays_ok():
    states, _, verdict = run(
        [chip(ecc={"hbm_double": 0, "hbm_single": 3}, link="UP", link_up_count=1), chip()]
    )
    assert states == [OK, OK]
    assert verdict.findings == []


def test_warning_is_suspect_and_alarm_or_critical_fail_at_once():
    assert run([chip("Warning")])[0] == [SUSPECT]
    states, _, verdict = run([chip("Critical")])
    assert states == [FAILED]
    assert verdict.signal == HEALTH_WORD


def test_a_code_the_table_knows_speaks_for_itself():
    # 0x80E18402 (64 rows isolated) is SeparateNPU: failed even under a mere Warning.
    states, _, verdict = run([chip("Warning", error_codes=["80E18402"])])
    assert states == [FAILED]
    assert verdict.signal == FAULT_CODE
    # 0x81078603 (a port went down) is NotHandleFault: nothing, though the word says Warning.
    assert run([chip("Warning", error_codes=["81078603"])])[0] == [OK]


def test_an_unknown_code_is_judged_by_the_health_word():
    assert run([chip("Alarm", error_codes=["8FFF0001"])])[0] == [FAILED]
    assert run([chip("Warning", error_codes=["8FFF0001"])])[0] == [SUSPECT]


def test_codes_found_by_a_probe_stand_until_the_next_probe():
    states, _, _ = run([chip("Warning", error_codes=["80C98000"]), chip("Warning"), chip("Warning")])
    assert states == [SUSPECT] * 3


def test_one_uncorrectable_ecc_error_is_suspect_a_second_within_the_hour_fails():
    first = {"hbm_double": 0}
    states, _, verdict = run(
        [chip(ecc=first), chip(ecc={"hbm_double": 1}), chip(), chip(ecc={"hbm_double": 2})], step=600
    )
    assert states == [OK, SUSPECT, SUSPECT, FAILED]
    assert verdict.signal == ECC_DOUBLE


def test_uncorrectable_errors_an_hour_apart_stay_suspect():
    samples = [chip(ecc={"hbm_double": 0}), chip(ecc={"hbm_double": 1}), chip(ecc={"hbm_double": 2})]
    assert run(samples, step=LIMITS.ecc_window_s + 1)[0] == [OK, SUSPECT, SUSPECT]


def test_a_cleared_ecc_counter_is_not_read_as_errors():
    assert run([chip(ecc={"hbm_double": 5}), chip(ecc={"hbm_double": 0})])[0] == [OK, OK]


def test_a_link_down_is_suspect_then_failed_after_30_seconds():
    samples = [chip(link="DOWN", link_up_count=1)] * 4
    states, _, verdict = run(samples, step=15)
    assert states == [SUSPECT, SUSPECT, FAILED, FAILED]
    assert verdict.signal == LINK_DOWN


def test_three_flaps_in_ten_minutes_are_suspect_two_are_not():
    counts = [1, 2, 3]
    assert run([chip(link="UP", link_up_count=c) for c in counts], step=60)[0][-1] == OK
    states, _, verdict = run([chip(link="UP", link_up_count=c) for c in [*counts, 4]], step=60)
    assert states[-1] == SUSPECT
    assert verdict.signal == LINK_FLAPS


def test_a_chip_that_is_gone_fails_at_once():
    states, _, verdict = run([chip(), chip("UNKNOWN", gone=True)])
    assert states == [OK, FAILED]
    assert verdict.signal == CHIP_GONE


def test_failed_stays_failed_when_signals_go_and_suspect_clears_after_ten_quiet_minutes():
    assert run([chip("Critical"), chip(), chip()], step=LIMITS.clear_after_s)[0] == [FAILED] * 3
    states = run([chip("Warning"), chip(), chip()], step=LIMITS.clear_after_s / 2)[0]
    assert states == [SUSPECT, SUSPECT, OK]


def test_an_override_forgives_what_is_present_but_not_what_is_new():
    memory, _ = observe({}, chip("Alarm", error_codes=["8FFF0001"]), 0)
    memory = overridden(memory, chip("Alarm", error_codes=["8FFF0001"]), 1)
    memory, verdict = observe(memory, chip("Alarm", error_codes=["8FFF0001"]), 2)
    assert next_state(OK, verdict, memory, 2) == OK
    memory, verdict = observe(memory, chip("Alarm", error_codes=["8FFF0001", "80E18402"]), 3)
    assert next_state(OK, verdict, memory, 3) == FAILED


def test_a_forgiven_signal_that_went_away_counts_again_when_it_returns():
    memory = overridden({}, chip("Critical"), 0)
    memory, verdict = observe(memory, chip(), 1)
    memory, verdict = observe(memory, chip("Critical"), 2)
    assert verdict.state == FAILED


def test_a_forgiven_code_stays_forgiven_through_the_samples_between_probes():
    # The probe reads codes every 20 s; the 1 Hz samples between carry none. An override of a chip whose
    # code still stands held for one sample only, and the next probe failed the chip again.
    memory, _ = observe({}, chip("Critical", error_codes=["80E18402"]), 0)
    memory = overridden(memory, chip("Critical"), 1)
    for now in range(2, 21):
        memory, verdict = observe(memory, chip("OK"), now)
        assert next_state(OK, verdict, memory, now) == OK
    memory, verdict = observe(memory, chip("OK", error_codes=["80E18402"]), 21)
    assert next_state(OK, verdict, memory, 21) == OK
    memory, verdict = observe(memory, chip("OK", error_codes=[]), 41)  # the code went: forgotten
    memory, verdict = observe(memory, chip("OK", error_codes=["80E18402"]), 61)
    assert next_state(OK, verdict, memory, 61) == FAILED


def test_a_probe_read_before_the_override_but_delivered_after_it_is_forgiven():
    # The browser tier: a chip went Critical, its probe began reading (codes 80E18402) while the fault stood,
    # the fault was cleared and an admin marked the chip healthy, and only then did that probe arrive (its
    # port reads took seconds on a loaded machine). The override did not know the code yet; it failed the chip
    # again. A probe that began after the override still counts.
    memory, _ = observe({}, chip("Critical"), 0)
    memory = overridden(memory, chip("OK"), 10)
    memory, verdict = observe(memory, chip("OK", error_codes=["80E18402"], read_at=8.0), 11)
    assert next_state(OK, verdict, memory, 11) == OK
    memory, verdict = observe(memory, chip("OK", error_codes=[], read_at=11.0), 12)  # the code went
    memory, verdict = observe(memory, chip("OK", error_codes=["80E18402"], read_at=20.0), 21)
    assert next_state(OK, verdict, memory, 21) == FAILED


def test_a_probe_without_a_time_counts_as_new():
    memory = overridden({}, chip("OK"), 10)
    memory, verdict = observe(memory, chip("OK", error_codes=["80E18402"]), 11)
    assert next_state(OK, verdict, memory, 11) == FAILED


def test_a_node_with_half_its_npus_failed_is_failed():
    assert node_failed([FAILED, FAILED, OK, SUSPECT])
    assert not node_failed([FAILED, OK, OK, OK])
    assert not node_failed([])
    assert not node_failed([FAILED, OK])
    assert node_failed([FAILED])
