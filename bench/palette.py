"""One colour per chunk size, the same on every chart and page that shows chunk sizes.

The team demo's chart, its A/B result and the bench charts (Lab 4's retrieval sweep)
all read ``CHUNK_COLOURS``, so "500자" is the same colour everywhere. Okabe–Ito colours:
told apart with the common colour-vision deficiencies and on a washed-out projector, and
none of them is a phase colour of the split bar (retrieval | prefill | decode, lab.css).
Pages get the map as JSON (the demo: ``json_script`` "chunk-palette") and paint the
elements that carry ``data-chunk="<size>"``; charts call ``chunk_colour``.
"""

from __future__ import annotations

CHUNK_COLOURS: dict[int, str] = {200: "#0072B2", 500: "#E69F00", 1000: "#CC79A7"}  # rag.chunking.CHUNK_SIZES
OTHER_COLOUR = "#5b6475"  # a chunk size outside the indexed ones (never drawn in practice)

# Several jobs drawn over each other keep the colour of each chunk size; their markers differ.
RUN_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x")


def chunk_colour(size: int) -> str:
    return CHUNK_COLOURS.get(size, OTHER_COLOUR)
