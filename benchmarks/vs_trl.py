"""Our GRPO step against TRL's ``GRPOTrainer`` on identical work, interleaved in one process.

Both sides get the same warm-started tiny model (two copies of the same
weights), the same tokenizer, the quickstart task (3-digit addition; TRL's
reward function wraps our ``AdditionTask`` verifier), B prompts x G
completions, at most 48 new tokens, temperature 1.0, top-k and top-p off, no KL
(beta 0, no reference model), one AdamW step per batch (lr 5e-5 constant,
weight decay 0, grad-norm clip 1.0), clip 0.2, std-normalised group advantages
and the per-sequence mean loss (ours ``loss.init_args.loss_agg: seq_mean`` = TRL's
``loss_type="grpo"``); with one epoch neither side runs an old-log-prob pass.
TRL is set up as ``design/CALIBRATION.md`` says for CPU (``use_cpu``, no
bf16, no gradient checkpointing, batch size counted in completions).

Ours runs through ``trainer.fit`` (``benchmarks/step_time.py``'s harness); TRL
through ``trainer.train()``. A step is timed from the framework's step-begin
hook to its step-end hook (Lightning ``on_train_batch_start/end``; HF
``on_step_begin/end``: generation, reward, loss, backward and optimiser step);
each side's ``model.generate`` is also timed, so the table separates
generation from the rest. Rounds alternate ``--steps`` steps of each side
(the order rotates); the first ``--warmup`` rounds are dropped.

``--profile N`` then runs N more steps of each side under cProfile and writes
the top entries to ``benchmarks/results/vs_trl_profile.md``.

    python benchmarks/vs_trl.py                                                  # ~2 min
    python benchmarks/vs_trl.py --rounds 2 --steps 1 --batch_size 2 --group_size 4 --out /tmp/bench_smoke
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import logging
import pstats
import re
import time

import common

from lightning_rlvr.tasks.base import Problem, safe_check


class GenerateTimer:
    """Wraps ``model.generate`` on one model object and sums its wall time."""

    def __init__(self, model) -> None:
        self.total = 0.0
        inner = model.generate

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t

        model.generate = timed


def build_trl(model, tokenizer, task, problems: list[Problem], args, out_dir: str):
    """A ``GRPOTrainer`` doing the same work as our quickstart GRPO step."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    by_prompt = {p.prompt: p for p in problems}

    def addition_reward(prompts, completions, **kwargs) -> list[float]:
        return [safe_check(task, c, by_prompt[p])[0].reward for p, c in zip(prompts, completions)]

    config = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=args.batch_size * args.group_size,  # counts completions
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        learning_rate=5e-5,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",  # ours: torch.optim.AdamW with its defaults
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="grpo",  # per-sequence token mean, then batch mean = our seq_mean
        scale_rewards="group",
        shuffle_dataset=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,  # ours logs every step too
        disable_tqdm=True,
        seed=0,
        max_steps=args.steps,
    )
    dataset = Dataset.from_dict({"prompt": [p.prompt for p in problems]})
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=addition_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
    )

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.steps: list[dict[str, float]] = []

        def on_step_begin(self, *a, **k) -> None:
            self._t, self._g = time.perf_counter(), gen_timer.total

        def on_step_end(self, *a, **k) -> None:
            gen = gen_timer.total - self._g
            self.steps.append({"step_s": time.perf_counter() - self._t, "generate_s": gen})

    gen_timer = GenerateTimer(model)
    timer = StepTimer()
    trainer.add_callback(timer)
    return trainer, timer


# In the cumulative listing, only frames that say where a step's time goes (not Lightning/HF wrappers).
WHERE = (
    r"lightning_rlvr/|trl/trainer/grpo_trainer|generation/utils.py.*\(generate\)|_tensor.py.*\(backward\)"
    r"|torch/optim/.*\(step\)|apply_func|clip_grad|reward|_calculate|/scoring|rewards"
)


def profile_block(label: str, fn, top: int) -> str:
    """cProfile of ``fn()``: the top entries by own time, and where the time goes (cumulative)."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    lines = []
    for key, restrict in (("tottime", (top,)), ("cumulative", (WHERE, top))):
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        if key == "tottime":
            stats.strip_dirs()
        stats.sort_stats(key).print_stats(*restrict)
        text = buf.getvalue()
        body = text[text.index("ncalls") :] if "ncalls" in text else text
        body = re.sub(r"/[^ ]*/site-packages/", "", body).replace(str(common.REPO) + "/", "")
        what = "own time" if key == "tottime" else "cumulative time, step-level frames only"
        lines += [f"#### {label}: top {top} by {what}", "", "```", body.rstrip(), "```", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--steps", type=int, default=3, help="steps of each side per round (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="leading rounds left out (default 1)")
    parser.add_argument("--batch_size", type=int, default=16, help="prompts per step B (default 16)")
    parser.add_argument("--group_size", type=int, default=8, help="completions per prompt G (default 8)")
    parser.add_argument("--max_new_tokens", type=int, default=48, help="completion budget (default 48)")
    parser.add_argument(
        "--profile", type=int, default=0, help="steps of each side to profile after (default 0)"
    )
    common.add_common_args(parser)
    args = parser.parse_args()
    common.set_threads(args.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    started, load_start = time.time(), common.load_average()

    ours = common.build_cli(
        "grpo",
        overrides=[
            "--data.batch_size", str(args.batch_size),
            "--model.group_size", str(args.group_size),
            "--model.max_new_tokens", str(args.max_new_tokens),
        ],
    )  # fmt: skip
    module = ours.model
    module.warm_start_summary = module.warm_start.run(
        module.model, module.tokenizer, module.policy_source, module.task
    )  # the weights both sides start from
    trl_model = copy.deepcopy(module.model)
    n_prompts = args.batch_size * args.steps * args.rounds + args.batch_size * args.profile
    problems = [module.task.train_problem(i) for i in range(n_prompts)]
    out_dir = "/tmp/lrlvr_bench/trl"
    trl, trl_timer = build_trl(trl_model, module.tokenizer, module.task, problems, args, out_dir)
    recorder = common.StepRecorder()

    def run_trl(steps: int = args.steps) -> list[dict[str, float]]:
        start = len(trl_timer.steps)
        trl.args.max_steps = steps
        trl.train()
        return trl_timer.steps[start:]

    def run_ours(steps: int = args.steps) -> list[dict[str, float]]:
        return common.fit_steps(ours, recorder, steps)

    results = common.interleave({"ours": run_ours, "trl": run_trl}, args.rounds)
    ours_steps = [s for r in results["ours"][args.warmup :] for s in r]
    trl_steps = [s for r in results["trl"][args.warmup :] for s in r]
    o_step, t_step = (
        common.median([s["step_s"] for s in ours_steps]),
        common.median([s["step_s"] for s in trl_steps]),
    )
    o_gen = common.median([s["time/rollout_s"] for s in ours_steps])
    t_gen = common.median([s["generate_s"] for s in trl_steps])
    o_rest = common.median([s["step_s"] - s["time/rollout_s"] for s in ours_steps])
    t_rest = common.median([s["step_s"] - s["generate_s"] for s in trl_steps])
    per_round = [
        common.median([s["step_s"] for s in o]) / common.median([s["step_s"] for s in t])
        for o, t in zip(results["ours"][args.warmup :], results["trl"][args.warmup :])
    ]
    rows = [
        ["lightning_rlvr (GRPO)", len(ours_steps), common.fmt(o_step), common.fmt(o_gen), common.fmt(o_rest)],
        ["TRL GRPOTrainer", len(trl_steps), common.fmt(t_step), common.fmt(t_gen), common.fmt(t_rest)],
        [
            "ours / TRL",
            "",
            common.fmt(o_step / t_step, 2),
            common.fmt(o_gen / t_gen, 2),
            common.fmt(o_rest / t_rest, 2),
        ],
    ]
    body = "\n".join(
        [
            f"Work per step: {args.batch_size} prompts x {args.group_size} completions, at most "
            f"{args.max_new_tokens} new tokens, one update. Interleaved: {args.rounds} rounds x {args.steps} "
            f"steps per side, first {args.warmup} round(s) dropped; medians. `generate s` is the wall time "
            "of the `model.generate` call (ours: the module's `time/rollout_s`, which also covers prompt "
            "tokenisation and decoding); `rest s` is step minus generation.",
            "",
            common.md_table(["framework", "steps", "step s", "generate s", "rest s"], rows),
            "",
            "Per-round ratio of median step times (ours / TRL): "
            + ", ".join(common.fmt(r, 2) for r in per_round)
            + f"; median {common.fmt(common.median(per_round), 2)}.",
            "",
            f"Target: ours <= 0.7x TRL: {'met' if o_step / t_step <= 0.7 else 'missed'} "
            f"({common.fmt(o_step / t_step, 2)}x).",
        ]
    )
    common.write_result("vs_trl", "Against TRL's GRPOTrainer", body, started, load_start, args.out)

    if args.profile:
        blocks = [
            profile_block(f"lightning_rlvr, {args.profile} steps", lambda: run_ours(args.profile), 15),
            profile_block(f"TRL, {args.profile} steps", lambda: run_trl(args.profile), 15),
        ]
        common.write_result(
            "vs_trl_profile",
            "cProfile of our GRPO step and TRL's (same work)",
            "\n".join(blocks),
            started,
            load_start,
            args.out,
        )


if __name__ == "__main__":
    main()
