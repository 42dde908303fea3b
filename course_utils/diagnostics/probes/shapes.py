"""The shapes probe: output (..., n_q, d_v) and weights (..., n_q, n_k), with and without
a heads axis, on inputs where every axis has its own size."""

from __future__ import annotations

import torch

from course_utils.diagnostics.probe_registry import probe
from course_utils.diagnostics.probing import Probing, short_error, sizes_of
from course_utils.diagnostics.report import FAIL, PASS, Finding, probe_name
from course_utils.diagnostics.subjects import SELF, SHAPES_LAYOUTS, WrongReturn
from course_utils.language import _

SHAPES = probe_name("shapes")



@probe(SHAPES, order=10)
def shapes(probing: Probing) -> Finding:
    """Outputs ``(..., n_q, d_v)`` and weights ``(..., n_q, n_k)`` for every layout.

    Used in lesson 08.
    """
    if probing.subject.is_module:
        return _module_shapes(probing)
    generator = probing.generator(1)  # one generator: the layouts draw in turn from it
    without, with_heads = SHAPES_LAYOUTS
    problems = {}
    for layout in SHAPES_LAYOUTS:
        q, k, v = probing.subject.make_inputs(generator, layout, torch.float64)
        sizes = sizes_of((q, k, v))
        try:
            output, weights = probing.subject.call((q, k, v))
        except WrongReturn:
            raise
        except Exception as error:
            problems[layout] = _(
                "on {sizes} it raised {error}").format(
                sizes=sizes, error=short_error(error))
            continue
        expected_out = (*layout.lead, layout.n_q, layout.d_v)
        expected_w = (*layout.lead, layout.n_q, layout.n_k)
        if tuple(weights.shape) != expected_w:
            problems[layout] = _(
                "on {sizes} the weights are {weights_shape}, expected (..., n_q, n_k) = "
                "{expected_w}").format(
                sizes=sizes, weights_shape=tuple(weights.shape), expected_w=expected_w)
        elif tuple(output.shape) != expected_out:
            problems[layout] = _(
                "on {sizes} the output is {output_shape}, expected (..., n_q, d_v) = "
                "{expected_out}").format(
                sizes=sizes, output_shape=tuple(output.shape), expected_out=expected_out)
    if not problems:
        return Finding(SHAPES, PASS, _("output (..., n_q, d_v) and weights (..., n_q, n_k), "
                                       "with and without a heads axis"))
    if list(problems) == [with_heads]:
        return Finding(SHAPES, FAIL, _(
            "works on {without} inputs, but {problems}. Some axis is counted from the front "
            "(like k.transpose(1, 2)), which is the sequence axis only without heads. Count "
            "from the end: k.transpose(-2, -1).").format(
            without=without.label, problems=problems[with_heads]))
    if list(problems) == [without]:
        return Finding(SHAPES, FAIL, _(
            "works with a heads axis, but {problems}. Some axis is counted from the front "
            "(like k.transpose(2, 3) or dim=3), which exists only with heads. Count from the "
            "end: k.transpose(-2, -1), softmax(dim=-1).").format(
            problems=problems[without]))
    return Finding(SHAPES, FAIL, _(
        "{problems}. Follow the shapes: scores = q @ k.transpose(-2, -1) is (..., n_q, n_k), "
        "softmax keeps it, output = weights @ v is (..., n_q, d_v).").format(
        problems=_("; ").join(problems.values())))


def _module_shapes(probing: Probing) -> Finding:
    (x,) = probing.inputs(1, SELF)
    try:
        output, weights = probing.subject.call((x,))
    except WrongReturn:
        raise
    except Exception as error:
        return Finding(SHAPES, FAIL, _(
            "forward(x) with x {x_shape} raised {error}").format(
            x_shape=tuple(x.shape), error=short_error(error)))
    batch, n = SELF.lead[0], SELF.n_k
    if weights.shape[0] != batch or tuple(weights.shape[-2:]) != (n, n):
        return Finding(SHAPES, FAIL, _(
            "for x {x_shape} the weights are {weights_shape}, expected (batch, seq_len, "
            "seq_len) = {expected_shape} (or with a heads axis)").format(
            x_shape=tuple(x.shape), weights_shape=tuple(weights.shape),
            expected_shape=(batch, n, n)))
    if tuple(output.shape[:2]) != (batch, n):
        return Finding(SHAPES, FAIL, _(
            "for x {x_shape} the output is {output_shape}, expected (batch, seq_len, ...) = "
            "{expected_shape}+").format(
            x_shape=tuple(x.shape), output_shape=tuple(output.shape),
            expected_shape=(batch, n)))
    return Finding(SHAPES, PASS, _(
        "x {x_shape} gives output {output_shape} and weights {weights_shape}").format(
        x_shape=tuple(x.shape), output_shape=tuple(output.shape),
        weights_shape=tuple(weights.shape)))
