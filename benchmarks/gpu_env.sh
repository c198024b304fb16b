# Sourced by the benchmarks/gpu_*.sh scripts on a GPU machine that reaches no package registry: installs
# the wheels carried in .whl/ (DeepSpeed, transformers and their dependencies missing there; the list is in
# results/gpu/README.md) into /tmp/site, puts them and this repository on PYTHONPATH, and prints the device
# and the versions that will run.
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_env: the carried wheels did not install"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" HF_HUB_OFFLINE=1 DS_ACCELERATOR=cuda PYTHONUNBUFFERED=1
export TORCH_CUDA_ARCH_LIST=9.0a
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader || true
python3 -c "import sys, torch, deepspeed, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
