import random

import pytest

from hocket.cli import bench
from hocket.cli.main import build_parser


def _parse(*argv):
    return build_parser().parse_args(["bench", *argv])


def test_bench_arguments_become_one_site_with_its_plans(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    world = random.choice([2, 4])
    m, k, n = world * random.randint(1, 100), random.randint(1, 500), random.randint(1, 500)
    args = _parse("ag_mm", "--m", str(m), "--k", str(k), "--n", str(n), "--world", str(world), "--backend", "gloo",
                  "--strategy", "chunked", "ring", "--chunks", "3", "5", "--iters", "4", "--dtype", "bf16")
    spec = bench.build_spec(args)
    (site, plans), = spec.sites
    assert (site.kind, site.m, site.k, site.n, site.world, site.dtype) == ("ag_mm", m, k, n, world, "bfloat16")
    assert [p.describe() for p in plans] == ["sequential", "chunked(3)", "chunked(5)", "ring(1)"]
    assert spec.timing.iters == 4 and spec.rounds == 4


def test_dtype_auto_is_float32_on_gloo(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    spec = bench.build_spec(_parse("mm_ar", "--m", "8", "--k", "8", "--n", "8", "--backend", "gloo"))
    assert spec.sites[0][0].dtype == "float32"
    assert spec.sites[0][0].world == 2


def _torchrun_env(monkeypatch, world):
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)


def test_world_defaults_to_torchrun_world_size(monkeypatch):
    _torchrun_env(monkeypatch, 4)
    spec = bench.build_spec(_parse("mm_rs", "--m", "8", "--k", "8", "--n", "8", "--backend", "gloo"))
    assert spec.sites[0][0].world == 4


def test_world_flag_must_match_torchrun(monkeypatch, capsys):
    _torchrun_env(monkeypatch, 4)
    args = _parse("mm_rs", "--m", "8", "--k", "8", "--n", "8", "--backend", "gloo", "--world", "2")
    assert args.func(args) == 2
    assert "WORLD_SIZE=4" in capsys.readouterr().err


def test_indivisible_m_is_refused_with_a_fix(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match=r"--m 7 is not divisible by --world 2.*use --m 6"):
        bench.build_spec(_parse("ag_mm", "--m", "7", "--k", "8", "--n", "8", "--backend", "gloo"))


def test_bad_input_exits_2_before_starting_ranks(monkeypatch, capsys):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    args = _parse("mm_rs", "--m", "9", "--k", "8", "--n", "8", "--backend", "gloo")
    assert args.func(args) == 2
    assert "not divisible" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["ag_mm", "--m", "0", "--k", "1", "--n", "1"],
                                  ["ag_mm", "--k", "1", "--n", "1"],
                                  ["xx_mm", "--m", "2", "--k", "1", "--n", "1"]])
def test_parser_refuses_bad_values(argv):
    with pytest.raises(SystemExit):
        _parse(*argv)


def test_graph_flag_needs_nccl_ranks_and_reaches_the_spec(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    shape = ("ag_mm", "--m", "8", "--k", "8", "--n", "8", "--world", "2")
    with pytest.raises(ValueError, match=r"--graph replays CUDA graphs.*backend 'gloo'"):
        bench.build_spec(_parse(*shape, "--backend", "gloo", "--graph"))
    assert bench.build_spec(_parse(*shape, "--backend", "gloo")).captured is False
    import hocket.cli._ranks as ranks

    monkeypatch.setattr(ranks, "resolved_backend", lambda args: "nccl")  # as on a GPU machine
    spec = bench.build_spec(_parse(*shape, "--graph"))
    assert spec.captured is True
    eager = bench.build_spec(_parse(*shape))
    graphed = {p.transport for p in spec.sites[0][1]}
    assert graphed <= {"collective", "p2p", "host_staged"} and len(spec.sites[0][1]) <= len(eager.sites[0][1])


def test_suite_captured_flag_is_a_bool():
    from hocket.bench.suite import SuiteSpec
    from hocket.core.plan import Plan
    from hocket.core.site import Site

    site = Site(kind="ag_mm", m=8, k=8, n=8, dtype="float32", world=2)
    with pytest.raises(TypeError, match="SuiteSpec.captured='yes'"):
        SuiteSpec(sites=((site, (Plan(),)),), captured="yes")
