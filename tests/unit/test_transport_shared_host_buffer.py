"""The shared host buffer's protocol between two real processes (CPU tensors here; the
CUDA copies and cudaHostRegister are exercised in tests/gpu)."""

import subprocess
import sys
import textwrap

import pytest
import torch

from hocket.transport.shared_host_buffer import SharedBufferTimeout, SharedHostBuffer

RECEIVER = textwrap.dedent("""
    import sys, torch
    from hocket.transport.shared_host_buffer import SharedHostBuffer
    path, out, rows, cols, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    buf = SharedHostBuffer.attach(path, timeout_s=60)
    offsets = [rows * i // chunks for i in range(chunks + 1)]
    got = []
    for seq in (1, 2):
        dst = torch.empty(rows, cols, dtype=torch.bfloat16)
        buf.recv_rows(dst, offsets, seq, timeout_s=60)
        got.append(dst)
    torch.save(got, out)
    buf.close()
""")


@pytest.mark.timeout(120)
def test_two_processes_exchange_two_messages(tmp_path):
    rows, cols, chunks = 37, 19, 3
    path = tmp_path / "hocket_shared.buf"
    messages = [torch.randn(rows, cols).to(torch.bfloat16) for _ in range(2)]
    nbytes = rows * cols * 2
    with SharedHostBuffer.create(path, nbytes=nbytes, num_chunks=chunks) as buf:
        child = subprocess.Popen([sys.executable, "-c", RECEIVER, str(path), str(tmp_path / "got.pt"), str(rows),
                                  str(cols), str(chunks)], stderr=subprocess.PIPE, text=True)
        offsets = [rows * i // chunks for i in range(chunks + 1)]
        for seq, message in enumerate(messages, start=1):
            buf.send_rows(message, offsets, seq, timeout_s=60)
        buf.wait_consumed(2, timeout_s=60)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    assert not path.exists(), "the creator removes the file on close"
    got = torch.load(tmp_path / "got.pt")
    for sent, received in zip(messages, got):
        assert torch.equal(sent, received)


def test_wait_for_unpublished_chunk_times_out_naming_it(tmp_path):
    with SharedHostBuffer.create(tmp_path / "b", nbytes=64, num_chunks=2) as buf:
        buf.publish(0, 1)
        buf.wait_ready(0, 1, timeout_s=0.1)
        with pytest.raises(SharedBufferTimeout, match="chunk 1's publication of message 1"):
            buf.wait_ready(1, 1, timeout_s=0.1)


def test_bad_sizes_named(tmp_path):
    with SharedHostBuffer.create(tmp_path / "b", nbytes=64, num_chunks=2) as buf:
        with pytest.raises(ValueError, match="needs 128 bytes"):
            buf.view((8, 8), torch.float16)
        with pytest.raises(ValueError, match="3 chunks"):
            buf.send_rows(torch.randn(6, 1), [0, 2, 4, 6], 1)
    with pytest.raises(ValueError, match="not a hocket shared host buffer"):
        (tmp_path / "junk").write_bytes(b"\x01" * 8192)
        SharedHostBuffer(tmp_path / "junk", owner=False)
