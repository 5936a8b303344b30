"""benchmarks/lib/spec_neusight_graph.py's model matching on synthetic NeuSight files (no data needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest


from benchmarks.lib import spec_neusight_graph as sg  # noqa: E402


def test_config_gets_the_class_neusight_measured(tmp_path):
    (tmp_path / "models").mkdir()
    cfg = {"architectures": ["BertLMHeadModel"], "model_type": "bert", "hidden_size": 8}
    (tmp_path / "models" / "bert_large.json").write_text(json.dumps(cfg))
    (tmp_path / "models" / "gpt2_large.json").write_text(json.dumps({**cfg, "architectures": ["GPT2LMHeadModel"]}))
    graphs = sg._Graphs(tmp_path, tmp_path / "cache")
    assert graphs.head_class("bert_large", "infer") == "BertForSequenceClassification"
    assert graphs.head_class("bert_large", "train") == "BertForPreTraining"
    assert graphs.head_class("gpt2_large", "infer") == "GPT2LMHeadModel"  # the config's own
    written = json.loads(graphs.config_path("bert_large", "train").read_text())
    assert written == {**cfg, "architectures": ["BertForPreTraining"]}


def test_trace_check_refuses_another_head_or_attention():
    def w(*names):
        return SimpleNamespace(device="t4", name="x", node_ms=pd.DataFrame({"node": list(names)}))

    sg._check_trace(w("matmul", "softmax", "bert_pooler_dense", "classifier"), "BertForSequenceClassification")
    with pytest.raises(AssertionError, match="not a BertForPreTraining"):
        sg._check_trace(w("matmul", "softmax", "classifier"), "BertForPreTraining")
    with pytest.raises(AssertionError, match="eager"):
        sg._check_trace(w("scaled_dot_product_attention", "lm_head"), "GPT2LMHeadModel")
