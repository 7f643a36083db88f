"""Cross-rank agreements of eager graphs on 2 and 4 gloo ranks: a capture counts only if every rank made it
(all_ranks_ok), and whether a signature is replayed is rank 0's answer everywhere (settle_replay)."""

from __future__ import annotations

import random

from _agreement_cases import ranks_ok


def test_every_rank_gets_the_same_answers(pool):
    rng = random.Random()
    world = pool.world_size
    for oks in ([True] * world, [rng.random() < 0.5 for _ in range(world)], [True] * (world - 1) + [False]):
        replays = [rng.random() < 0.5 for _ in range(world)]
        answers = pool.run(ranks_ok, {"oks": oks, "replays": replays})
        assert answers == [(all(oks), replays[0])] * world
