#!/usr/bin/env bash
# Build, from scratch, the CPU-only venv the SGLang fidelity harness runs in:
#
#   bash benchmarks/fidelity/sglang/setup_sglang_venv.sh [VENV_DIR [SGLANG_WHEEL_OR_VERSION]]
#       (defaults /work/sglang-venv and sglang==0.5.23)
#   VENV_DIR/bin/python benchmarks/fidelity/sglang/sglang_fidelity.py [--cases all]
#
# * torch 2.13.0, CPU build (pinned: on this workplace's machines pip's find-links holds
#   torch-2.13.0+cpu; SGLang 0.5.23 asks for torch 2.14.1, which its sizing code does not
#   need).
# * sglang with --no-deps: none of its CUDA kernels (sglang-kernel, flashinfer, deep-gemm,
#   flash-mla, cutlass), no triton, no torchvision: the harness installs SGLang's own
#   triton stand-in and a torchvision stand-in (benchmarks/fidelity/sglang/_sglang_stubs.py).
# * then exactly the packages importing SGLang's ServerArgs, ModelConfig and
#   KVCacheConfigurator asks for, pinned, each with --no-deps (SGLang's own pins where it
#   has one: transformers 5.19.0, tokenizers 0.23.2, compressed-tensors 0.18.0,
#   apache-tvm-ffi 0.1.11; pip check then lists only the packages deliberately left out).
# * kvbudget from this checkout, editable, --no-deps, plus rich and typer.
set -euo pipefail

VENV=${1:-/work/sglang-venv}
SGLANG=${2:-sglang==0.5.23}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
PYTHON=${PYTHON:-python3}

"$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" >"$constraints"
export PIP_CONSTRAINT="$constraints"

"$PIP" install torch==2.13.0
"$PIP" install --no-deps "$SGLANG"

"$PIP" install --no-deps -r /dev/stdin <<'PINS'
# what importing sglang.srt.server_args, sglang.srt.configs.model_config and
# sglang.srt.mem_cache.kv_cache_configurator asks for
packaging==26.4
numpy==2.4.6
regex==2026.11.19
pydantic==2.14.4
pydantic_core==2.50.5
annotated-types==0.8.0
typing-inspection==0.4.5
psutil==7.2.2
transformers==5.19.0
huggingface_hub==2.4.0
tokenizers==0.23.2
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
requests==2.34.2
urllib3==2.8.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
einops==0.8.2
orjson==3.13.0
pybase64==1.5.1
pillow==13.0.0
starlette==1.10.0
msgspec==0.23.0
pyzmq==27.3.0
ipython==9.18.1
traitlets==5.16.1
aiohttp==3.14.5
multidict==7.2.1
attrs==26.1.0
yarl==1.25.1
propcache==0.5.4
aiohappyeyeballs==2.7.1
aiosignal==1.4.0
frozenlist==1.8.0
dill==0.4.1
sentencepiece==0.2.3
apache-tvm-ffi==0.1.11
compressed-tensors==0.18.0
loguru==0.7.3
gguf==0.19.0
# DeepSeek-V4's EAGLE (MTP) draft config: configs/model_config.py _config_draft_model
# imports speculative/dflash_utils.py, which reaches entrypoints/openai/protocol.py
# (openai, SGLang's pin) and function_call/base_format_detector.py (partial_json_parser)
openai==2.8.0
httpx==0.28.1
httpcore==1.0.9
distro==1.9.0
jiter==0.19.0
partial_json_parser==0.2.1.1.post7
# kvbudget's runtime dependencies (pyproject.toml: rich>=13, typer>=0.12) and theirs
rich==15.0.0
markdown-it-py==4.3.0
mdurl==0.1.2
Pygments==2.21.0
typer==0.29.2
click==8.5.1
shellingham==1.5.4
PINS

"$PIP" install --no-deps -e "$REPO"

# Smoke test: the stand-ins, SGLang's sizing modules, kvbudget.
"$VENV/bin/python" - "$REPO/benchmarks/fidelity/sglang" <<'PY'
import sys

sys.path.insert(0, sys.argv[1])
import _sglang_stubs

platform = _sglang_stubs.install()
import sglang
import sglang.srt.configs.model_config
import sglang.srt.mem_cache.kv_cache_configurator
import sglang.srt.server_args
import torch

import kvbudget

print(
    f"ok: sglang {sglang.__version__} on {type(platform).__name__}, torch {torch.__version__}, "
    f"kvbudget {kvbudget.__version__}"
)
PY
