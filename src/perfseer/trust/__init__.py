"""How far to trust a prediction: the predictor's domain of validity and a verdict per graph
(:mod:`~perfseer.trust.domain`), a 90 % interval (:mod:`~perfseer.trust.intervals`) and physical
sanity bounds from the device's spec (:mod:`~perfseer.trust.bounds`); :mod:`~perfseer.fit.intervals`
computes the first two from a predictor's training data.  ``docs/concepts/trust.md`` has the measurements."""
