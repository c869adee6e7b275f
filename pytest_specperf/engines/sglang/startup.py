"""How an SGLang start reads in its log, and how many GPUs it takes.

The log knowledge serves two readers: the diagnosis of a failed start (servers/diagnosis.py), which
must skip SGLang's echo of its own arguments (`server_args=...` contains `nccl` and `timeout` at
every start) and name the first real error after it; and the progress line of a long start, which
shows the last milestone (loading weights, capturing CUDA graphs) instead of whatever scrolled by.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pytest_specperf.engines.base import (
    IMPORT_FAILED,
    MODEL_NOT_FOUND,
    PORT_TAKEN,
    REFUSED_VALUE,
    UNKNOWN_FLAG,
    fatal_startup,
    milestone,
    not_installed,
    startup_failures,
)

# fmt: off
#: Lines that echo the launch: SGLang's `server_args=...` (a dict in 0.5.23, `ServerArgs(...)` before),
#: the launch_server deprecation notice that quotes the command, and `Namespace(...)` dumps.
LAUNCH_ECHO = tuple(re.compile(p) for p in (
    r"\bserver_args=",
    r"^\s*(\[[^\]]*\]\s*)?(ServerArgs|PortArgs|Namespace)\(",
    r"'python -m sglang\.launch_server' is still supported",
    r"Example: sglang serve --model-path",
))

OUT_OF_MEMORY = (
    "GPU out of memory: another process holds GPU memory, or lower --mem-fraction-static / "
    "--max-running-requests / the context length"
)

#: Known causes of a failed SGLang start: (log pattern, one-line diagnosis with the usual fix).
#: The first matching line after the launch echo wins; within one line, the first pattern.
STARTUP_FAILURES = startup_failures(
    UNKNOWN_FLAG,
    (r"error: ambiguous option", "an abbreviated flag matches several SGLang flags (write it in full)"),
    REFUSED_VALUE,
    PORT_TAKEN,
    (r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|Not enough memory|\bOOM\b", OUT_OF_MEMORY),
    (r"\bNCCL (error|WARN)|NCCL\b.{0,80}\b(error|failure|failed|timed out)\b"
     r"|nccl(Internal|System|Unhandled\w*|Invalid\w*)Error|ProcessGroupNCCL",
     "NCCL error: the GPUs of a tensor-parallel group could not talk to each other"),
    (r"CUDA error|cudaError|CUDA driver|no CUDA-capable device|CUDA_ERROR",
     "CUDA error: a driver, device or kernel fault (check nvidia-smi and CUDA_VISIBLE_DEVICES)"),
    (r"RevisionNotFoundError|Invalid rev id|revision .* (is not|not) (found|valid)",
     "model revision not found: check the revision/branch name"),
    (r"GatedRepoError|Access to model .* is restricted|401 Client Error",
     "model access denied: log in to Hugging Face (HF_TOKEN) or accept the model's licence"),
    (r"RepositoryNotFoundError|is not a local folder and is not a valid model identifier|404 Client Error"
     r"|does not appear to have a file named|No such file or directory: .*config\.json|HFValidationError"
     r"|Repo id must be in the form|Incorrect path_or_model_id|Can't load the configuration of"
     r"|model path .* (does not exist|not found)", MODEL_NOT_FOUND),
    (r"contains custom code|pass the argument .?trust_remote_code=True|trust_remote_code=True.? to",
     "the model needs its own code: add --trust-remote-code to `args`"),
    (r"not supported (in|by|with|for) .{0,60}attention backend|attention backend .{0,60}(is )?not supported"
     r"|unsupported attention backend",
     "the attention backend cannot run this server's settings (speculation needs a backend that "
     "supports it): choose another --attention-backend"),
    (r"Unknown speculative algorithm|speculative\S* .*(not supported|unsupported|must be|requires)"
     r"|does not support speculative|(EAGLE|EAGLE3|NGRAM|STANDALONE|DFLASH)\S* (is )?not supported",
     "unsupported speculative setting: check algorithm, draft model and the num_* keys"),
    not_installed("sglang", "SGLang"),
    (IMPORT_FAILED, "a Python import failed: a missing or mismatched package (torch, flashinfer, sgl-kernel)"),
)

#: Lines after which an SGLang start never becomes ready, whether or not the launcher exits: a failed bind
#: (uvicorn's error, after which 0.5.23's launcher waits for ever and ignores SIGTERM), a refused argument,
#: a model that is not there, memory that is not there, a native abort.
FATAL_STARTUP = fatal_startup(
    r"error: unrecognized arguments|error: ambiguous option|error: argument --",
    r"RepositoryNotFoundError|is not a local folder and is not a valid model identifier|HFValidationError",
    r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory",
)

#: Start-up milestones a progress line shows (the newest one), in the order a start passes them; a
#: warning never is one (a Python `UserWarning:` that mentions a download or a compile step).
STARTUP_MILESTONES = tuple(milestone(p) for p in (
    r"Load weight (begin|end)", r"Loading safetensors", r"download", r"DeepGEMM|deep_gemm|JIT compil",
    r"Memory pool end|KV Cache is allocated", r"Capture (cuda|cpu) graph (begin|end)", r"Capturing batches",
    r"Capturing prefill", r"torch\.compile|Compiling", r"Uvicorn running", r"warmup|warm up",
    r"fired up and ready to roll",
))
# fmt: on


def flag_value(args: Sequence[str], *flags: str) -> str | None:
    """The value of the first of `flags` in a launch command (`--flag V` or `--flag=V`)."""
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if name in flags:
            return inline if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def _int(args: Sequence[str], *flags: str, default: int = 1) -> int:
    value = flag_value(args, *flags)
    return int(value) if value is not None and value.isdigit() else default


def gpu_count(args: Sequence[str]) -> int:
    """GPUs an SGLang launch uses in all: tp x pp, times dp for data-parallel replicas.

    DP attention keeps its groups inside the tensor-parallel group (`--attn-dp-size N`, or the
    deprecated `--dp-size N --enable-dp-attention`, which SGLang 0.5.23 turns into
    `attn_dp_size = N, dp_size = 1`): it adds no GPUs.
    """
    tp = _int(args, "--tp-size", "--tensor-parallel-size")
    pp = _int(args, "--pp-size", "--pipeline-parallel-size")
    dp = 1 if "--enable-dp-attention" in args else _int(args, "--dp-size", "--data-parallel-size")
    return tp * pp * dp


def local_gpu_ids(args: Sequence[str]) -> range:
    """Device ids this node's share of the server uses: `--base-gpu-id` onwards, `--gpu-id-step` apart,
    gpu_count / `--nnodes` of them."""
    nodes = max(1, _int(args, "--nnodes"))
    base = _int(args, "--base-gpu-id", default=0)
    step = max(1, _int(args, "--gpu-id-step"))
    count = max(1, gpu_count(args) // nodes)
    return range(base, base + count * step, step)
