"""Host arrays through a device in bounded chunks, transfers overlapped with compute.

The array is cut into chunks. Chunk k is staged by the host into a pinned buffer, copied
to the device on the copy-in stream, computed on the compute stream, copied back into a
pinned buffer on the copy-out stream, and finally drained by the host into the NumPy
output; events order the streams, so while the host stages chunk k the device is still
working on chunks k-1 and k-2 (``SLOTS`` chunks are in flight). Pinned and device buffers
come from a pool kept across calls, and everything held is bounded by FASTMATH_CUDA_MEMORY,
so arrays larger than the card run.

The same code runs on a :class:`Device` for torch's "cpu": streams and events are then
no-ops and "pinned" memory is ordinary memory, which is how the tests check the pipeline
on machines without a GPU. ``limit`` caps the device bytes the pool may allocate,
which on "cpu" stands in for a smaller card: allocating past it raises torch's own
OutOfMemoryError, exactly where CUDA would.
"""
from __future__ import annotations

import contextlib
import itertools
import threading

from .._numpy import np

from ..dispatch import _config, _parallel

SLOTS = 3  # chunks in flight: one staged by the host, one computing, one coming back
MAX_CHUNK_BYTES = 16 << 20  # copies of 16 MiB already reach full link speed
MIN_CHUNK_BYTES = 64 << 10  # out-of-memory retries stop halving here
MIN_BUFFER = 4096
DEFAULT_MEMORY = 512 << 20
PARALLEL_COPY_BYTES = 4 << 20  # host staging copies this large are split over the pool


class _Null:
    """A stream or event where there are none: everything already happened in order."""

    def record(self, stream=None):
        pass

    def wait_event(self, event):
        pass

    def synchronize(self):
        pass


_NULL = _Null()


class Pool:
    """Buffers by (kind, size in bytes, a power of two), kept for the next call."""

    def __init__(self, device):
        self.device = device
        self.free: dict = {}
        self.held = {"pinned": 0, "device": 0}
        self.peak = dict(self.held)
        self.hits = self.misses = 0

    def take(self, kind, nbytes, budget):
        size = max(MIN_BUFFER, 1 << (max(nbytes, 1) - 1).bit_length())
        stack = self.free.get((kind, size))
        if stack:
            self.hits += 1
            return stack.pop()
        self.misses += 1
        if self.held[kind] + size > budget:
            self._release(kind)
        if self.held[kind] + size > budget:
            raise self.device.torch.OutOfMemoryError(
                f"the pipeline would hold more than FASTMATH_CUDA_MEMORY={budget} bytes")
        buf = self.device.allocate(kind, size)
        self.held[kind] += size
        self.peak[kind] = max(self.peak[kind], self.held[kind])
        return buf

    def give(self, kind, buf):
        self.free.setdefault((kind, buf.numel()), []).append(buf)

    def _release(self, kind):
        for key in [k for k in self.free if k[0] == kind]:
            self.held[kind] -= key[1] * len(self.free.pop(key))

    def clear(self):
        """Drop every unused buffer (after an out-of-memory error, or to give memory back)."""
        self._release("pinned")
        self._release("device")
        if self.device.cuda:
            self.device.torch.cuda.empty_cache()


class Device:
    """A torch device as the pipeline sees it: streams, events, buffers, a budget."""

    def __init__(self, torch, name="cuda", memory=None, limit=None):
        self.torch = torch
        self.device = torch.device(name)
        self.cuda = self.device.type == "cuda"
        self.memory = memory  # None: FASTMATH_CUDA_MEMORY, else a default
        self.limit = limit
        self.pool = Pool(self)
        self.lock = threading.Lock()  # one pipeline at a time owns the streams
        self.trace = None  # a list, to record (step, chunk) in order
        new = torch.cuda.Stream if self.cuda else (lambda device: _NULL)
        self.h2d, self.compute, self.d2h = (new(device=self.device) for _ in range(3))
        self._events = [[self.event() for _ in range(3)] for _ in range(SLOTS)]

    def event(self):
        return self.torch.cuda.Event() if self.cuda else _NULL

    def on(self, stream):
        return self.torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def budget(self) -> int:
        if self.memory is not None:
            return self.memory
        configured = _config.get().cuda_memory
        if configured is not None:
            return configured
        if self.cuda:
            free, _ = self.torch.cuda.mem_get_info(self.device)
            return max(_config.MIN_CUDA_MEMORY, min(DEFAULT_MEMORY, free // 2))
        return DEFAULT_MEMORY

    def allocate(self, kind, nbytes):
        torch = self.torch
        if kind == "pinned":
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.cuda)
        if self.limit is not None and self.pool.held["device"] + nbytes > self.limit:
            raise torch.OutOfMemoryError(
                f"allocating {nbytes} bytes on {self.device} would pass its {self.limit}")
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def chunk(self, itemsizes) -> int:
        """Elements per chunk: a power of two whose buffers for all slots fit the budget."""
        per_element = SLOTS * sum(itemsizes)
        n = max(1, min(self.budget() // per_element, MAX_CHUNK_BYTES // max(itemsizes)))
        return 1 << (n.bit_length() - 1)

    def note(self, step, k):
        if self.trace is not None:
            self.trace.append((step, k))


def blocks(shape, chunk):
    """Index tuples cutting ``shape`` into C-order blocks of at most ``chunk`` elements."""
    inner, axis = 1, len(shape)
    while axis > 0 and inner * shape[axis - 1] <= chunk:
        axis -= 1
        inner *= shape[axis]
    if axis == 0:
        return [()]
    axis -= 1
    step = max(1, chunk // inner)
    return [outer + (slice(i, min(i + step, shape[axis])),)
            for outer in itertools.product(*map(range, shape[:axis]))
            for i in range(0, shape[axis], step)]


def copy(dst, src):
    """``np.copyto``, split over the thread pool when large (copies release the GIL)."""
    parts = _parallel.threads() if dst.nbytes >= PARALLEL_COPY_BYTES else 1
    if parts < 2:
        np.copyto(dst, src)
        return
    pairs = _parallel.chunk_views((dst, np.broadcast_to(src, dst.shape)), parts)
    _parallel.run([lambda d=d, s=s: np.copyto(d, s) for d, s in pairs])


def _host(buf, dtype, shape):
    return buf[:int(np.prod(shape)) * dtype.itemsize].numpy().view(dtype).reshape(shape)


class _Slot:
    __slots__ = ("pin_in", "dev_in", "dev_out", "pin_out", "events", "pending")


def run(dev, inputs, index, kernel, sink, out_dtype=None):
    """Stream ``inputs`` (host arrays of one shape) through ``dev`` block by block.

    ``index`` lists the blocks (index tuples, see :func:`blocks`). ``kernel(views, out)``
    runs on the compute stream with device views of a block (and a device output block
    if ``out_dtype`` is given) and returns the device tensors to bring back;
    ``sink(k, idx, results)`` gets them as NumPy arrays, in block order, in this thread.
    Raises whatever the device raised, after every transfer has finished and every
    buffer is back in the pool.
    """
    budget = dev.budget()
    most = max(int(np.prod(inputs[0][idx].shape)) for idx in index)
    tdtype = {dt: dev.torch.from_numpy(np.empty(0, dt)).dtype
              for dt in {a.dtype for a in inputs} | ({out_dtype} - {None})}
    with dev.lock:
        p = _Pipeline(dev, kernel, out_dtype, budget, tdtype)
        try:
            p.take_slots(min(SLOTS, len(index)), [a.itemsize for a in inputs], most)
            for k, idx in enumerate(index):
                s = p.slots[k % len(p.slots)]
                if s.pending is not None:
                    _drain(dev, s, sink)
                s.pending = (k, idx, p.send(s, k, [a[idx] for a in inputs]))
            for s in sorted((s for s in p.slots if s.pending), key=lambda s: s.pending[0]):
                _drain(dev, s, sink)
        finally:
            p.finish()


class _Pipeline:
    """One :func:`run`: its slots, and the buffers it took from the pool."""

    def __init__(self, dev, kernel, out_dtype, budget, tdtype):
        self.dev, self.pool, self.kernel, self.out_dtype = dev, dev.pool, kernel, out_dtype
        self.budget, self.tdtype = budget, tdtype
        self.slots, self.taken = [], []  # taken: (kind, buffer) to give back at the end

    def _take(self, kind, nbytes):
        # listed at once: an allocation failing later in the setup must not lose this one
        buf = self.pool.take(kind, nbytes, self.budget)
        self.taken.append((kind, buf))
        return buf

    def take_slots(self, count, itemsizes, most):
        """``count`` slots, each with buffers for a block of ``most`` elements."""
        for i in range(count):
            s = _Slot()
            s.pin_in = [self._take("pinned", most * n) for n in itemsizes]
            s.dev_in = [self._take("device", most * n) for n in itemsizes]
            s.dev_out = s.pin_out = None
            if self.out_dtype is not None:
                s.dev_out = self._take("device", most * self.out_dtype.itemsize)
                s.pin_out = self._take("pinned", most * self.out_dtype.itemsize)
            s.events, s.pending = self.dev._events[i], None
            self.slots.append(s)

    def send(self, s, k, host):
        """Queue block ``k`` (``host``, its input arrays) through slot ``s``: staged into
        pinned memory now; copied in, computed and copied back on the streams. Returns
        (pinned buffer, device result, whether the buffer is its own) per result."""
        dev = self.dev
        shape = host[0].shape
        nbytes = [h.size * h.itemsize for h in host]
        for h, p in zip(host, s.pin_in):
            copy(_host(p, h.dtype, shape), h)
        dev.note("stage", k)
        loaded, computed, unloaded = s.events
        with dev.on(dev.h2d):
            for p, d, n in zip(s.pin_in, s.dev_in, nbytes):
                d[:n].copy_(p[:n], non_blocking=True)
            loaded.record(dev.h2d)
        dev.note("h2d", k)
        with dev.on(dev.compute):
            dev.compute.wait_event(loaded)
            results, out = self._compute(s, host, nbytes, shape)
            computed.record(dev.compute)
        dev.note("compute", k)
        back = []
        try:  # results given pinned buffers before one failed: those go back at the end too
            with dev.on(dev.d2h):
                dev.d2h.wait_event(computed)
                for j, r in enumerate(results):
                    self._copy_back(s, r, j == 0 and r is out, back)
                unloaded.record(dev.d2h)
        except BaseException:
            self.taken += [("pinned", buf) for buf, _, own in back if own]
            raise
        dev.note("d2h", k)
        return back

    def _compute(self, s, host, nbytes, shape):
        """The kernel on the device views of slot ``s``; returns its results and the output view."""
        views = [d[:n].view(self.tdtype[h.dtype]).view(shape)
                 for d, n, h in zip(s.dev_in, nbytes, host)]
        out = None if self.out_dtype is None else (
            s.dev_out[:int(np.prod(shape)) * self.out_dtype.itemsize]
            .view(self.tdtype[self.out_dtype]).view(shape))
        with self.dev.torch.inference_mode():
            return self.kernel(views, out), out

    def _copy_back(self, s, r, is_out, back):
        """Queue the copy of result ``r`` into pinned memory, listed in ``back``: the slot's
        own output buffer when ``r`` is the output view, else one taken from the pool."""
        n = r.numel() * r.element_size()
        buf = s.pin_out if is_out else self.pool.take("pinned", n, self.budget)
        back.append((buf, r, not is_out))
        buf[:n].view(r.dtype).view(r.shape).copy_(r, non_blocking=True)

    def finish(self):
        """Wait for the streams, then give every buffer back: the slots', and those of
        results never drained (the run raised)."""
        dev = self.dev
        if dev.cuda:
            for stream in (dev.h2d, dev.compute, dev.d2h):
                stream.synchronize()
        for s in self.slots:
            self.taken += [("pinned", b[0]) for b in (s.pending or (0, 0, ()))[2] if b[2]]
        for kind, buf in self.taken:
            self.pool.give(kind, buf)


def _drain(dev, s, sink):
    k, idx, back = s.pending
    s.events[2].synchronize()
    try:
        sink(k, idx, [_host(buf, np.dtype(str(r.dtype).replace("torch.", "")), tuple(r.shape))
                      for buf, r, _ in back])
    finally:
        s.pending = None
        for buf, _, own in back:
            if own:
                dev.pool.give("pinned", buf)
    dev.note("drain", k)


# --- what the torch backend runs on host arrays ---------------------------------------


def retrying(dev, attempt, itemsizes, chunk=None):
    """Run ``attempt(chunk)``; on out-of-memory free the pool, halve the chunk, try again.

    Below MIN_CHUNK_BYTES the error is raised for the caller to fall back.
    """
    chunk = chunk or dev.chunk(itemsizes)
    while True:
        try:
            return attempt(chunk)
        except dev.torch.OutOfMemoryError:
            dev.pool.clear()
            if chunk * max(itemsizes) <= MIN_CHUNK_BYTES:
                raise
            chunk //= 2


def unary(dev, fn, x, out, suspect=None, chunk=None):
    """``fn(x, out=out)`` for host arrays, streamed through ``dev``.

    ``suspect(x_block, out_block)`` (optional) is called in the host thread for each block
    whose results hold a non-finite or tiny value, which the device flags as it computes,
    so that NumPy's floating-point error flags can be derived without another pass.
    """
    if x.shape != out.shape:
        x = np.broadcast_to(x, out.shape)
    if x.flags.c_contiguous and out.flags.c_contiguous:
        x, out = x.reshape(-1), out.reshape(-1)
    # underflow is the one flag a tiny result raises; it is ignored by default
    tiny = np.finfo(out.dtype).tiny if np.geterr()["under"] != "ignore" else None

    def kernel(views, o):
        fn(views[0], out=o)
        if suspect is None:
            return [o]
        bad = ~dev.torch.isfinite(o)
        if tiny is not None:
            bad |= o.abs() < tiny
        return [o, bad.any().reshape(1)]

    def sink(k, idx, results):
        copy(out[idx], results[0])
        if suspect is not None and results[1][0]:
            suspect(x[idx], out[idx])

    def attempt(n):
        run(dev, [x], blocks(x.shape, n), kernel, sink, out.dtype)

    retrying(dev, attempt, (x.itemsize, out.itemsize), chunk)


def lse(dev, partial, merge, a, axes, b=None, chunk=None):
    """SciPy's (M, m, s) partials of logsumexp, streamed; only partials come back.

    ``partial(t, axes, tb)`` computes them for device tensors; ``merge`` combines the
    partials of neighbouring blocks. A full reduction takes blocks in any layout; otherwise
    blocks are runs of whole rows along axis 0, which needs a row to fit in a chunk.
    Returns None when the shape cannot be cut that way.
    """
    inputs = [a] if b is None else [a, b]
    full = len(axes) == a.ndim
    row = int(np.prod(a.shape[1:]))
    if not full and row * a.itemsize * len(inputs) > MAX_CHUNK_BYTES:
        return None
    keep = tuple(1 if i in axes else n for i, n in enumerate(a.shape))

    def attempt(n):
        acc = [None]
        if full:
            index = blocks(a.shape, n)
            result = None
        else:
            step = max(1, n // row)
            index = [(slice(i, min(i + step, a.shape[0])),) for i in range(0, a.shape[0], step)]
            result = None if 0 in axes else [np.empty(keep, a.dtype) for _ in range(3)]

        def kernel(views, _):
            t = views[0]
            own = tuple(range(t.ndim)) if full else axes
            return list(partial(t, own, views[1] if b is not None else None))

        def sink(k, idx, parts):
            if full:
                parts = [p.reshape(keep) for p in parts]
            if result is not None:
                for dst, src in zip(result, parts):
                    dst[idx] = src
            else:
                parts = [p.copy() for p in parts]  # the pinned buffers go back to the pool
                acc[0] = parts if acc[0] is None else merge(acc[0], parts)

        run(dev, inputs, index, kernel, sink)
        return tuple(result) if result is not None else tuple(acc[0])

    return retrying(dev, attempt, [x.itemsize for x in inputs], chunk)
