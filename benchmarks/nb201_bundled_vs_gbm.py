"""The bundled NAS-Bench-201 predictor against a GBM on global features fitted to the same data.

``nb201-gpus.infer`` (SeerNet-Multi) was trained on 2,000 of the training split's architectures
(``--max-train-models 2000``, all three batch sizes).  This fits the ``gbm`` baseline to the same
2,000 architectures, one device at a time, and scores both on the test split, over all batch
sizes and at batch 256.

    python benchmarks/nb201_bundled_vs_gbm.py
"""
import numpy as np
from perfseer.data.dataset import load_dataset
from perfseer.predictor import train_predictor, load_predictor
from perfseer.training.metrics import evaluate
ds = load_dataset('datasets/nb201')
bundled = load_predictor('nb201-gpus.infer')
labels = ds.labels[ds.labels.split.astype(str) == 'test']
for c, dev in enumerate(['1080ti', '2080ti', 'titan_rtx', 'titanx', 'titanxp']):
    p, _ = train_predictor(ds, 'gbm', devices=dev, phase='infer', max_train_models=2000)
    rows = labels[(labels.device.astype(str) == dev)]
    graphs = [ds.graphs[int(g)] for g in rows.graph]
    y = rows.latency_ms.to_numpy(float); b = rows.batch_size.to_numpy()
    pg = p.predict_graphs(graphs)[:, 0]; ps = bundled.predict_graphs(graphs)[:, c]
    for bb in (None, 256):
        m = np.ones(len(y), bool) if bb is None else b == bb
        g, s = evaluate(y[m], pg[m]), evaluate(y[m], ps[m])
        print(f"{dev:10s} batch {bb or 'all':>4}: gbm MAPE {g['mape']:.2f} rho {g['spearman']:.3f} | seernet-multi MAPE {s['mape']:.2f} rho {s['spearman']:.3f}", flush=True)
