"""Several GPUs: collective communication (:mod:`perfseer.parallel.collectives`)."""
