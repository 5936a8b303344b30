"""One step of a PyTorch model, for the CPU and CUDA backends alike.

``infer``: the model in eval mode under ``torch.inference_mode()``.  ``train``: train mode,
forward, loss, backward, optimizer step, gradients reset (``set_to_none``), so a step is what one
iteration of a training loop costs, without data loading.  The loss is cross-entropy against
fixed random labels when the model outputs ``(batch, classes)`` logits, else the mean square of
the output.  Mixed precision is ``torch.autocast`` around forward and loss (``amp_bf16``: bfloat16;
``amp_fp16``: float16 with a ``GradScaler``, as fp16 training needs); ``fp32`` is plain float32.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

AUTOCAST_DTYPES = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}


def make_optimizer(name: str, params):
    # Typical training settings; the values do not change the work done per step.
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05)
    raise ValueError(f"unknown optimizer {name!r}")


def _loss(out, labels_holder: list, batch: int):
    if isinstance(out, (tuple, list)):
        out = out[0]
    if out.dim() == 2 and out.shape[0] == batch:
        if not labels_holder:
            labels_holder.append(torch.randint(0, out.shape[1], (batch,), device=out.device))
        return F.cross_entropy(out.float(), labels_holder[0])
    return out.float().pow(2).mean()


def make_step(module, x, phase: str, precision: str, optimizer: str, device_type: str):
    """A zero-argument function running one step; the model is put in the phase's mode here.

    Returns ``(step, state)``: ``state`` holds the optimizer (for its memory to stay alive).
    """
    batch = x.shape[0]
    dtype = AUTOCAST_DTYPES.get(precision)

    def autocast():
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=dtype)

    if phase == "infer":
        module.eval()

        def step():
            with torch.inference_mode(), autocast():
                return module(x)

        return step, {}

    module.train()
    opt = make_optimizer(optimizer, module.parameters())
    scaler = torch.amp.GradScaler(device_type) if precision == "amp_fp16" else None
    labels: list = []

    def train_step():
        with autocast():
            loss = _loss(module(x), labels, batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return train_step, {"optimizer": opt, "scaler": scaler}
