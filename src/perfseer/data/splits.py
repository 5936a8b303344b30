"""Train/validation/test splits by architecture, and by architecture family.

A model measured at batch 8 in training must not be tested at batch 16, so rows are never split
one by one: every row of one architecture lands in the same split.

**Architecture split** (column ``split``): the key is the ``model`` reference as written in the
table (``timm:resnet50``, ``nb201:|...|``, ``path/net.onnx``), with a trailing ``@reparam`` removed
(the deployed form of the same network).  All its rows -- every input shape, batch size, phase
and device -- share one split.

**Family split** (column ``family_split``): for ``timm:``, ``torchvision:`` and ``example:``
references (the example graphs are torchvision networks), the key is the architecture family
given by :func:`family_of`; every model of a family lands in the same split, so a test family was
never seen in training.  Other references have no family (empty cell).

**Assignment** is hash-based, not a shuffle: a key goes to ``train`` / ``val`` / ``test`` by where
``sha256("perfseer-split-v1:<seed>:<key>")`` (its first 8 bytes read as a fraction of 2**64) falls
in the cumulative ratios, by default 2:1:1 (PerfSeer's recipe: 50 % / 25 % / 25 %).  So the split
of a model depends only on the seed and the model itself: adding models to a table, or removing
some, never moves the others.  The price is that the realised proportions fluctuate around the
ratios when there are few keys (with 8 models, 4/2/2 is only the most likely outcome).

Example::

    >>> split_of("timm:resnet50", seed=0)  # doctest: +SKIP
    'train'
    >>> family_of("tf_efficientnet_b0")
    'efficientnet'
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from perfseer.errors import PerfseerError
from perfseer.sources import split_reference
from perfseer.sources.zoo import REPARAM_SUFFIX

SPLITS = ("train", "val", "test")
DEFAULT_RATIOS = (2, 1, 1)  # PerfSeer: 50 % train, 25 % validation, 25 % test
_HASH_PREFIX = "perfseer-split-v1"  # bump (and say so in the manifest) if the assignment changes
_REPARAM_SUFFIX = REPARAM_SUFFIX  # a timm name fused to its inference form: the same family
FAMILY_SCHEMES = ("timm", "torchvision", "example")

# Prefixes naming where old timm weights came from or how they were trained, not the architecture
# (timm >= 0.9 moved most of them into the ``.tag`` after the name; benchmark files from older
# versions still use them).
SOURCE_PREFIXES = ("tf_", "gluon_", "legacy_", "tv_", "ig_", "ssl_", "swsl_", "jx_", "ens_adv_", "adv_")
# Families the general rule would cut wrongly: two-word names, a digit inside the family name,
# or a first word that is a modifier of another family.  First match wins.
FAMILY_PREFIXES = (
    ("inception_resnet", "inception_resnet"),
    ("inception_next", "inception_next"),
    ("wide_resnet", "wide_resnet"),
    ("tiny_vit", "tiny_vit"),
    ("res2net", "res2net"),
    ("res2next", "res2net"),
    ("halo2botnet", "halonet"),
    ("cs3", "cs3darknet"),
    ("dm_nfnet", "nfnet"),
    ("eca_nfnet", "nfnet"),
    ("nf_", "nfnet"),
    ("ese_vovnet", "vovnet"),
    ("gc_efficientnetv2", "efficientnetv2"),
    ("eca_", None),  # eca_resnet33ts: the family of ecaresnet33ts, as timm spells the others
)
_VERSION_TOKEN = re.compile(r"v\d+")
# the leading letters, plus a version number written right after a 'v' (mobilenetv3, swinv2)
_LEAD = re.compile(r"[a-z]+(?:(?<=v)\d+)?")


def architecture_key(model: str) -> str:
    """The key of the architecture split: the reference, without a trailing ``@reparam``."""
    model = str(model).strip()
    return model[: -len(_REPARAM_SUFFIX)] if model.endswith(_REPARAM_SUFFIX) else model


def family_of(name: str) -> str:
    """The architecture family of a timm (or torchvision) model name.

    The rule, in order:

    1. lower-case; drop a ``@reparam`` suffix and a pretrained tag (``vit_base_patch16_224.augreg_in1k``);
    2. drop one weight-source prefix (:data:`SOURCE_PREFIXES`: ``tf_efficientnet_b0`` ->
       ``efficientnet_b0``, ``gluon_resnet50_v1b`` -> ``resnet50_v1b``);
    3. a name starting with one of :data:`FAMILY_PREFIXES` gets that family
       (``wide_resnet50_2`` -> ``wide_resnet``, ``res2net50_26w_4s`` -> ``res2net``,
       ``eca_nfnet_l0`` -> ``nfnet``); ``eca_`` is joined to what follows (``eca_resnet33ts`` reads
       as ``ecaresnet33ts``);
    4. otherwise take the first ``_``-separated word, joined with a second word that is a version
       (``mobilenet_v3_small`` -> ``mobilenetv3``, as timm writes it), and keep its leading letters
       plus a version number directly after a ``v``: ``resnet50d`` -> ``resnet``,
       ``vit_base_patch16_224`` -> ``vit``, ``mobilenetv3_large_100`` -> ``mobilenetv3``,
       ``convnextv2_nano`` -> ``convnextv2``, ``deit3_base_patch16_224`` -> ``deit``.

    Variants that carry their change in the first word stay families of their own
    (``seresnet50`` -> ``seresnet``, ``ecaresnet50d`` -> ``ecaresnet``, ``regnetx``/``regnety``),
    and versions are separate families (``efficientnet`` / ``efficientnetv2``): the rule reads
    names, not architectures.
    """
    n = str(name).strip().lower()
    if n.endswith(_REPARAM_SUFFIX):
        n = n[: -len(_REPARAM_SUFFIX)]
    n = n.split(".", 1)[0]
    for prefix in SOURCE_PREFIXES:
        if n.startswith(prefix):
            n = n[len(prefix):]
            break
    for prefix, family in FAMILY_PREFIXES:
        if n.startswith(prefix):
            if family is not None:
                return family
            n = prefix.rstrip("_") + n[len(prefix):]
            break
    words = n.split("_")
    word = words[0]
    if len(words) > 1 and _VERSION_TOKEN.fullmatch(words[1]):
        word += words[1]
    m = _LEAD.match(word)
    return m.group(0) if m else word


def model_family(model: str) -> str | None:
    """The family of a ``timm:`` / ``torchvision:`` / ``example:`` reference, else ``None``."""
    split = split_reference(str(model).strip())
    if split is None or split[0] not in FAMILY_SCHEMES or not split[1].strip():
        return None
    return family_of(split[1])


def _check_ratios(ratios: Sequence[float]) -> tuple[float, ...]:
    ratios = tuple(float(r) for r in ratios)
    if len(ratios) != len(SPLITS) or any(not r >= 0 for r in ratios) or sum(ratios) <= 0:
        raise PerfseerError(f"split ratios must be {len(SPLITS)} non-negative numbers (train, val, test) "
                            f"with a positive sum, got {ratios!r}", "use e.g. (2, 1, 1)")
    return ratios


def split_of(key: str, seed: int = 0, ratios: Sequence[float] = DEFAULT_RATIOS) -> str:
    """``"train"``, ``"val"`` or ``"test"`` for ``key``: a pure function of ``(seed, key, ratios)``.

    Args:
        key: what is split: an architecture key or a family name.
        seed: any integer; another seed gives an independent assignment.
        ratios: relative sizes of train, val and test (default 2:1:1).
    """
    ratios = _check_ratios(ratios)
    digest = hashlib.sha256(f"{_HASH_PREFIX}:{int(seed)}:{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64 * sum(ratios)
    edge = 0.0
    for name, r in zip(SPLITS, ratios):
        edge += r
        if u < edge:
            return name
    return SPLITS[-1]


def assign_splits(models: Sequence[str], seed: int = 0, ratios: Sequence[float] = DEFAULT_RATIOS):
    """The split columns for a column of model references.

    Returns:
        A DataFrame aligned with ``models``: ``split`` (by architecture), ``family`` and
        ``family_split`` (empty where the reference has no family).
    """
    import pandas as pd  # deferred: heavy, loaded on first use

    ratios = _check_ratios(ratios)
    models = pd.Series(list(models), dtype="string")
    codes, uniques = pd.factorize(models)
    split = [split_of(architecture_key(m), seed, ratios) for m in uniques]
    family = [model_family(m) for m in uniques]
    family_split = [None if f is None else split_of(f"family:{f}", seed, ratios) for f in family]

    def column(values):
        return pd.array([values[c] if c >= 0 else None for c in codes], dtype="string")

    return pd.DataFrame({"split": column(split), "family": column(family),
                         "family_split": column(family_split)})


def describe(seed: int, ratios: Sequence[float] = DEFAULT_RATIOS) -> dict:
    """The split rule, for the dataset manifest."""
    ratios = _check_ratios(ratios)
    return {
        "split": {"by": "model (architecture: the reference without @reparam)",
                  "rule": f'sha256("{_HASH_PREFIX}:<seed>:<model>") first 8 bytes / 2**64, '
                          "against the cumulative ratios",
                  "seed": int(seed), "ratios": dict(zip(SPLITS, ratios))},
        "family_split": {"by": f"architecture family of {', '.join(s + ':' for s in FAMILY_SCHEMES)} "
                               "references (perfseer.data.splits.family_of)",
                         "rule": f'sha256("{_HASH_PREFIX}:<seed>:family:<family>") as above',
                         "seed": int(seed), "ratios": dict(zip(SPLITS, ratios))},
    }
