"""torch set up the way every benchmark needs it: full FP32 math, and its pinned-memory cache handed
back between peers. The caller passes torch in, so importing this needs no torch."""


def torch_fp32(torch):
    """Full FP32 math in torch (pyooc never uses TF32): a fair in-core reference and peers."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def release_host_cache(torch):
    """Hands torch's cached pinned blocks back to the system (pinned memory is precious)."""
    import gc
    gc.collect()
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
