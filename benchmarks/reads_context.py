"""Does the policy read a privileged context? Greedy pass@1 with and without the methods' extra text.

SC-GRPO, HSD and OPSD score the policy's own completion under a second prompt that holds a verified
peer's solution or the reference answer; their credit is only as good as that teacher. This probe
measures the teacher directly: on the same prompts, greedy decoding from

    plain       the student's prompt (what validation measures)
    answer      OPSD's (and HSD's answer-only) context: the prompt + "The correct final answer is {a}."
    wrong       the same sentence with a wrong answer (a + 1..9): does the model copy what it is told?
    peer        SC-GRPO's context with a verified-correct sample of the policy's own (G samples at T = 1,
                the first correct one), on the prompts that have one; "plain" is re-read on that subset

Each context is rendered by the run's prompt format exactly as the methods render it (the privileged
text in the user turn, docs/privileged_contexts.md), so the probe needs a model with a prompt format
(a pretrained one; the tiny built-ins use token-level texts and are refused). For every condition
the table gives pass@1 against the true answer, the share of completions whose extracted answer is
the number the context gave (copies), and for the contexts the paired change against plain on the
same prompts (wins / losses, exact sign-test p-value).

    python benchmarks/reads_context.py --policy-config configs/quickstart_real.yaml --prompts 128
    python benchmarks/reads_context.py --ckpt_path runs/.../last.ckpt --label "GRPO, 24 steps"
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import torch
from common import (
    add_common_args,
    add_policy_config_arg,
    build_cli,
    load_average,
    md_table,
    ready_policy,
    set_threads,
    write_result,
)

from lightning_rlvr.core.problem import Problem
from lightning_rlvr.core.progress import Progress
from lightning_rlvr.core.rng import seeded
from lightning_rlvr.credit.hsd import DEFAULT_ANSWER_TEMPLATE
from lightning_rlvr.credit.sc_grpo import DEFAULT_TEMPLATE as PEER_TEMPLATE
from lightning_rlvr.prompts import fill


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test of wins vs losses (ties dropped): P(|W - n/2| >= observed) at p = 1/2."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def generator(module, batch: int, bar: Progress | None = None):
    """``generate(problems, group_size, greedy) -> completions per problem`` for ``module``, ``batch`` prompts
    a rollout; ``bar`` counts the completions."""

    def generate(problems: list[Problem], group_size: int = 1, greedy: bool = True) -> list[list[str]]:
        texts: list[list[str]] = []
        for b in range(0, len(problems), batch):
            rollout = module.rollout(problems[b : b + batch], group_size, greedy=greedy)
            part: list[list[str]] = [[] for _ in problems[b : b + batch]]
            for row in range(rollout.num_rows):
                ids = rollout.completion_tokens(row)
                part[int(rollout.group[row])].append(module.tokenizer.decode(ids, skip_special_tokens=True))
            texts += part
            if bar is not None:
                bar.update(rollout.num_rows)
        return texts

    return generate


def same(a: str | None, b: str) -> bool:
    """Numeric answers compare as numbers ("14.0" = "14"), anything else as stripped text."""
    if a is None:
        return False
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip() == b.strip()


def wrong_answer(answer: str, index: int) -> str:
    """A wrong answer for the control: the true number shifted by 1..9 (fixed by the prompt's index)."""
    try:
        return str(int(float(answer)) + 1 + index % 9)
    except ValueError:
        return answer + " (wrong)"


def probe(generate, extract, problems: list[Problem], samples: int, seed: int) -> list[list]:
    """One table row per condition: name, prompts, pass@1, copies, paired change vs plain.

    ``generate`` is ``generator(module, batch)``'s function; ``extract`` the task's ``extract_answer``.
    """
    with seeded(seed, "reads_context", "plain"), torch.no_grad():
        plain = [c[0] for c in generate(problems)]
    right = [same(extract(c), p.answer) for c, p in zip(plain, problems)]
    rows = [["plain", len(problems), f"{sum(right) / len(problems):.3f}", "-", "-"]]

    def condition(name: str, idx: list[int], prompts: list[str], given: list[str]) -> None:
        ctx = [replace(problems[i], prompt=t) for i, t in zip(idx, prompts)]
        with seeded(seed, "reads_context", name), torch.no_grad():
            outs = [c[0] for c in generate(ctx)]
        ok = [same(extract(c), problems[i].answer) for c, i in zip(outs, idx)]
        copies = sum(same(extract(c), g) for c, g in zip(outs, given))
        base = [right[i] for i in idx]
        wins = sum(o and not b for o, b in zip(ok, base))
        losses = sum(b and not o for o, b in zip(ok, base))
        n = len(idx)
        rows.append(
            [
                name,
                n,
                f"{sum(ok) / max(n, 1):.3f} (plain {sum(base) / max(n, 1):.3f})",
                f"{copies / max(n, 1):.3f}",
                f"+{wins} / -{losses}, p = {sign_test_p(wins, losses):.2g}",
            ]
        )

    every = list(range(len(problems)))
    answers = [p.answer for p in problems]
    condition(
        "answer",
        every,
        [fill(DEFAULT_ANSWER_TEMPLATE, prompt=p.prompt, answer=p.answer) for p in problems],
        answers,
    )
    wrong = [wrong_answer(p.answer, i) for i, p in enumerate(problems)]
    condition(
        "wrong",
        every,
        [fill(DEFAULT_ANSWER_TEMPLATE, prompt=p.prompt, answer=w) for p, w in zip(problems, wrong)],
        wrong,
    )
    with seeded(seed, "reads_context", "peers"), torch.no_grad():
        sampled = generate(problems, samples, False)
    idx, peers = [], []
    for i, (group, p) in enumerate(zip(sampled, problems)):
        good = next((c for c in group if same(extract(c), p.answer)), None)
        if good is not None:
            idx.append(i)
            peers.append(fill(PEER_TEMPLATE, prompt=p.prompt, reference=good.strip()))
    condition("peer", idx, peers, [problems[i].answer for i in idx])
    return rows


def opsd_divergences(module, problems: list[Problem], samples: int, seed: int):
    """OPSD's per-token divergence KL(student || teacher) on the student's own samples (T = 1).

    Returns per completion: the divergence [L], whether each token's text holds a digit, and whether the
    completion is correct. Teacher = the same model with OPSD's default context, rendered as OPSD renders it.
    """
    from lightning_rlvr.credit.opsd import reverse_kl

    with seeded(seed, "reads_context", "opsd"), torch.no_grad():
        rollout = module.rollout(problems, samples)
    tok, out = module.tokenizer, []
    for row in range(rollout.num_rows):
        completion = rollout.completion_tokens(row)  # [L]
        if completion.numel() == 0:
            continue
        problem = rollout.problems[int(rollout.group[row])]
        teacher_text = module.render(
            fill(DEFAULT_ANSWER_TEMPLATE, prompt=problem.prompt, answer=problem.answer)
        )
        teacher_ctx = torch.tensor(tok(teacher_text, add_special_tokens=False)["input_ids"])
        logps = []
        for ctx in (rollout.prompt_tokens(row), teacher_ctx):
            ids = torch.cat([ctx.cpu(), completion.cpu()])[None]  # [1, P + L]
            with torch.no_grad():
                logits = module.model(input_ids=ids).logits[0, len(ctx) - 1 : -1].float()  # [L, V]
            logps.append(torch.log_softmax(logits, -1))
        digits = [any(c.isdigit() for c in tok.decode([int(t)])) for t in completion]
        out.append((reverse_kl(logps[0], logps[1]), digits, bool(rollout.correct[row])))
    return out


def where_divergence_falls(divergences) -> list[list]:
    """Table rows: for correct, wrong and all completions, the mean divergence on tokens with a digit and
    on the others, and the digit tokens' share of the tokens and of the summed divergence."""
    rows = []
    for name, keep in (("correct", True), ("wrong", False), ("all", None)):
        on = [
            (float(k), d) for kl, digits, ok in divergences if keep in (None, ok) for k, d in zip(kl, digits)
        ]
        num = [k for k, d in on if d]
        other = [k for k, d in on if not d]
        total = sum(num) + sum(other)
        rows.append(
            [
                name,
                sum(1 for *_, ok in divergences if keep in (None, ok)),
                len(on),
                f"{sum(num) / max(len(num), 1):.3f}",
                f"{sum(other) / max(len(other), 1):.3f}",
                f"{len(num) / max(len(on), 1):.3f}",
                f"{sum(num) / total:.3f}" if total > 0 else "-",
            ]
        )
    return rows


def load(args) -> list[tuple[str, object]]:
    """(label, module) for the start (``--policy-config``) and each ``--ckpt_path``."""
    from lightning_rlvr.experiments.credit_lab.view import load_module_and_methods

    out = []
    if args.policy_config or not args.ckpt_path:
        cli = build_cli("grpo", base=args.policy_config or "configs/quickstart_real.yaml")
        out.append(
            (
                "start (" + (args.policy_config or "configs/quickstart_real.yaml") + ")",
                ready_policy(cli.model).eval(),
            )
        )
    for i, ckpt in enumerate(args.ckpt_path or []):
        module, _ = load_module_and_methods(ckpt, [])
        label = args.label[i] if args.label and i < len(args.label) else ckpt
        out.append((label, module))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser)
    add_policy_config_arg(parser)
    parser.add_argument("--ckpt_path", action="append", help="a run's checkpoint (repeatable)")
    parser.add_argument("--label", action="append", help="a name for each --ckpt_path, in order")
    parser.add_argument("--prompts", type=int, default=128, help="validation prompts (default 128)")
    parser.add_argument("--split", default="val", choices=["train", "val", "test"])
    parser.add_argument("--samples", type=int, default=8, help="samples a prompt to find a correct peer")
    parser.add_argument("--batch", type=int, default=32, help="prompts a generation batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--divergence-prompts",
        type=int,
        default=16,
        help="prompts (x --samples) on which to locate OPSD's per-token divergence (0: skip)",
    )
    args = parser.parse_args()
    set_threads(args.threads)
    started, load_start = time.time(), load_average()
    body = []
    for label, module in load(args):
        if module.render is None:
            raise SystemExit(
                f"{label}: this model has no prompt format (a plain token layout, e.g. the tiny built-in "
                "models), so the methods build its privileged contexts from the task's own token-level "
                "texts, which this probe does not reproduce: use a pretrained model's config"
            )
        problems = [module.task.problem(args.split, i) for i in range(args.prompts)]
        t = time.perf_counter()
        # plain, answer, wrong and at most one peer view a prompt, greedy; `samples` sampled to find peers
        with Progress(len(problems) * (4 + args.samples), label, "completions (at most)") as bar:
            generate = generator(module, args.batch, bar)
            rows = probe(generate, module.task.extract_answer, problems, args.samples, args.seed)
        body += [f"### {label}", "", f"{args.split} split, {time.perf_counter() - t:.0f} s.", ""]
        headers = ["context", "prompts", "pass@1", "copies the given answer", "vs plain on those prompts"]
        body += [md_table(headers, rows), ""]
        if args.divergence_prompts:
            t = time.perf_counter()
            div = opsd_divergences(module, problems[: args.divergence_prompts], args.samples, args.seed)
            took = time.perf_counter() - t
            body += [
                f"Where OPSD's divergence KL(student || teacher) falls on {args.divergence_prompts} "
                f"prompts x {args.samples} samples (T = 1), in nats a token ({took:.0f} s):",
                "",
                md_table(
                    [
                        "completions",
                        "n",
                        "tokens",
                        "KL on digit tokens",
                        "KL on other tokens",
                        "digit share of tokens",
                        "digit share of KL",
                    ],
                    where_divergence_falls(div),
                ),
                "",
            ]
    write_result(
        "reads_context",
        "Does the policy read a privileged context?",
        "\n".join(body),
        started,
        load_start,
        args.out,
    )


if __name__ == "__main__":
    main()
