"""The spec-conditioned latency model: any GPU from its spec sheet (see docs/concepts/spec-model.md)."""
