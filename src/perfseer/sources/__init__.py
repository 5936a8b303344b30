"""Model sources: every way a user names a model, and the builders behind each.

- :mod:`.schemes`: the table of reference schemes (``timm:``, ``torchvision:``, ``example:``,
  ``nb201:``, ``fbnet:``, ``ofa:``, ``space:``, ``hf:``): :class:`Scheme`, :func:`split_reference`,
  :func:`resolve`, the unknown-scheme error;
- :mod:`.load`: anything a user hands us (path, ``ModelProto``, module, reference) -> ONNX skeleton;
- :mod:`.runnable`: runnable models with random weights, and their ONNX export, for measurement;
- the builders: :mod:`.zoo` (timm, torchvision), :mod:`.nas` (NAS-Bench-201, FBNet, Once-for-All),
  :mod:`.space` and :mod:`._space_nn` (the PerfSeer model space), :mod:`.hf` (HuggingFace
  transformers); the bundled example graphs are listed by :func:`.schemes.examples`.

Layering: this package may import :mod:`perfseer.graph`, :mod:`perfseer.devices`,
:mod:`perfseer.errors`, :mod:`perfseer.deadline` and :mod:`perfseer.switches`, nothing else of
perfseer; extraction, memory, collection, the service and the CLI import it.  Importing it is light
(no torch, no onnx).
"""

from __future__ import annotations

from perfseer.sources.schemes import (NAMES, SCHEMES, Scheme, all_names, choices, example_path, examples, resolve,
                                      scheme, scheme_word, split_reference, unknown_scheme)

__all__ = ["NAMES", "SCHEMES", "Scheme", "all_names", "choices", "example_path", "examples", "resolve", "scheme",
           "scheme_word", "split_reference", "unknown_scheme"]
