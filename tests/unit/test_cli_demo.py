import pytest

from hocket.bench.plans import BENCH_STRATEGIES
from hocket.cli import demo
from hocket.cli.main import build_parser


def _parse(*argv):
    return build_parser().parse_args(["demo", *argv])


def test_demo_without_arguments_covers_every_operator_and_strategy(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    spec = demo.build_spec(_parse("--backend", "gloo"))
    kinds = {site.kind for site, _ in spec.sites}
    assert kinds == {"ag_mm", "mm_rs", "mm_ar"}
    for site, plans in spec.sites:
        assert site.world == 2 and site.dtype == "float32"
        assert {p.strategy for p in plans} == set(BENCH_STRATEGIES[site.kind])
        if site.kind in ("ag_mm", "mm_rs"):
            assert site.m % site.world == 0


@pytest.mark.parametrize("world", [2, 3, 4])
def test_llama_sites_split_over_the_world(world):
    sites = demo.llama_sites(world=world, tokens=100, scale=16, dtype="float32")
    hidden, ffn = demo.LLAMA_HIDDEN // 16, demo.LLAMA_FFN // 16
    by_name = {s.name: s for s in sites}
    assert by_name["mlp.down"].k == ffn // world and by_name["mlp.down"].n == hidden
    assert by_name["attn.qkv"].n == demo.LLAMA_QKV // 16 // world
    assert all(s.m % world == 0 and s.m <= 100 for s in sites)


def test_demo_refuses_shapes_too_small_to_split(monkeypatch, capsys):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    args = _parse("--backend", "gloo", "--world-size", "4", "--tokens", "2")
    assert args.func(args) == 2
    assert "--tokens" in capsys.readouterr().err
