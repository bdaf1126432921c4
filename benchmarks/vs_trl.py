"""Our GRPO step against TRL's ``GRPOTrainer`` on identical work, interleaved in one process.

Both sides get the same warm-started tiny model (two copies of the same
weights), the same tokenizer, the quickstart task (3-digit addition; TRL's
reward function wraps our task's verifier), B prompts x G
completions, at most 48 new tokens, temperature 1.0, top-k and top-p off, no KL
(beta 0, no reference model), one AdamW step per batch (our lr, constant,
weight decay 0, grad-norm clip 1.0), clip 0.2, std-normalised group advantages
and the per-sequence mean loss (ours ``loss.init_args.loss_agg: seq_mean`` = TRL's
``loss_type="grpo"``); with one epoch neither side runs an old-log-prob pass,
except ours with an engine that reports its own log-probs (``FastEngine``),
whose TIS correction needs the trainer's log-probs of the sampled tokens.
TRL is set up as ``design/CALIBRATION.md`` says for CPU (``use_cpu``, no
bf16, no gradient checkpointing, batch size counted in completions).

Our side is built once per ``--engines`` entry from ``configs/engine/<engine>.yaml``
(``hf``: ``HFGenerateEngine``, ``fast``: ``FastEngine``), i.e. the module's own
``engine`` argument, so the figure is what a user of that YAML gets; every
variant and TRL take turns in the same run. Ours runs through ``trainer.fit``
(``benchmarks/step_time.py``'s harness); TRL
through ``trainer.train()``. A step is timed from the framework's step-begin
hook to its step-end hook (Lightning ``on_train_batch_start/end``; HF
``on_step_begin/end``: generation, reward, loss, backward and optimiser step);
each side's ``model.generate`` is also timed, so the table separates
generation from the rest. Rounds alternate ``--steps`` steps of each side
(the order rotates); the first ``--warmup`` rounds are dropped. Model FLOP/s
of generation and of the rest of the step (``benchmarks/flops.py``) are set
against this machine's matmul peak on the model's shapes.

``--profile N`` then runs N more steps of each side under cProfile and writes
the top entries to ``benchmarks/results/vs_trl_profile.md``.

    python benchmarks/vs_trl.py                                                  # ~3 min
    python benchmarks/vs_trl.py --engines fast                                   # ours with FastEngine only
    python benchmarks/vs_trl.py --rounds 2 --steps 1 --batch_size 2 --group_size 4 --out /tmp/bench_smoke

``--policy-config FILE`` takes the policy, LoRA, task, prompt format, lr, batch and token budget from a
run config instead (``configs/quickstart_real.yaml``: SmolLM2-135M-Instruct + LoRA, 8 x 8, 24 tokens);
TRL then trains a copy of the same LoRA-wrapped model on the same rendered (chat-template) prompts.

    python benchmarks/vs_trl.py --policy-config configs/quickstart_real.yaml --rounds 3 --steps 1
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
from pathlib import Path

import common
import flops
import torch

from lightning_rlvr.core.problem import Problem
from lightning_rlvr.tasks.base import safe_check


class GenerateTimer:
    """Wraps ``model.generate`` on one model object: its wall time, and the FLOPs of what it generated.

    The generated rows also fix the update's work (TRL trains on exactly the rows
    it sampled), so the update FLOPs are counted here too.
    """

    def __init__(self, model, eos_id: int, group_size: int) -> None:
        self.total = self.gen_flops = self.update_flops = 0.0
        count = flops.FlopModel.of(model)
        inner = model.generate

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                out = inner(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t
            prompt = kwargs["attention_mask"].sum(-1)  # [N] real prompt tokens
            done = flops.completion_lengths(out[:, kwargs["input_ids"].shape[1] :], eos_id)  # [N]
            self.gen_flops += count.generation(prompt, done)
            group = torch.arange(len(done)) // group_size  # TRL repeats each prompt G times in a row
            self.update_flops += count.update_needed(prompt, done, group)
            return out

        model.generate = timed


def build_trl(model, module, problems: list[Problem], args, out_dir: str):
    """A ``GRPOTrainer`` doing the same work as our GRPO step: ``model`` (a copy of ours, LoRA-wrapped
    when ours is), the prompts as our module renders them (its chat template, if any), our lr."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer, task = module.tokenizer, module.task
    render = module.render or (lambda text: text)
    prompts = [render(p.prompt) for p in problems]
    by_prompt = dict(zip(prompts, problems))

    def addition_reward(prompts, completions, **kwargs) -> list[float]:
        return [safe_check(task, c, by_prompt[p])[0].reward for p, c in zip(prompts, completions)]

    rows = args.batch_size * args.group_size
    micro = args.trl_micro_batch or rows
    if rows % micro:
        raise SystemExit(f"--trl_micro_batch {micro} must divide B x G = {rows}")
    config = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        # counts completions; one generation of all B x G, trained in micro-batches of --trl_micro_batch
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=rows // micro,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        learning_rate=module.lr,
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
    dataset = Dataset.from_dict({"prompt": prompts})
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
            self._t = time.perf_counter()
            self._g = (gen_timer.total, gen_timer.gen_flops, gen_timer.update_flops)

        def on_step_end(self, *a, **k) -> None:
            gen, gen_flops, update_flops = (
                now - then
                for now, then in zip((gen_timer.total, gen_timer.gen_flops, gen_timer.update_flops), self._g)
            )
            self.steps.append(
                {
                    "step_s": time.perf_counter() - self._t,
                    "generate_s": gen,
                    "gen_flops": gen_flops,
                    "update_flops": update_flops,
                }
            )

    gen_timer = GenerateTimer(model, tokenizer.eos_token_id, args.group_size)
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


ENGINES = {"hf": "HFGenerateEngine", "fast": "FastEngine"}
TARGETS = {"hf": 0.9, "fast": 0.6}  # ours / TRL step time, issue 16


def build_ours(engine: str, args, weights: dict | None):
    """Our GRPO module with ``configs/engine/<engine>.yaml``: the engine a user gets from that YAML."""
    cli = common.build_cli(
        "grpo",
        extra_configs=[f"configs/engine/{engine}.yaml"],
        overrides=common.batch_overrides(args),
        workdir=f"/tmp/lrlvr_bench/{engine}",
        base=args.policy_config,
    )
    module = cli.model
    if type(module.engine).__name__ != ENGINES[engine]:
        raise SystemExit(f"configs/engine/{engine}.yaml built {type(module.engine).__name__}")
    if weights is None:  # the first module warm-starts (from the cache); the others copy its weights
        common.ready_policy(module)
    else:
        module.configure_model()  # LoRA, if the config asks for it, before the weights are copied in
        module.model.load_state_dict(weights)
        module.warm_start_summary = {"copied": True}  # setup() must not warm-start again
    return cli


def rates(steps: list[dict[str, float]], gen_key: str) -> tuple[float, float]:
    """Median generation and update FLOP/s of a side's steps (update: over step minus generation)."""
    gen = common.median([s["gen_flops"] / s[gen_key] for s in steps])
    upd = common.median([s["update_flops"] / (s["step_s"] - s[gen_key]) for s in steps])
    return gen, upd


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--steps", type=int, default=3, help="steps of each side per round (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="leading rounds left out (default 1)")
    parser.add_argument(
        "--batch_size", type=int, default=None, help="prompts per step B (default 16, or the config's)"
    )
    parser.add_argument(
        "--group_size", type=int, default=None, help="completions per prompt G (default 8, or the config's)"
    )
    parser.add_argument(
        "--max_new_tokens", type=int, default=None, help="completion budget (default 48, or the config's)"
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["hf", "fast"],
        choices=list(ENGINES),
        help="our side's rollout engine(s), each a module built with configs/engine/<engine>.yaml; "
        "all of them take turns with TRL in the same run (default: hf fast)",
    )
    parser.add_argument(
        "--profile", type=int, default=0, help="steps of each side to profile after (default 0)"
    )
    parser.add_argument(
        "--trl_micro_batch",
        type=int,
        default=None,
        help="completions per TRL forward (gradient accumulation over the step's one generation; default "
        "all B x G in one: TRL holds [rows, prompt + completion, vocab] logits, 14 GB on SmolLM2 at 64 rows)",
    )
    common.add_policy_config_arg(parser)
    common.add_common_args(parser)
    args = parser.parse_args()
    common.tiny_batch_defaults(args)
    common.set_threads(args.threads)
    if args.rounds <= args.warmup:
        parser.error("--rounds must exceed --warmup")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    started, load_start = time.time(), common.load_average()

    ours, recorders, weights = {}, {}, None
    for engine in dict.fromkeys(args.engines):
        ours[engine] = build_ours(engine, args, weights)
        common.adopt_batch(args, ours[engine])
        weights = weights or ours[engine].model.model.state_dict()
        recorders[engine] = common.StepRecorder(flops.FlopMeter(ours[engine].model))
    module = next(iter(ours.values())).model
    trl_model = copy.deepcopy(module.model)  # the same weights again
    n_prompts = args.batch_size * args.steps * args.rounds + args.batch_size * args.profile
    problems = [module.task.train_problem(i) for i in range(n_prompts)]
    out_dir = "/tmp/lrlvr_bench/trl"
    trl, trl_timer = build_trl(trl_model, module, problems, args, out_dir)

    def run_trl(steps: int = args.steps) -> list[dict[str, float]]:
        start = len(trl_timer.steps)
        trl.args.max_steps = steps
        trl.train()
        return trl_timer.steps[start:]

    def run_ours(engine: str, steps: int = args.steps) -> list[dict[str, float]]:
        return common.fit_steps(ours[engine], recorders[engine], steps)

    runners = {f"ours-{e}": (lambda e=e: run_ours(e)) for e in ours}
    results = common.interleave({**runners, "trl": run_trl}, args.rounds)
    kept = {name: [s for r in res[args.warmup :] for s in r] for name, res in results.items()}

    # the machine's matmul peak on the model's shapes: decode rows (generation) and token rows (update)
    from lightning_rlvr.collect.single_turn import encode_prompts

    rows_gen = args.batch_size * args.group_size
    width = encode_prompts(module.tokenizer, problems[: args.batch_size], module.render)[0].shape[1]
    width += args.max_new_tokens
    shapes = flops.FlopModel.of(module.model).shapes
    peak_gen, shape_gen = flops.matmul_peak(shapes, rows_gen)
    peak_upd, shape_upd = flops.matmul_peak(shapes, rows_gen * width)

    params = sum(p.numel() for p in module.model.parameters())
    trained = sum(p.numel() for p in module.model.parameters() if p.requires_grad)
    source = common.policy_source(args)
    model_line = f"{source}, {params:,} parameters of which {trained:,} train, lr {module.lr:g} on both sides"
    rows_all = args.batch_size * args.group_size
    micro = args.trl_micro_batch or rows_all
    trl_micro = f"{rows_all // micro} micro-batches of {micro}"
    trl_micro = "one forward of all rows" if micro == rows_all else trl_micro
    t_steps = kept["trl"]
    t_step = common.median([s["step_s"] for s in t_steps])
    t_gen = common.median([s["generate_s"] for s in t_steps])
    t_rest = common.median([s["step_s"] - s["generate_s"] for s in t_steps])
    t_rates = rates(t_steps, "generate_s")

    def row(label, steps, step, gen, rest, score, r: tuple[float, float], x: str) -> list:
        return [
            label,
            steps,
            common.fmt(step),
            x,
            common.fmt(gen),
            common.fmt(rest),
            common.fmt(score),
            f"{r[0] / 1e9:.2f} ({r[0] / peak_gen:.2f})",
            f"{r[1] / 1e9:.2f} ({r[1] / peak_upd:.2f})",
        ]

    rows, verdicts, per_round_lines, summary = [], [], [], {}
    for engine in ours:
        o = kept[f"ours-{engine}"]
        o_step = common.median([s["step_s"] for s in o])
        o_gen = common.median([s["time/rollout_s"] for s in o])
        o_rest = common.median([s["step_s"] - s["time/rollout_s"] for s in o])
        o_score = common.median([s["time/score_s"] for s in o])
        o_rates = rates(o, "time/rollout_s")
        ratio = o_step / t_step
        summary[engine] = (ratio, o_rates)
        label = f"lightning_rlvr GRPO, `{ENGINES[engine]}`"
        rows.append(row(label, len(o), o_step, o_gen, o_rest, o_score, o_rates, common.fmt(ratio, 2)))
        per_round = [
            common.median([s["step_s"] for s in a]) / common.median([s["step_s"] for s in b])
            for a, b in zip(results[f"ours-{engine}"][args.warmup :], results["trl"][args.warmup :])
        ]
        per_round_lines.append(
            f"- `{ENGINES[engine]}` / TRL: "
            + ", ".join(common.fmt(r, 2) for r in per_round)
            + f"; median {common.fmt(common.median(per_round), 2)}; by phase (medians): generation "
            f"{common.fmt(o_gen / t_gen, 2)}x, rest {common.fmt(o_rest / t_rest, 2)}x"
        )
        target = TARGETS[engine]
        verdicts.append(
            f"- with `{ENGINES[engine]}`: ours <= {target}x TRL: "
            f"{'met' if ratio <= target else 'missed'} ({common.fmt(ratio, 2)}x)"
        )
    rows.append(row("TRL GRPOTrainer", len(t_steps), t_step, t_gen, t_rest, None, t_rates, "1.00"))
    lines = [
        flops.rate_line(f"generation, ours `{ENGINES[e]}`", r[0], peak_gen) for e, (_, r) in summary.items()
    ]
    lines.append(flops.rate_line("generation, TRL", t_rates[0], peak_gen))
    lines += [
        flops.rate_line(f"update, ours `{ENGINES[e]}`", r[1], peak_upd) for e, (_, r) in summary.items()
    ]
    lines.append(flops.rate_line("update, TRL", t_rates[1], peak_upd))
    body = "\n".join(
        [
            f"Model: {model_line}. "
            f"Work per step: {args.batch_size} prompts x {args.group_size} completions, at most "
            f"{args.max_new_tokens} new tokens, one update (TRL: {trl_micro}). Our side once per engine "
            f"(`configs/engine/<engine>.yaml`, the module's own `engine`), every side taking turns in the "
            f"same run: {args.rounds} rounds x {args.steps} steps per side, first {args.warmup} round(s) "
            "dropped; medians. `generate s` is the wall time of generation (ours: the module's "
            "`time/rollout_s`, which also covers prompt tokenisation and decoding; TRL: its "
            "`model.generate` call); `rest s` is step minus generation (reward, loss, backward, optimiser, "
            "logging); ours' `score s` (in `rest s`) is the verifier plus, when the engine reports its own "
            "log-probs (`FastEngine`), the no-grad log-prob pass TIS compares them with. "
            "Model GFLOP/s (in brackets: share of the matmul peak) counts "
            "2 W + 4 L A c per generated token that sees c keys, over generation time, and "
            "4 W + 2 W_t + 12 L A i per trained token at causal position i, over `rest s`, counting what "
            "the update needs on both sides: each group's prompt once and the LM head only where a logit "
            "trains (completion positions); W = weights of every Linear (LM head included), W_t = those "
            "that train (all of W; with LoRA the adapters'), L layers, A = heads x head dim "
            "(`benchmarks/flops.py`, `update_needed`).",
            "",
            common.md_table(
                [
                    "framework",
                    "steps",
                    "step s",
                    "x TRL",
                    "generate s",
                    "rest s",
                    "of which score s",
                    "generation GFLOP/s",
                    "update GFLOP/s",
                ],
                rows,
            ),
            "",
            "Per-round ratio of median step times (ours / TRL), and the two phases' ratio:",
            *per_round_lines,
            "",
            f"Matmul peak on this machine, {torch.get_num_threads()} thread(s), best `torch.matmul` over the "
            f"model's Linear shapes: {peak_gen / 1e9:.1f} GFLOP/s with the decode batch's rows (at "
            f"{shape_gen}), {peak_upd / 1e9:.1f} GFLOP/s with the update's token rows (at {shape_upd}).",
            "",
            *(f"- {line}" for line in lines),
            "",
            "Targets (issue 16):",
            *verdicts,
        ]
    )
    name = f"vs_trl_{Path(args.policy_config).stem}" if args.policy_config else "vs_trl"
    common.write_result(name, "Against TRL's GRPOTrainer", body, started, load_start, args.out)

    if args.profile:
        blocks = [
            profile_block(
                f"lightning_rlvr with `{ENGINES[e]}`, {args.profile} steps",
                lambda e=e: run_ours(e, args.profile),
                15,
            )
            for e in ours
        ]
        blocks.append(profile_block(f"TRL, {args.profile} steps", lambda: run_trl(args.profile), 15))
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
