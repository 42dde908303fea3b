"""Probes of numerics: finite results in float32 for large scores, the inputs' dtype and
device kept, and masking that works in float16."""

from __future__ import annotations

import torch

from course_utils.diagnostics.probe_registry import probe
from course_utils.diagnostics.probing import LOG_WEIGHTS, Probing, is_log_weights, short_error
from course_utils.diagnostics.report import SKIP, Finding, probe_name
from course_utils.diagnostics.subjects import WrongReturn
from course_utils.language import _

NAN_INF = probe_name("NaN/inf")
DTYPE_DEVICE = probe_name("dtype and device")
FLOAT16_MASKING = probe_name("float16 masking")



@probe(NAN_INF, order=90)
def nan_inf(probing: Probing) -> Finding:
    """No NaN or inf may come out of finite inputs (a fully masked row included).

    Used in lesson 08.
    """
    def check(layout):
        cases = [(_("unit-size inputs"),
                  probing.inputs(8, layout, torch.float32), None),
                 (_("unit-size inputs with a causal mask"),
                  probing.inputs(8, layout, torch.float32), layout.causal()),
                 (_("inputs of size 10 (scores in the hundreds)"),
                  probing.inputs(8, layout, torch.float32, scale=10.0), None),
                 (_("unit-size inputs with a padding mask"),
                  probing.inputs(8, layout, torch.float32), probing.padding_for(layout, 8))]
        for number, (name, inputs, mask) in enumerate(cases):
            output, weights = probing.subject.call(inputs, mask, dtype=torch.float32)
            if is_log_weights(weights):
                return str(LOG_WEIGHTS)
            if not (output.isfinite().all() and weights.isfinite().all()):
                if mask is None and number == 2:  # the inputs of size 10
                    hint = _(
                        "exp() overflowed. torch.softmax subtracts each row's maximum before "
                        "exp(); a hand-written exp(s) / exp(s).sum() does not.")
                elif mask is not None:  # every probe mask leaves each row a visible key
                    mask_name = _("causal") if number == 1 else _("padding")
                    hint = probing.raw_problem(output, weights, mask, mask_name, layout) or ""
                else:
                    hint = _(
                        "look for a row with no visible key (softmax over only -inf is 0/0) "
                        "or a division by zero.")
                return _(
                    "NaN or inf in float32 for {name}: {hint}").format(
                    name=name, hint=hint)
        return None

    return probing.over_layouts(NAN_INF, check, _(
        "finite in float32, with causal and padding masks, also for scores in the hundreds"))


@probe(DTYPE_DEVICE, order=100)
def dtype_device(probing: Probing) -> Finding:
    """The outputs keep the inputs' dtype and device.

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(9, layout)
        mask = layout.causal()
        output, weights = probing.subject.call(inputs, mask, dtype=torch.float64)
        if output.dtype != torch.float64 or weights.dtype != torch.float64:
            return _(
                "for float64 inputs the output is {output_dtype} and the weights "
                "{weights_dtype}: some tensor made inside has a fixed dtype; create it with "
                "dtype=q.dtype.").format(output_dtype=output.dtype, weights_dtype=weights.dtype)
        try:  # 'meta' tensors have shapes but no data: a stand-in for a GPU on any machine
            output, weights = probing.subject.call(inputs, mask, device="meta")
        except WrongReturn:
            raise
        except Exception as error:
            return _(
                "on another device (the data-free 'meta' device stands in for a GPU) it "
                "raised {error}: some tensor is made on the CPU inside; create it with "
                "device=q.device.").format(error=short_error(error))
        if output.device.type != "meta" or weights.device.type != "meta":
            return _(
                "for inputs on the 'meta' device the output is on {output_device} and the "
                "weights on {weights_device}: results must stay on the inputs' device.").format(
                output_device=output.device, weights_device=weights.device)
        return None

    return probing.over_layouts(DTYPE_DEVICE, check, _(
        "float64 in, float64 out; results stay on the inputs' device"))


@probe(FLOAT16_MASKING, order=110)
def float16_masking(probing: Probing) -> Finding:
    """Masking must work in float16, where -1e9 overflows.

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(10, layout, torch.float16)
        mask = layout.causal()
        try:
            output, weights = probing.subject.call(inputs, mask, dtype=torch.float16)
        except WrongReturn:
            raise
        except Exception as error:
            if "overflow" in str(error):
                return _(
                    "in float16 with a mask it raised {error} about an overflow: a fill like "
                    "-1e9 does not fit in float16 (its largest magnitude is 65504). Fill with "
                    "float('-inf') or torch.finfo(scores.dtype).min.").format(
                    error=short_error(error))
            raise
        if output.dtype != torch.float16:
            return _(
                "float16 inputs give a {dtype} output: something upcasts; keep the "
                "computation in the inputs' dtype.").format(dtype=output.dtype)
        if not (output.isfinite().all() and weights.isfinite().all()):
            output32, weights32 = probing.subject.call(inputs, mask, dtype=torch.float32)
            if not (output32.isfinite().all() and weights32.isfinite().all()):
                return Finding(FLOAT16_MASKING, SKIP, _(
                    "float32 gives NaN/inf on the same inputs too, so the cause is not "
                    "float16: see the NaN/inf probe"))
            return _(
                "NaN or inf in float16 with a causal mask: the fill value overflowed float16 "
                "(largest magnitude 65504). Fill with float('-inf') or "
                "torch.finfo(scores.dtype).min.")
        return None

    return probing.over_layouts(FLOAT16_MASKING, check, _(
        "masking works in float16 and the output stays float16"))
