#!/usr/bin/env bash
# Build, from scratch, the CPU-only venv the vLLM fidelity harness runs in, for one of the
# vLLM releases the harness and kvbudget model (0.33.0, the default, 0.34.0 or 0.29.0):
#
#   bash benchmarks/fidelity/setup_vllm_venv.sh [VENV_DIR [VLLM_VERSION]]
#       (defaults /work/vllm-venv and 0.33.0; e.g. /work/vllm-old-venv 0.29.0,
#       /work/vllm34-venv 0.34.0)
#   VENV_DIR/bin/python benchmarks/fidelity/vllm_fidelity.py --cases quick
#
# * torch 2.13.0, CPU build (pinned: an unpinned torch is a multi-GB CUDA download; on
#   this workplace's machines pip's find-links holds torch-2.13.0+cpu, which satisfies
#   ==2.13.0 and wins over the CUDA wheel). vLLM 0.29.0 asks for exactly torch 2.13.0;
#   0.33.0 and 0.34.0 ask for 2.14.0, which their KV sizing code does not need. Afterwards `pip check`
#   lists only that torch pin (0.33.0), xgrammar's triton, kvbudget's typer<0.29 (typer
#   0.29.2 is the one release pip's index holds here) and the GPU/serving packages
#   deliberately not installed.
# * vLLM VLLM_VERSION with --no-deps: none of its CUDA kernels, flashinfer, triton, ...
# * then exactly the packages that importing vLLM's KV-cache planning, its attention /
#   Mamba layer classes and the Nemotron-H / Qwen3-Next model classes asks for, pinned,
#   each with --no-deps so nothing else (triton, CUDA wheels) is pulled in. Most are pure
#   Python; the rest are CPU-only binary wheels (numpy, pydantic-core, regex, msgspec,
#   pyzmq, aiohttp & co, uvloop, pillow, tokenizers, safetensors, hf-xet, llguidance,
#   apache-tvm-ffi, xgrammar, ...). xgrammar's own requirement on triton is left out
#   (it imports without it). The releases need the same pins but one: the harmony
#   package for gpt-oss (0.33.0 and 0.34.0: oss-harmony 0.0.11; 0.29.0: openai-harmony
#   0.0.8, which 0.33.0 replaced; both install the module openai_harmony). 0.34.0's
#   requirements (transformers <5.23, the same xgrammar, compressed-tensors and
#   apache-tvm-ffi) are met by the same list.
# * kvbudget from this checkout, editable, with --no-deps, plus its runtime dependencies
#   from pyproject.toml (rich, typer; pinned in the list below).
set -euo pipefail

VENV=${1:-/work/vllm-venv}
VLLM_VERSION=${2:-0.33.0}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-python3}

# the pins that differ between the releases
case "$VLLM_VERSION" in
0.34.0 | 0.33.0) harmony="oss-harmony==0.0.11" ;;
0.29.0) harmony="openai-harmony==0.0.8" ;;
*)
    echo "setup_vllm_venv.sh: vLLM $VLLM_VERSION is not one the harness runs against" \
        "(0.34.0, 0.33.0, 0.29.0)" >&2
    exit 2
    ;;
esac

"$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"

# Keep every later install from replacing the CPU torch.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" >"$constraints"
export PIP_CONSTRAINT="$constraints"

"$PIP" install torch==2.13.0
"$PIP" install --no-deps "vllm==$VLLM_VERSION" "$harmony"

"$PIP" install --no-deps -r /dev/stdin <<'EOF'
# what importing vLLM's KV cache planning (0.33.0: vllm.v1.core.kv_cache_planning;
# 0.29.0: vllm.v1.core.kv_cache_utils) and friends asks for, in both releases
packaging==26.4
numpy==2.4.6
regex==2026.11.19
pydantic==2.14.4
pydantic_core==2.50.5
annotated-types==0.8.0
typing-inspection==0.4.5
cbor2==6.3.0
psutil==7.2.2
pyzmq==27.3.0
transformers==5.20.2
huggingface_hub==2.4.0
tokenizers==0.23.3
safetensors==0.8.0
hf-xet==1.8.0
httpx2==2.16.2
httpcore2==2.16.2
h11==0.16.0
anyio==4.16.0
sniffio==1.3.1
idna==3.20
truststore==0.10.5
PyYAML==6.0.4
tqdm==4.70.1
aiohttp==3.14.5
aiohappyeyeballs==2.7.1
aiosignal==1.4.0
attrs==26.1.0
frozenlist==1.8.0
multidict==7.2.1
propcache==0.5.4
yarl==1.25.1
requests==2.34.2
urllib3==2.8.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
openai==3.57.0
jiter==0.19.0
pillow==13.0.0
pybase64==1.5.1
cachetools==8.0.2
msgspec==0.23.0
cloudpickle==3.1.3
uvloop==0.23.0
py-cpuinfo==9.0.0
prometheus_client==0.26.0
xgrammar==0.2.8
apache-tvm-ffi==0.1.11
fastapi==0.136.3
starlette==1.10.0
annotated-doc==0.0.7
opentelemetry-api==1.45.2
partial-json-parser==0.2.1.1.post7
llguidance==1.7.6
einops==0.8.2
compressed-tensors==0.17.0
loguru==0.7.3
# kvbudget's runtime dependencies (pyproject.toml: rich>=13, typer>=0.12) and theirs
rich==15.0.0
markdown-it-py==4.3.0
mdurl==0.1.2
Pygments==2.21.0
typer==0.29.2
click==8.5.1
shellingham==1.5.4
EOF

"$PIP" install --no-deps -e "$REPO"

# Smoke test: the modules the harness drives (the release-dependent ones through its own
# adapters), and kvbudget.
"$VENV/bin/python" - "$REPO/benchmarks/fidelity/vllm_fidelity.py" "$VLLM_VERSION" <<'EOF'
import importlib.util
import os
import sys

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
import vllm.v1.kv_cache_interface
import vllm.v1.core.kv_cache_utils
import vllm.v1.worker.gpu.attn_utils
import vllm.model_executor.models.nemotron_h
import vllm.model_executor.models.qwen3_next
import vllm.v1.attention.backends.flash_attn
import vllm.v1.attention.backends.mla.triton_mla
import kvbudget
import torch

spec = importlib.util.spec_from_file_location("vllm_fidelity", sys.argv[1])
harness = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)
planning = harness._planning().__name__
backend = harness._mm_prefix_backend()[1]
assert vllm.__version__ == sys.argv[2], (vllm.__version__, sys.argv[2])
print(
    f"ok: vllm {vllm.__version__} (planning in {planning}, mm-prefix backend {backend}), "
    f"torch {torch.__version__}, kvbudget {kvbudget.__version__} "
    f"({os.path.dirname(kvbudget.__file__)})"
)
EOF
