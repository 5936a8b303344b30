"""The fitting layer: everything that writes a predictor card.  It may import the runtime
(:mod:`perfseer.runtime`); the runtime never imports it.

- :mod:`~perfseer.fit.data`: a dataset's rows of one device, phase and metric(s) -> examples per split;
- :mod:`~perfseer.fit.trainer`: PerfSeer's training recipe (reproducible, resumable), PCGrad in
  :mod:`~perfseer.fit.pcgrad`;
- :mod:`~perfseer.fit.methods`: train any method, neural or baseline, the same way
  (:mod:`~perfseer.fit.blend` for blends);
- :mod:`~perfseer.fit.recipe`: a predictor card from a dataset (:func:`~perfseer.fit.recipe.train_predictor`:
  splits, k-fold, stages), with its domain and intervals (:mod:`~perfseer.fit.intervals`);
- :mod:`~perfseer.fit.calibrate`: a card for a new device from K measurements;
- :mod:`~perfseer.fit.pretrain`: semi-supervised pre-training of the encoder;
- :mod:`~perfseer.fit.metrics` and :mod:`~perfseer.fit.evaluate`: scores.
"""
