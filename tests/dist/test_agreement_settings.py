"""Ranks started with different settings raise the same AgreementError at their first call, naming the
setting, each rank's value and the fix, quickly (no rank waits in a collective the others skip); a setting
one rank cannot parse raises on every rank. Two gloo ranks."""

from __future__ import annotations

import re

import pytest
from _settings_cases import agree_after, differ

QUICK_S = 10.0
"""a rank's first call ends far below the pool's collective timeout (60 s) when no rank waits"""

CASES = {
    "agreement_mode": ({"env": {"HOCKET_AGREEMENT": "0"}, "plan": "chunked"},
                       r"rank 1 has flags\.HOCKET_AGREEMENT='0' but rank 0 has flags\.HOCKET_AGREEMENT='1'",
                       "start every rank with the same HOCKET_AGREEMENT"),
    "agreement_always": ({"env": {"HOCKET_AGREEMENT": "always"}, "plan": "chunked"},
                         r"flags\.HOCKET_AGREEMENT='always'", "same HOCKET_AGREEMENT"),
    "disable": ({"env": {"HOCKET_DISABLE": "1"}, "plan": None},
                r"rank 1 has flags\.HOCKET_DISABLE=True but rank 0 has flags\.HOCKET_DISABLE=False",
                "same HOCKET_DISABLE"),
    "autotune": ({"env": {"HOCKET_AUTOTUNE": "1"}, "plan": None},
                 r"rank 1 has flags\.HOCKET_AUTOTUNE=True but rank 0 has flags\.HOCKET_AUTOTUNE=None",
                 "same HOCKET_AUTOTUNE"),
    "host_stage_dir": ({"env": {"HOCKET_HOST_STAGE_DIR": "/tmp"}, "plan": None},
                       r"rank 1 has flags\.HOCKET_HOST_STAGE_DIR='/tmp' but rank 0 has "
                       r"flags\.HOCKET_HOST_STAGE_DIR='/dev/shm'", "same HOCKET_HOST_STAGE_DIR"),
    "sizes": ({"piece_mib": 2, "plan": None},
              r"rank 1 has flags\.transport_sizes=\{'mailbox_bytes': 268435456, 'piece_bytes': 2097152, "
              r"'slots': 4\} but rank 0 has flags\.transport_sizes=\{'mailbox_bytes': 268435456, "
              r"'piece_bytes': 8388608, 'slots': 4\}", "hocket.core.sizes.set_sizes"),
}


@pytest.mark.parametrize("which", sorted(CASES))
def test_ranks_with_different_settings_raise_the_same_error_quickly(pool2, which):
    case, names, fix = CASES[which]
    failures = pool2.run_expect_error(differ, {"odd": 1, **case}, exc_type="AgreementError", match=names,
                                      timeout_s=30)
    messages = {re.sub(r" \[after [0-9.]+ s\]$", "", f.message) for f in failures}
    assert len(messages) == 1, messages
    (message,) = messages
    assert "ranks run with different settings" in message and fix in message
    seconds = [float(re.search(r"\[after ([0-9.]+) s\]$", f.message).group(1)) for f in failures]
    assert max(seconds) < QUICK_S, seconds


def test_a_setting_one_rank_cannot_parse_raises_on_every_rank(pool2):
    case = {"odd": 1, "env": {"HOCKET_AGREEMENT": "sometimes"}, "plan": "chunked"}
    failures = pool2.run_expect_error(differ, case, exc_type=ValueError, match=r"HOCKET_AGREEMENT='sometimes'",
                                      timeout_s=30)
    assert failures[0].exc_type.endswith("RankInputError") and "[1]" in failures[0].message
    assert failures[1].exc_type.endswith("ValueError") and "must be one of" in failures[1].message


@pytest.mark.parametrize("mode", ["0", "always"])
def test_ranks_that_agree_on_a_mode_run_new_signatures(pool2, mode):
    assert pool2.run(agree_after, {"env": {"HOCKET_AGREEMENT": mode}}, timeout_s=30) == [True, True]
