"""The CUDA architecture list DeepSpeed's JIT-built ops read, made readable for them: what both the trainer's
process setup and the model's DeepSpeed kernel tower call before building an op (so that the model does not
import the launcher's setup)."""

from __future__ import annotations

import os
import re


def cuda_arch_list_for_deepspeed() -> None:
    """Drop arch-specific suffixes ("9.0a" -> "9.0") from TORCH_CUDA_ARCH_LIST.

    Why: DeepSpeed 0.19.8's op builder reads each entry as numbers, and images that set "9.0a" (Hopper's
    arch-specific target) make every JIT-built op (FusedAdam, the transformer kernel) fail with
    "invalid literal for int() with base 10: '0a'" (seen on the reference H100)."""
    value = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if value:
        os.environ["TORCH_CUDA_ARCH_LIST"] = re.sub(r"(\d+\.\d+)[af](?=$|[+;\s])", r"\1", value)
