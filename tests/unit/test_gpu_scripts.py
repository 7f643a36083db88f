"""The one-GPU scripts of issue 36 (benchmarks/grouped_gemm_gpu.py, benchmarks/stencil_gpu.py) in their CPU tiny
modes, and the pieces they are built from."""

import json
import math

import pytest
import torch

from benchmarks import grouped_gemm_gpu as gg
from benchmarks import stencil_gpu as sg

# -- grouped expert GEMMs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("skew", ["uniform", "zipf"])
@pytest.mark.parametrize("rows,experts", [(0, 4), (7, 1), (100, 16), (4096, 32)])
def test_split_rows_keeps_every_row(rows, experts, skew):
    counts = gg.split_rows(rows, experts, skew, zipf=1.2, seed=3)
    assert len(counts) == experts and sum(counts) == rows and min(counts) >= 0


def test_zipf_rows_are_skewed_and_uniform_rows_even():
    uniform = gg.split_rows(1000, 16, "uniform", zipf=1.2, seed=0)
    skewed = gg.split_rows(1000, 16, "zipf", zipf=1.2, seed=0)
    assert max(uniform) - min(uniform) <= 1
    assert max(skewed) > 3 * (1000 / 16)  # the hottest expert: 1 / H(16, 1.2) of the rows, about 35%


def test_fit_recovers_the_parameters_of_its_own_model():
    truth = {"e_max": 0.8, "t_half": 96.0}
    rows = []
    for rows_total, busy in [(256, 16), (1024, 16), (4096, 32), (65536, 32), (512, 1), (32768, 4)]:
        row = {"rows": rows_total, "busy_experts": busy, "dense_ms": rows_total / 1000.0,
               "case": {"model": f"m{busy}", "skew": "uniform" if busy != 4 else "zipf"}}
        row["grouped_ms"] = gg.predict_ms(row, truth["e_max"], truth["t_half"])
        rows.append(row)
    fit = gg.fit_efficiency(rows)
    assert abs(math.log2(fit["t_half"] / truth["t_half"])) <= 1 / 8
    assert fit["e_max"] == pytest.approx(truth["e_max"], rel=0.1)
    held = gg.held_out_fits(rows)
    assert {h["held_out"] for h in held} >= {"m16", "zipf (fit on uniform)"}
    assert all(h["test"]["max_abs_error"] < 0.1 for h in held)


def test_grouped_script_tiny_mode_checks_and_fits(tmp_path):
    report = gg.main(["--device", "cpu", "--tiny", "--models", "qwen3-tiny,deepseek-tiny", "--tokens", "8",
                      "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "grouped_gemm.json").read_text())
    assert saved["meta"]["tiny"] and len(saved["results"]) == len(report["results"]) == 8  # 2 models x 2 x 2
    for row in saved["results"]:
        assert all(err <= gg.CHECK_RTOL for err in row["check_errors"].values())
        assert row["grouped_ms"] > 0 and row["dense_ms"] > 0 and row["loop_ms"] > 0
        assert row["flops"] == 2.0 * row["rows"] * row["case"]["k"] * row["case"]["n"]
    assert saved["fits"]["rule"]["t_half_rows"] > 0 and {h["held_out"] for h in saved["fits"]["held_out"]} \
        >= {"qwen3-tiny", "deepseek-tiny"}
    assert "| held out |" in (tmp_path / "grouped_gemm.md").read_text()


def test_operands_pad_groups_where_offsets_must_align():
    case = gg.Case("m", 8, 3, 4, "zipf", "gate_up", 16, 16, (5, 0, 11))
    ops = gg.Operands(case, device=torch.device("cpu"), dtype=torch.float32, align=16, seed=0)
    assert ops.offs.tolist() == [16, 16, 32] and ops.ranges == [(0, 5), (16, 16), (16, 27)]
    got = ops.real_rows(ops.loop())
    want = torch.cat([ops.x[0:5] @ ops.w[0], ops.x[16:27] @ ops.w[2]])
    torch.testing.assert_close(got, want)


# -- stencil steps -------------------------------------------------------------------------------------------

def test_host_staged_self_transport_routes_each_message_by_tag():
    transport = sg.HostStagedSelf(torch.device("cpu"))
    sends = [(torch.full((3,), 1.0), 1, 0), (torch.full((2,), 2.0), 1, 1)]
    recvs = [(torch.zeros(2), 1, 1), (torch.zeros(3), 1, 0)]
    transport.post(sends, recvs).wait()
    assert recvs[0][0].tolist() == [2.0, 2.0] and recvs[1][0].tolist() == [1.0, 1.0, 1.0]


def test_bytes_per_step_counts_each_field_once():
    assert sg.Case("heat", 4, (4, 4, 4)).bytes_per_step(4) == 2 * 64 * 4
    assert sg.Case("wave", 8, (4, 4, 4)).bytes_per_step(4) == 4 * 64 * 4


def test_stencil_script_tiny_mode_matches_the_reference(tmp_path):
    report = sg.main(["--device", "cpu", "--tiny", "--orders", "2,8", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "stencil_gpu.json").read_text())
    assert len(saved["results"]) == len(report["results"]) == 4
    for row in saved["results"]:
        assert all(err <= sg.CHECK_RTOL for err in row["check_errors"].values())
        assert row["halo_bytes_per_step"] > 0 and row["copies_alone_ms_per_step"] > 0
        assert row["overlap"]["metric"] in ("overlap_efficiency", "speedup")
    r8 = next(r for r in saved["results"] if r["order"] == 8 and r["problem"] == "heat")
    r2 = next(r for r in saved["results"] if r["order"] == 2 and r["problem"] == "heat")
    assert r8["halo_bytes_per_step"] > r2["halo_bytes_per_step"]  # radius 4 halos are deeper than radius 1
    assert "| case |" in (tmp_path / "stencil_gpu.md").read_text()
