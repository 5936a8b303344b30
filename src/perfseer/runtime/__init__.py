"""The runtime layer: answers from a predictor card, and never imports the fitting code
(:mod:`perfseer.fit`).

- :mod:`~perfseer.runtime.predictor`: measured-device predictor cards (load, list, predict, assess);
- :mod:`~perfseer.runtime.net`, :mod:`~perfseer.runtime.scaling`, :mod:`~perfseer.runtime.corrections`:
  what a card holds (the network, its scalings, a calibrated card's correction and interval);
- :mod:`~perfseer.runtime.spec` and :mod:`~perfseer.runtime.transfer`: the spec model and the spec
  transfer, for devices nobody measured;
- :mod:`~perfseer.runtime.answer`: the protocol every basis implements (:class:`Answerer`, :class:`Options`);
- :mod:`~perfseer.runtime.route`: the one routing policy from a request to a basis.
"""
