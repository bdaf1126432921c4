"""Where does each method put the credit? One group of rollouts, every method's token weights, as HTML.

    python -m lightning_rlvr.experiments.credit_lab.view --ckpt runs/quickstart/checkpoints/last.ckpt \\
        --methods configs/method/grpo.yaml configs/method/shear.yaml --prompt-index 0 --out view.html

For one prompt, the checkpoint's policy samples one group of G completions and
the task's verifier scores them. Each method's credit assigner is built from
the ``model.credit`` section of its YAML (validated against the class signature
by jsonargparse, as the CLI does) and run on the SAME rollout and the SAME
``Scorer``. Each token is coloured by its signed advantage on one diverging
scale centred at 0 (blue up, red down, a legend on the page); its tooltip also
gives its weight, the advantage over the rollout's GRPO advantage A_i (the raw
advantage where A_i is 0). Each rollout is shown next to its nearest correct peer (the correct
rollout of the group with the longest common prefix), with the first token
where they diverge marked: the place hindsight and contrastive methods are
meant to single out. A method that needs group structure the group lacks (no
correct rollout, say) falls back to GRPO-like weights; that is its behaviour,
not the view's. Only the verifier's reward is used: a method's reward shaping
(DAPO's overlong penalty) is not drawn. A distillation-style method's per-token
loss (HSD's teacher-student divergence) IS its credit: ``method_credit`` adds it,
evaluated at the rollout-time policy, to the token advantages with a minus sign
(the loss pushes down the tokens the teacher disagrees with): HSD's colours show where it acts.
"""

from __future__ import annotations

import argparse
import glob
import html
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import yaml
from torch import Tensor

from ...core.arithmetic_steps import first_difference
from ...core.files import write_text
from ...core.objectives import group_advantages
from ...core.rng import seeded
from ...core.rollout import Rollout
from ...credit.base import Credit, CreditAssigner
from ...scoring.scorer import Scorer

log = logging.getLogger(__name__)
CORRECT = 0.5  # a rollout is correct when its reward exceeds this
DEFAULT_METHODS = ["configs/method/grpo.yaml", "configs/method/*.yaml"]  # GRPO first: the yardstick


# ---------------------------------------------------------------------------- methods from YAML
def load_credit(path: str | Path) -> CreditAssigner:
    """The credit assigner of a method YAML's ``model.credit`` (GRPO when the file sets none)."""
    from jsonargparse import ArgumentParser

    from ...credit.grpo import GRPOCredit

    section = ((yaml.safe_load(Path(path).read_text()) or {}).get("model") or {}).get("credit")
    if section is None:
        return GRPOCredit()
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--credit", type=CreditAssigner)
    cfg = parser.parse_object({"credit": section})
    return parser.instantiate_classes(cfg).credit


# ---------------------------------------------------------------------------- what is drawn
def token_weights(advantages: Tensor, grpo_advantage: Tensor, eps: float = 1e-8) -> Tensor:
    """[N, T] advantages / GRPO's A_i per row where A_i != 0, else the advantages themselves."""
    a = grpo_advantage[:, None]
    safe = torch.where(a.abs() > eps, a, torch.ones_like(a))
    return torch.where(a.abs() > eps, advantages / safe, advantages)


def nearest_correct_peer(tokens: list[list[int]], rewards: list[float], row: int) -> tuple[int, int] | None:
    """(peer row, common-prefix length) of the correct rollout other than ``row`` sharing the longest
    prefix with it (the lowest row on ties); None when the group has no other correct rollout."""
    best = None
    for j, (toks, r) in enumerate(zip(tokens, rewards)):
        if j == row or r <= CORRECT:
            continue
        n = first_difference(tokens[row], toks)
        if best is None or n > best[1]:
            best = (j, n)
    return best


def method_credit(out: Credit, rollout: Rollout, scorer: Scorer) -> tuple[Tensor, Tensor | None]:
    """A method's per-token credit [N, T], and its per-token loss [N, T] (None without one).

    The credit is the method's advantages minus its per-token loss when it has one.

    The per-token loss of a distillation-style method (``Credit.token_loss``) is evaluated at the
    rollout-time policy (the scorer's next-token log-probs stand in for the student's logits;
    ``log_softmax`` is unchanged by that) and counted as negative credit: it is the signal that
    pushes those tokens' probabilities towards the teacher. 0 on padding.
    """
    mask = rollout.completion_mask
    adv = out.advantages.detach().float()
    if out.token_loss is None:
        return adv * mask, None
    rows = torch.arange(rollout.num_rows, device=adv.device)
    with torch.no_grad():
        loss = out.token_loss(scorer.policy_logprobs(rows), rows).float() * mask  # [N, T]
    return (adv - loss) * mask, loss


@dataclass
class MethodView:
    name: str
    cls: str
    weights: Tensor  # [N, T]
    advantages: Tensor  # [N, T] the method's credit (advantages, minus its per-token loss if any)
    metrics: dict[str, float]
    extra_loss: bool  # the method adds a per-token loss (included in ``advantages``)
    forward_tokens: int = 0  # tokens the method ran through the model (incl. sampled ones)
    generated_tokens: int = 0  # of which sampled (Monte-Carlo continuations)
    seconds: float = 0.0  # wall time of its ``assign``
    token_loss: Tensor | None = None  # [N, T] its per-token loss at the rollout-time policy, if any
    claims: tuple[str, ...] = ()  # the lab's paper claims the method declares (``CreditAssigner.lab_claims``)


def assign_all(
    methods: dict[str, CreditAssigner],
    rollout: Rollout,
    scorer: Scorer | Callable[[], Scorer],
    key: tuple | None = None,
    tick: Callable[[], object] = lambda: None,
) -> tuple[Tensor, list[MethodView]]:
    """Run every method on the same rollout: (GRPO advantages [N], one view per method); ``tick`` after each.

    ``scorer`` is one shared ``Scorer`` or a factory giving each method a fresh one (then each
    method's cost includes its own policy pass). With ``key`` each method draws from the global RNG
    seeded by ``(*key, its name)`` alone (``core.rng.seeded``), so its credit does not depend on which
    methods ran before it.
    """
    grpo = group_advantages(rollout.rewards, rollout.group, scale=True)
    views = []
    for name, credit in methods.items():
        sc = scorer() if callable(scorer) and not isinstance(scorer, Scorer) else scorer
        tokens, generated = sc.forward_tokens, sc.generated_tokens
        with seeded(*key, name) if key is not None else nullcontext():
            start = time.perf_counter()
            with torch.no_grad():
                out = credit.assign(rollout, sc)
            seconds = time.perf_counter() - start
            tokens, generated = sc.forward_tokens - tokens, sc.generated_tokens - generated
            adv, loss = method_credit(out, rollout, sc)
        extra = loss is not None
        weights = token_weights(adv, grpo)
        view = MethodView(name, type(credit).__name__, weights, adv, out.metrics, extra, tokens, generated)
        view.claims = tuple(credit.lab_claims)
        view.seconds, view.token_loss = seconds, loss
        views.append(view)
        tick()
    return grpo, views


# ---------------------------------------------------------------------------- HTML
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
.tok { font-family: ui-monospace, monospace; white-space: pre; padding: 1px 0; border-radius: 2px; }
.div { outline: 2px solid #1f5fbf; }
table { border-collapse: collapse; }
td, th { padding: 3px 8px; vertical-align: top; text-align: left; }
th { font-weight: 600; white-space: nowrap; }
section { border-top: 1px solid #ccc; padding: 0.6em 0; }
.pair { display: flex; gap: 2em; flex-wrap: wrap; }
.meta { color: #555; font-size: 0.9em; }
.legend span { display: inline-block; width: 3.2em; text-align: center; font-size: 0.8em; }
"""


def _color(a: float, scale: float) -> str:
    """One diverging scale centred at 0: blue for positive credit (the update raises the token), red for
    negative (it lowers it), white at 0, full colour at |a| >= ``scale``."""
    alpha = min(1.0, abs(a) / scale) * 0.85 if scale > 0 else 0.0
    rgb = "33,102,172" if a >= 0 else "178,24,43"
    return f"rgba({rgb},{alpha:.3f})"


def legend(scale: float) -> str:
    """The colour key: nine swatches from -scale to +scale, each labelled with its advantage."""
    steps = [scale * k / 4 for k in range(-4, 5)]
    cells = "".join(f"<span style='background:{_color(a, scale)}'>{a:+.2g}</span>" for a in steps)
    return f"<p class='legend'>signed token advantage: {cells} (beyond +-{scale:.2g}: full colour)</p>"


def _token_text(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id], skip_special_tokens=False)
    return text if text else "\u2205"


def _spans(
    tokenizer,
    ids: list[int],
    adv: list[float] | None,
    weights: list[float] | None,
    scale: float,
    mark: int | None,
) -> str:
    out = []
    for t, tid in enumerate(ids):
        text = html.escape(_token_text(tokenizer, tid))
        cls = "tok div" if t == mark else "tok"
        if adv is None or weights is None:
            out.append(f'<span class="{cls}">{text}</span>')
        else:
            style = f"background:{_color(adv[t], scale)}"
            tip = f"t={t} advantage={adv[t]:+.3g} weight vs GRPO={weights[t]:.3g}"
            out.append(f'<span class="{cls}" style="{style}" title="{tip}">{text}</span>')
    return "".join(out)


def render_html(
    rollout: Rollout, tokenizer, grpo: Tensor, views: list[MethodView], title: str, note: str = ""
) -> str:
    """The HTML: per rollout, one row a method (tokens coloured by weight), its nearest correct peer aside."""
    N = rollout.num_rows
    tokens = [rollout.completion_tokens(i).tolist() for i in range(N)]
    rewards = [float(r) for r in rollout.rewards]
    valid = [v.advantages[i, : len(tokens[i])].abs() for v in views for i in range(N) if tokens[i]]
    flat = torch.cat(valid).float() if valid else torch.ones(1)
    scale = float(torch.quantile(flat, 0.95)) or float(flat.max()) or 1.0  # one scale for every method
    problem = rollout.problems[0]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p><b>prompt</b> <span class='tok'>{html.escape(problem.prompt)}</span> &nbsp; "
        f"<b>answer</b> {html.escape(problem.answer)} &nbsp; "
        f"{sum(r > CORRECT for r in rewards)} of {N} correct</p>",
        "<p class='meta'>Each token is coloured by its signed advantage (the method's credit, minus its "
        "per-token loss for distillation methods) on one diverging scale centred at 0 for every method: "
        "blue raises the token's probability, red lowers it, white is no credit. Hover a token for its "
        "advantage and its weight relative to the rollout's GRPO advantage A_i. The outlined token is where "
        "the rollout first differs from its nearest correct peer (longest common prefix).</p>",
        legend(scale),
    ]
    if note:
        parts.append(f"<p class='meta'>{html.escape(note)}</p>")
    extra = "; its per-token loss is drawn as negative credit"
    methods = ", ".join(
        f"<b>{html.escape(v.name)}</b> ({v.cls}{extra if v.extra_loss else ''})" for v in views
    )
    parts.append(f"<p>methods: {methods}</p>")
    for i in range(N):
        peer = nearest_correct_peer(tokens, rewards, i)
        mark = peer[1] if peer is not None and peer[1] < len(tokens[i]) else None
        raw = abs(float(grpo[i])) <= 1e-8
        rows = []
        for v in views:
            w = v.weights[i, : len(tokens[i])].tolist()
            a = v.advantages[i, : len(tokens[i])].tolist()
            mean = sum(a) / max(len(a), 1)
            summary = (
                f"advantage mean {mean:+.2f}, min {min(a, default=0):+.2f}, max {max(a, default=0):+.2f}"
            )
            rows.append(
                f"<tr class='method' data-method='{html.escape(v.name)}'><th>{html.escape(v.name)}</th>"
                f"<td>{_spans(tokenizer, tokens[i], a, w, scale, mark)}</td>"
                f"<td class='meta'>{summary}</td></tr>"
            )
        if peer is None:
            peer_html = "<p class='meta'>no other correct rollout in this group</p>"
        else:
            j, n = peer
            peer_mark = n if n < len(tokens[j]) else None
            peer_html = (
                f"<p class='meta'>nearest correct peer: rollout {j} (reward {rewards[j]:g}), "
                f"common prefix {n} tokens</p>"
                f"<p>{_spans(tokenizer, tokens[j], None, None, scale, peer_mark)}</p>"
            )
        header = (
            f"rollout {i} &middot; reward {rewards[i]:g} &middot; GRPO advantage {float(grpo[i]):+.3f}"
            f"{' (0: raw advantages shown)' if raw else ''} &middot; {len(tokens[i])} tokens"
        )
        parts.append(
            f"<section id='rollout-{i}'><h3>{header}</h3><div class='pair'><table>{''.join(rows)}</table>"
            f"<div>{peer_html}</div></div></section>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lightning_rlvr.experiments.credit_lab.view",
        description=(
            "Sample one group of rollouts for one prompt with a checkpoint's policy, run each method's "
            "credit assigner (from its YAML's model.credit) on the same rollouts, and write an HTML page "
            "of per-token weights (token advantage / GRPO advantage) next to each rollout's nearest "
            "correct peer."
        ),
    )
    p.add_argument(
        "--ckpt", required=True, help="a lightning-rlvr checkpoint (e.g. .../checkpoints/last.ckpt)"
    )
    methods = (
        "method YAML files or globs, named by file stem (default: GRPO, then every configs/method/*.yaml)"
    )
    p.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, help=methods)
    p.add_argument("--prompt-index", type=int, default=0, help="index of the prompt in --split (default 0)")
    p.add_argument(
        "--split", default="test", choices=["train", "val", "test"], help="task split (default test)"
    )
    p.add_argument(
        "--group-size", type=int, default=None, help="rollouts in the group (default: the checkpoint's G)"
    )
    p.add_argument(
        "--temperature", type=float, default=None, help="sampling temperature (default: the checkpoint's)"
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--out", default="credit_view.html", help="HTML file to write (default credit_view.html)")
    return p


def method_files(patterns: list[str]) -> list[Path]:
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        if not matches:
            raise SystemExit(f"credit_view: error: {pattern!r} matches no file")
        for m in matches:
            if not Path(m).is_file():
                raise SystemExit(f"credit_view: error: method file {m!r} not found")
            if Path(m) not in files:
                files.append(Path(m))
    return files


def load_module_and_methods(ckpt: str | Path, patterns: list[str]):
    """The checkpoint's ``RLVRModule`` (CPU, eval) and each method file's credit assigner, by file stem.

    A method of the checkpoint's own class also gets the checkpoint's credit state (baselines).
    """
    from ...checkpoint_files import read_checkpoint
    from ...module import RLVRModule

    read_checkpoint(str(ckpt))  # a missing or damaged file: one RLVRError line, not a loader traceback
    module = RLVRModule.load_from_checkpoint(ckpt, map_location="cpu").eval()
    methods: dict[str, CreditAssigner] = {}
    for path in method_files(patterns):
        credit = load_credit(path)
        credit.prepare(module.model, module.tokenizer, module.task, module.device)  # OPD: its teacher
        if type(credit) is type(module.credit):  # same method as the checkpoint: its state too (baselines)
            credit.load_state_dict(module.credit.state_dict())
        methods[path.stem] = credit
    return module, methods


def main(argv: list[str] | None = None) -> Path:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from ...collect.continuations import EngineSampler

    module, methods = load_module_and_methods(args.ckpt, args.methods)
    problem = module.task.problem(args.split, args.prompt_index)
    G = args.group_size or max(module.group_size, 2)
    if args.temperature is not None:
        module.sampling = replace(module.sampling, temperature=args.temperature)
    with seeded(args.seed, "rollout", args.prompt_index), torch.no_grad():
        rollout = module.rollout([problem], G)
    scorer = Scorer(
        module.model, rollout, module.tokenizer, module.micro_batch_size, sampler=EngineSampler.of(module)
    )
    grpo, views = assign_all(methods, rollout, scorer, key=(args.seed, "method", args.prompt_index))
    title = f"Credit view: {Path(args.ckpt).name}, {args.split} prompt {args.prompt_index}, G = {G}"
    note = f"checkpoint {args.ckpt} (its method: {type(module.credit).__name__}); sampling seed {args.seed}"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, render_html(rollout, module.tokenizer, grpo, views, title, note))
    log.info("wrote %s (%d rollouts x %d methods)", out, G, len(views))
    return out


if __name__ == "__main__":
    from ...core.errors import RLVRError

    try:
        main()
    except RLVRError as err:
        raise SystemExit(f"credit_view: error: {err}") from None
