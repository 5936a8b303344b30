"""The size limits of a model's inputs, apart from the ONNX checks that enforce them
(:mod:`perfseer.graph.validate`), so that the CLI's argument checks read them without importing onnx."""

MAX_DIM = 1 << 24  # an input dimension above 16.7 M is taken for a corrupt file
MAX_INPUT_ELEMENTS = 1 << 31  # elements of one input sample (without the batch)
