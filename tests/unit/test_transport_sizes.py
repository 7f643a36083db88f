"""The transports' sizes (``hocket.core.sizes.TransportSizes``: relay message size, slots, mailbox) and the
relay's message cuts, on CPU; the CUDA streams and slot flags are exercised in tests/gpu."""

import random

import pytest
import torch

from hocket.core import sizes as sizes_mod
from hocket.core.sizes import DEFAULT_SIZES, MIB, TransportSizes, set_sizes, sizes_in_force, using_sizes
from hocket.transport.per_group import ramped_rounds, rounds


@pytest.mark.parametrize("trial", range(20))
def test_ramped_rounds_cover_every_element_once_and_ramp(trial):
    rng = random.Random(trial * 7919 + random.randint(0, 10**6))
    total, per_round = rng.randint(0, 5000), rng.randint(1, 700)
    cut = ramped_rounds(total, per_round)
    assert cut[0][0] == 0 and cut[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(cut, cut[1:]))
    sizes = [hi - lo for lo, hi in cut]
    assert max(sizes) <= per_round
    if total > per_round:  # the first two messages are smaller, the rest as before
        assert sizes[0] == max(1, per_round // 4) and sizes[1] == max(1, per_round // 2)
        assert len(cut) <= len(rounds(total, per_round)) + 2
    else:  # what fits one message stays one message
        assert cut == [(0, total)]


def test_the_defaults_are_the_former_environment_defaults():
    assert DEFAULT_SIZES == TransportSizes(piece_bytes=8 * MIB, slots=4, mailbox_bytes=256 * MIB)
    assert DEFAULT_SIZES.slot_bytes == 64 * MIB
    assert DEFAULT_SIZES.to_dict() == {"piece_bytes": 8 * MIB, "slots": 4, "mailbox_bytes": 256 * MIB}


@pytest.mark.parametrize("field,value", [("piece_bytes", 0), ("slots", 65), ("slots", 0), ("mailbox_bytes", -1),
                                         ("piece_bytes", 2.5), ("slots", True)])
def test_bad_sizes_name_the_field_and_the_value(field, value):
    with pytest.raises(ValueError, match=f"TransportSizes.{field}={value!r}"):
        TransportSizes(**{field: value})


def test_sizes_in_force_are_set_restored_and_checked():
    assert sizes_in_force() is DEFAULT_SIZES
    small = TransportSizes(piece_bytes=MIB // 4, slots=2)
    with using_sizes(small) as got:
        assert got is small and sizes_in_force() is small
        with pytest.raises(RuntimeError, match="inner"), using_sizes(None):
            assert sizes_in_force() is DEFAULT_SIZES
            raise RuntimeError("inner")
        assert sizes_in_force() is small  # restored after the exception
    assert sizes_in_force() is DEFAULT_SIZES
    with pytest.raises(TypeError, match=r"sizes=\{'slots': 2\} must be a hocket.core.sizes.TransportSizes"):
        set_sizes({"slots": 2})
    assert sizes_mod.sizes_in_force() is DEFAULT_SIZES


def test_the_relay_cuts_messages_at_its_transports_piece_size():
    from hocket.transport.host_relay import HostRelay

    relay = HostRelay.__new__(HostRelay)  # message arithmetic only: no group, buffer or streams
    relay.slot_bytes, relay.piece_bytes = DEFAULT_SIZES.slot_bytes, DEFAULT_SIZES.piece_bytes
    assert relay.message_elements(torch.float32) == 8 * MIB // 4
    assert relay.message_elements(torch.float32, piece_bytes=MIB) == MIB // 4
    assert relay.message_elements(torch.float32, copies=3, slot_copies=4, piece_bytes=64 * MIB) == 16 * MIB // 4
    cut = relay.pieces(10 * MIB // 4, torch.float32, piece_bytes=MIB)  # 1/4 + 1/2 MiB, then 9.25 MiB
    per = MIB // 4
    assert [hi - lo for lo, hi in cut] == [per // 4, per // 2] + [per] * 9 + [per // 4]


def test_a_host_staged_transport_takes_the_sizes_in_force_or_its_own():
    from types import SimpleNamespace

    from hocket.transport.host_relay import HostStagedTransport, relays_for

    group = SimpleNamespace(backend="nccl", name="g")
    small = TransportSizes(piece_bytes=MIB, slots=8)
    assert HostStagedTransport(group).sizes is DEFAULT_SIZES
    with using_sizes(small):
        assert HostStagedTransport(group).sizes is small
    assert HostStagedTransport(group, sizes=small).sizes is small
    with pytest.raises(TypeError, match="sizes=8 must be a hocket.core.sizes.TransportSizes"):
        HostStagedTransport(group, sizes=8)
    # one relay per buffer layout: a message size of its own shares the buffers
    assert relays_for(small) is relays_for(TransportSizes(piece_bytes=2 * MIB, slots=8))
    assert relays_for(small) is not relays_for(DEFAULT_SIZES)
