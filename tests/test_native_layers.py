"""libooc's layers (docs/ARCHITECTURE.md, "Layers"): no #include climbs from a lower layer to a
higher one, and the C API sits on the public API and api/, not on the backends. Reads the source
tree beside these tests; skipped where it is not there (an installed package alone)."""

import pathlib
import re

import pytest

NATIVE = pathlib.Path(__file__).resolve().parent.parent / "native"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# The vocabulary every layer may name; the operation headers are the API layer's declarations.
VOCABULARY = {"ooc/types.hpp", "ooc/errors.hpp", "ooc/problem.hpp", "ooc/plan.hpp"}
OPERATION_HEADERS = {"ooc/ooc.hpp", "ooc/layers.hpp", "ooc/pool_activation_softmax.hpp", "ooc/fused.hpp",
                     "ooc/ooc_cudnn.h", "ooc/ooc_cublas.h"}
# Lowest first; a file may include its own layer and those below it.
RANK = {"vocabulary": 0, "util": 1, "plan": 2, "backend": 3, "exec": 4, "api": 5, "capi": 6}
# The C API reaches the library only through these.
CAPI_MAY_INCLUDE = {"vocabulary", "api", "capi"}

pytestmark = pytest.mark.skipif(not (NATIVE / "src").is_dir(), reason="needs the source tree")


def layer_of(header):
    """The layer of an included path (as written in #include "..."), or None for a third-party one."""
    if header in VOCABULARY:
        return "vocabulary"
    if header in OPERATION_HEADERS:
        return "api"
    top = header.split("/", 1)[0]
    return top if top in RANK else None


def source_files():
    for path in sorted((NATIVE / "src").rglob("*")):
        if path.suffix in {".hpp", ".cpp", ".cu", ".h"}:
            yield path, path.relative_to(NATIVE / "src").parts[0]
    for path in sorted((NATIVE / "include" / "ooc").glob("*")):
        name = f"ooc/{path.name}"
        yield path, "vocabulary" if name in VOCABULARY else "api"


def includes(path):
    return INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace"))


def test_the_layers_are_known():
    layers = {layer for _, layer in source_files()}
    assert layers <= set(RANK), f"a folder of native/src is in no layer: {sorted(layers - set(RANK))}"


def test_no_include_climbs_a_layer():
    climbs = []
    for path, layer in source_files():
        for header in includes(path):
            target = layer_of(header)
            if target is not None and RANK[target] > RANK[layer]:
                climbs.append(f"{path.relative_to(NATIVE)} ({layer}) includes {header} ({target})")
    assert not climbs, "includes that climb a layer:\n" + "\n".join(climbs)


def test_the_c_api_sits_on_the_public_api():
    below = []
    for path, layer in source_files():
        if layer != "capi":
            continue
        for header in includes(path):
            target = layer_of(header)
            if target is not None and target not in CAPI_MAY_INCLUDE:
                below.append(f"{path.relative_to(NATIVE)} includes {header} ({target})")
    assert not below, "the C API reaches below the API layer:\n" + "\n".join(below)


def test_public_headers_include_only_public_headers():
    private = [f"ooc/{p.name} includes {h}" for p, _ in source_files() if p.parent.name == "ooc"
               for h in includes(p) if not h.startswith("ooc/")]
    assert not private, "\n".join(private)
