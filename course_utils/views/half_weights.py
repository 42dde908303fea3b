"""A trained model as a page holds it: every weight rounded to float16, sent as base64.

The live views (lesson 12's GPT in :mod:`course_utils.views.live_view`, lesson 15's translator
in :mod:`course_utils.views.translator_view`) run their model in JavaScript from weights that
travel inside the output. float16 halves what a page weighs and keeps predictions within a
few thousandths of float32 (measured in tests/test_live.py); the page decodes the halves
(``static/live_common.js``) and computes in float64. Python computes the view's numbers from
:func:`rounded_to_half`, so both sides start from the same weights.
"""

from __future__ import annotations

import base64
import copy

import torch
from torch import nn

from course_utils.checks import require_instance, require_values
from course_utils.language import _

HALF_MAX = float(torch.finfo(torch.float16).max)  # 65504: larger weights do not fit


def require_half_weights(model: nn.Module) -> nn.Module:
    """``model`` itself, once every weight of its ``state_dict`` has values (not on the meta
    device) that float16 can hold (finite, at most 65504 in size); else a ValueError naming
    the weight.

    Used in lessons 12 and 15.
    """
    require_instance("model", model, nn.Module, _("a torch.nn.Module"))
    for name, tensor in model.state_dict().items():
        require_values(_("model's {name}").format(name=name), tensor)  # the page needs values
        if not torch.isfinite(tensor).all() or tensor.abs().max() > HALF_MAX:
            raise ValueError(_(
                "model's {name} holds a weight that float16 cannot hold (inf, NaN or beyond "
                "{HALF_MAX:g}): the page could not run it"
            ).format(name=name, HALF_MAX=HALF_MAX))
    return model


def rounded_to_half(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in eval mode whose every weight is rounded to float16 (computing
    in float32): the model exactly as the page holds it.

    Used in lessons 12 and 15.
    """
    rounded = copy.deepcopy(require_half_weights(model)).float().eval()
    with torch.no_grad():
        for parameter in rounded.parameters():
            parameter.copy_(parameter.half().float())
    return rounded


def half_weights(model: nn.Module) -> dict:
    """Every weight of ``model`` as little-endian float16 in one base64 string: ``tensors``
    (name and shape of each, in ``state_dict`` order), ``weights`` (the base64) and
    ``bytes`` (its decoded size: 2 per weight).

    Used in lessons 12 and 15.
    """
    tensors, chunks = [], []
    for name, tensor in require_half_weights(model).state_dict().items():
        tensors.append({"name": name, "shape": list(tensor.shape)})
        chunks.append(tensor.detach().to("cpu", torch.float32).numpy().astype("<f2").tobytes())
    data = b"".join(chunks)
    return {"tensors": tensors, "weights": base64.b64encode(data).decode("ascii"),
            "bytes": len(data)}
