"""A host buffer shared by processes of one node, pinned for copy engines: the host-staged
path between two GPUs without a peer path (e.g. of different vendors).

One process copies device -> host into the buffer, the other host -> device out of it.
The buffer is a file in shared memory (``/dev/shm``) mapped by both processes
(``torch.from_file(shared=True)``) and, where CUDA is present, page-locked in each
process with ``cudaHostRegister`` so both copies are asynchronous DMA.

Layout: a header of int64 slots, then the data bytes::

    [0] magic  [1] num_chunks  [2] data bytes  [3] consumed sequence  [4 + i] ready sequence of chunk i

Protocol per message ``seq`` (1, 2, ...): the sender waits until the receiver has
consumed ``seq - 1``, copies each chunk in, waits for that copy, and stores ``seq`` in the
chunk's ready slot; the receiver waits for each chunk's slot to reach ``seq``, copies it
out (raising the consumer GEMM's chunk flag after the copy, if given), and after the
last chunk stores ``seq`` in the consumed slot. Every wait is bounded
(``HOCKET_TIMEOUT_S``) and names the chunk, the sequence and the file. Host-side polling
costs a few microseconds per chunk; chunks are MiBs, so it is small beside PCIe time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from hocket import env
from hocket.transport.stream_switch import on_stream

MAGIC = 0x686F636B6574  # "hocket"
HEADER_SLOTS = 4
_PAGE = 4096


class SharedBufferTimeout(TimeoutError):
    """The peer process did not publish or consume a message in time."""


def _header_bytes(num_chunks: int) -> int:
    raw = (HEADER_SLOTS + num_chunks) * 8
    return -(-raw // _PAGE) * _PAGE


class SharedHostBuffer:
    """A shared, (where CUDA exists) pinned host buffer with per-chunk ready flags.

    ``SharedHostBuffer.create(path, nbytes=..., num_chunks=...)`` in one process,
    ``SharedHostBuffer.attach(path)`` in the other; ``close()`` in both (the creator
    also removes the file).
    """

    def __init__(self, path: Path, *, owner: bool) -> None:
        self.path = Path(path)
        self.owner = owner
        total = self.path.stat().st_size
        self._raw = torch.from_file(str(self.path), shared=True, size=total, dtype=torch.uint8)
        self.header = self._raw[:_PAGE].view(torch.int64)
        if int(self.header[0]) != MAGIC:
            raise ValueError(f"{self.path} is not a hocket shared host buffer (bad magic); create it with "
                             f"SharedHostBuffer.create")
        self.num_chunks = int(self.header[1])
        self.nbytes = int(self.header[2])
        start = _header_bytes(self.num_chunks)
        self.header = self._raw[:start].view(torch.int64)
        self.data = self._raw[start:start + self.nbytes]
        self._registered = False
        if torch.cuda.is_available():
            from hocket.kernels.stream_memops import HOST_REGISTER_FLAGS

            err = torch.cuda.cudart().cudaHostRegister(self._raw.data_ptr(), total, HOST_REGISTER_FLAGS)
            if int(err) != 0:
                raise RuntimeError(f"cudaHostRegister of {self.path} ({total} bytes) failed with CUDA error "
                                   f"{int(err)}; check the locked-memory limit (ulimit -l)")
            self._registered = True

    @classmethod
    def create(cls, path: str | os.PathLike, *, nbytes: int, num_chunks: int) -> SharedHostBuffer:
        if not isinstance(nbytes, int) or nbytes < 1:
            raise ValueError(f"nbytes={nbytes!r} must be a positive int (data bytes of the largest message)")
        if not isinstance(num_chunks, int) or num_chunks < 1:
            raise ValueError(f"num_chunks={num_chunks!r} must be a positive int")
        path = Path(path)
        header = _header_bytes(num_chunks)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, header + nbytes)
            os.pwrite(fd, b"".join(int(v).to_bytes(8, "little", signed=True)
                                   for v in (MAGIC, num_chunks, nbytes)), 0)
        finally:
            os.close(fd)
        return cls(path, owner=True)

    @classmethod
    def attach(cls, path: str | os.PathLike, *, timeout_s: float | None = None) -> SharedHostBuffer:
        """Map a buffer another process created (waits for the file to appear)."""
        path = Path(path)
        deadline = time.monotonic() + (env.wait_timeout_s() if timeout_s is None else timeout_s)
        while not (path.exists() and path.stat().st_size > _PAGE):
            if time.monotonic() > deadline:
                raise SharedBufferTimeout(f"shared host buffer {path} did not appear in time; did the peer "
                                          f"call SharedHostBuffer.create?")
            time.sleep(0.001)
        return cls(path, owner=False)

    # -- views and flags -------------------------------------------------------
    def view(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """The data region as a ``shape``/``dtype`` tensor (must fit in ``nbytes``)."""
        count = 1
        for s in shape:
            count *= int(s)
        need = count * torch.empty(0, dtype=dtype).element_size()
        if need > self.nbytes:
            raise ValueError(f"shape {tuple(shape)} {dtype} needs {need} bytes but {self.path} holds {self.nbytes}")
        return self.data[:need].view(dtype).view(*shape)

    def _wait(self, slot: int, seq: int, what: str, timeout_s: float | None, poll_s: float = 0.0) -> None:
        limit = env.wait_timeout_s() if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while int(self.header[slot]) < seq:
            if time.monotonic() > deadline:
                raise SharedBufferTimeout(f"{what} of message {seq} did not happen within {limit:g} s on {self.path} "
                                          f"(last seen {int(self.header[slot])}); the peer process stopped, "
                                          f"diverged, or is slower than HOCKET_TIMEOUT_S")
            time.sleep(poll_s)  # > 0 on a background thread: the launching thread then gets the GIL at once

    def ready_word_ptr(self, chunk: int) -> int:
        """Host address of the low 32 bits of ``chunk``'s ready slot (little-endian): where a stream
        memory operation writes or waits for the sequence number (``hocket.kernels.stream_memops``)."""
        if not 0 <= chunk < self.num_chunks:
            raise ValueError(f"chunk={chunk!r} must be in [0, {self.num_chunks}) for {self.path}")
        return self.header.data_ptr() + (HEADER_SLOTS + chunk) * self.header.element_size()

    def ready_value(self, chunk: int) -> int:
        """The sequence number last published in ``chunk``'s slot (by the host or a stream)."""
        return int(self.header[HEADER_SLOTS + chunk])

    def publish(self, chunk: int, seq: int) -> None:
        self.header[HEADER_SLOTS + chunk] = seq

    def wait_ready(self, chunk: int, seq: int, *, timeout_s: float | None = None, poll_s: float = 0.0) -> None:
        """Wait until ``chunk``'s slot reaches ``seq``; ``poll_s`` > 0 sleeps that long between polls."""
        self._wait(HEADER_SLOTS + chunk, seq, f"chunk {chunk}'s publication", timeout_s, poll_s)

    def mark_consumed(self, seq: int) -> None:
        self.header[3] = seq

    def wait_consumed(self, seq: int, *, timeout_s: float | None = None) -> None:
        self._wait(3, seq, "the receiver's consumption", timeout_s)

    # -- whole messages --------------------------------------------------------
    def send_rows(self, src: torch.Tensor, row_offsets: Sequence[int], seq: int, *,
                  stream: torch.cuda.Stream | None = None, timeout_s: float | None = None) -> None:
        """Copy ``src``'s row chunks into the buffer and publish each (blocks until all are published)."""
        self._check_message(src, row_offsets, seq)
        self.wait_consumed(seq - 1, timeout_s=timeout_s)
        dst = self.view(src.shape, src.dtype)
        for chunk in range(len(row_offsets) - 1):
            rows = slice(row_offsets[chunk], row_offsets[chunk + 1])
            if src.is_cuda:
                stream = stream or torch.cuda.current_stream(src.device)
                with on_stream(stream):
                    dst[rows].copy_(src[rows], non_blocking=True)
                    done = stream.record_event()
                done.synchronize()
            else:
                dst[rows].copy_(src[rows])
            self.publish(chunk, seq)

    def recv_rows(self, dst: torch.Tensor, row_offsets: Sequence[int], seq: int, *,
                  stream: torch.cuda.Stream | None = None, flags: torch.Tensor | None = None,
                  flag_method: str = "auto", timeout_s: float | None = None) -> None:
        """Copy each published row chunk into ``dst`` as it arrives; on CUDA, raise
        ``flags[chunk]`` on ``stream`` after the chunk's copy (for a consumer GEMM)."""
        self._check_message(dst, row_offsets, seq)
        src = self.view(dst.shape, dst.dtype)
        last = None
        for chunk in range(len(row_offsets) - 1):
            self.wait_ready(chunk, seq, timeout_s=timeout_s)
            rows = slice(row_offsets[chunk], row_offsets[chunk + 1])
            if dst.is_cuda:
                stream = stream or torch.cuda.current_stream(dst.device)
                with on_stream(stream):
                    dst[rows].copy_(src[rows], non_blocking=True)
                    if flags is not None:
                        from hocket.kernels.flags import set_flag_on_stream

                        set_flag_on_stream(flags, chunk, method=flag_method)
                    last = stream.record_event()
            else:
                dst[rows].copy_(src[rows])
        if last is not None:
            last.synchronize()
        self.mark_consumed(seq)

    def _check_message(self, t: torch.Tensor, row_offsets: Sequence[int], seq: int) -> None:
        if len(row_offsets) - 1 > self.num_chunks:
            raise ValueError(f"{len(row_offsets) - 1} chunks but {self.path} has flags for {self.num_chunks}")
        if row_offsets[0] != 0 or row_offsets[-1] != t.shape[0]:
            raise ValueError(f"row_offsets={tuple(row_offsets)} must run from 0 to the tensor's {t.shape[0]} rows")
        if not isinstance(seq, int) or seq < 1:
            raise ValueError(f"seq={seq!r} must be an int >= 1 that grows by one per message")

    def close(self) -> None:
        if self._registered:
            torch.cuda.cudart().cudaHostUnregister(self._raw.data_ptr())
            self._registered = False
        self.header = self.data = self._raw = None
        if self.owner and self.path.exists():
            self.path.unlink()

    def __enter__(self) -> SharedHostBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
