"""The pipeline the expert torch peers (_conv_peers.py's and _row_peers.py's) run: an H2D, a compute and
a D2H stream chained by per-slot events, so chunk i+1 loads while chunk i computes and chunk i-1 goes
back, within a fixed number of preallocated device slots."""


class StreamedPeer:
    """What the expert peers share: an H2D, a compute and a D2H stream, per-buffer events that chain
    them (in_ready, in_free, out_ready, out_done) and preallocated device slots."""

    def init_streams(self, torch, copier, buffers):
        self.torch, self.copier, self.buffers = torch, copier, buffers
        self.h2d, self.compute_stream, self.d2h = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
        E = torch.cuda.Event
        self.in_ready = [E() for _ in range(buffers)]
        self.in_free = [E() for _ in range(buffers)]
        self.out_ready = [E() for _ in range(buffers)]
        self.out_done = [E() for _ in range(buffers)]
        self.slots = []

    def start_streams(self):
        """Everything the previous call (or the caller) queued on the current stream comes first."""
        start = self.torch.cuda.Event()
        start.record(self.torch.cuda.current_stream())
        for s in (self.h2d, self.compute_stream, self.d2h):
            s.wait_event(start)

    def release(self):
        self.slots = []
        self.torch.cuda.synchronize()

    def upload(self, host_tensors):
        """Device copies of whole host tensors (w, a bias), enqueued on the H2D stream; the compute
        stream waits for them."""
        torch = self.torch
        with torch.cuda.stream(self.h2d):
            dev = [torch.empty(tuple(t.shape), dtype=t.dtype, device="cuda") for t in host_tensors]
            for d, t in zip(dev, host_tensors):
                self.copier.copy(d, t, self.h2d)
            ready = torch.cuda.Event()
            ready.record(self.h2d)
        self.compute_stream.wait_event(ready)
        return dev

    def stream_chunks(self, load, compute, store=None, slot_free=None):
        """The pipeline over self.chunks: chunk i uses slot b = i % buffers; load(ch, b) enqueues its
        inputs on the H2D stream once chunk i-B is done with the slot (slot_free[b]; by default
        in_free, recorded after its compute), compute(ch, loaded) runs on the compute stream, and
        store(ch, out) enqueues the result's D2H. At most `buffers` results are alive: the host
        thread stays at most that many chunks ahead. Without store the results stay on the device
        (a reduction). Returns when the device is done."""
        torch, B = self.torch, self.buffers
        free = self.in_free if slot_free is None else slot_free
        outs = [None] * B
        for i, ch in enumerate(self.chunks):
            b = i % B
            with torch.cuda.stream(self.h2d):
                if i >= B:
                    self.h2d.wait_event(free[b])  # chunk i-B is done with this slot
                loaded = load(ch, b)
                self.in_ready[b].record(self.h2d)
            if i >= B and store is not None:
                # Chunk i-B's result has reached the host: free it before computing chunk i's.
                self.out_done[b].synchronize()
                outs[b] = None
            with torch.cuda.stream(self.compute_stream):
                self.compute_stream.wait_event(self.in_ready[b])
                out = compute(ch, loaded)
                self.in_free[b].record(self.compute_stream)
                self.out_ready[b].record(self.compute_stream)
            if store is not None:
                outs[b] = out
                with torch.cuda.stream(self.d2h):
                    self.d2h.wait_event(self.out_ready[b])
                    store(ch, out)
                    self.out_done[b].record(self.d2h)
        torch.cuda.synchronize()
