"""HP-RLVR: hindsight-privileged token credit from a single rollout per prompt.

Formulas, defaults and provenance: ``docs/methods.md`` (HP-RLVR).

Only the paper's abstract is public; what is marked [proposed] below is this
project's design and every such choice is a constructor argument.

What: RLVR with **one** completion per prompt (G = 1). GRPO's group advantage is
undefined there (a group of one has no spread), so HP-RLVR supplies its own
token advantage. The rollout-time policy scores every completion token twice:

* **causal view** p_t = pi(. | x, o_<t): the token as it was generated;
* **hindsight view** q_t = pi(. | x, H_k, sep, o_<t) for a token ``t`` of step ``k``,
  where the hindsight H_k holds the *realised future* (steps k+1..K of the same
  completion) and the verifier's feedback (pass/fail and its message). [proposed]
  The completion is split into steps at a delimiter (newline by default) and
  consecutive steps are merged so that there are at most ``max_steps`` of them.
  o_t itself is never in the hindsight context: H_k starts after step k ends, and
  the causal prefix appended after the separator stops before t.

The normalised Jensen-Shannon divergence between the two views

    w_t = JSD(p_t, q_t) / ln 2            in [0, 1]   (full vocabulary)

says how much knowing the outcome changes the policy's view of token t: tokens
that the future/feedback "explains" get a large weight, tokens any continuation
would have produced get ~0. It weights the reward relative to a historical
per-prompt baseline b_x (no group, no critic, no reference solution):

    c_t = w_t * (r - b_x)                 in [-1, 1] for rewards in [0, 1]
    b_x <- m * b_x + (1 - m) * r          (m = 0.9, after the advantage is computed)

A prompt seen for the first time starts from the global running mean of all
rewards seen so far (0.5 before any). Failures get negative credit and
successes positive credit whenever r != b_x, so unlike GRPO with an all-0 or
all-1 group, a step almost never has a zero gradient (``frac_zero_grad``).

The baseline table is training state: ``state_dict`` / ``load_state_dict`` save
and restore it with every checkpoint. Memory bound: the table is an LRU of at
most ``max_prompts`` entries keyed by a 64-bit blake2b hash of the prompt text
(a stable hash: Python's ``hash`` is salted per process); one entry costs about
170 bytes in memory (measured: ~17 MB for 100_000) and two numbers in a checkpoint,
so the default bound keeps the table under ~20 MB. The least recently used prompt is evicted first
(and, if it comes back, restarts from the global mean).

Episodes (multi-turn rollouts): a step ends with each action, so H_k holds the observation that
answered action k, every later turn (actions and observations: the realised future) and the game's
final verdict and feedback.

Cost: one extra no-grad forward pass per (row, step) view through
``Scorer.compare``, of length |prompt| + |future| + |feedback| + |prefix|.
"""

from __future__ import annotations

import hashlib
import math
import string
from collections import OrderedDict

import torch
from torch import Tensor

from ..core.rollout import Rollout
from ..core.text_roles import FAIL_TEXT, HINDSIGHT, HINDSIGHT_SEPARATOR, PASS_TEXT, STEP_DELIMITER
from ..prompts import fill
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner
from .texts import TextSettings

LN2 = math.log(2.0)
_FIELDS = ("future", "verdict", "feedback")


def normalized_jsd(teacher_logp: Tensor, student_logp: Tensor) -> Tensor:
    """JSD(p, q) / ln 2 over the last (vocabulary) axis, in [0, 1]: [..., V] x [..., V] -> [...].

    Exact zeros in either distribution (log-prob -inf) are handled: 0 * log 0 = 0, so
    disjoint supports give exactly 1 and identical distributions exactly 0.
    """
    lq, lp = teacher_logp.float(), student_logp.float()  # [..., V]
    lm = torch.logaddexp(lp, lq) - LN2  # log of the mixture (p + q) / 2

    def kl_to_mixture(la: Tensor) -> Tensor:
        a = la.exp()
        return torch.where(a > 0, a * (la - lm), torch.zeros_like(a)).sum(-1)

    jsd = 0.5 * kl_to_mixture(lp) + 0.5 * kl_to_mixture(lq)
    return (jsd / LN2).clamp(0.0, 1.0)


def prompt_key(prompt: str) -> int:
    """A stable 64-bit key of the prompt text (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest(), "little")


def template_pieces(template: str) -> list[tuple[str, str | None]]:
    """(literal text, field or None) pieces of a hindsight template; an unknown field is an error."""
    pieces = []
    for literal, field, _spec, _conv in string.Formatter().parse(template):
        if field is not None and field not in _FIELDS:
            raise ValueError(f"hindsight_template field {{{field}}} unknown; expected one of {_FIELDS}")
        pieces.append((literal, field))
    return pieces


def split_steps(is_delim: Tensor, max_steps: int) -> Tensor:
    """Step index of every token of one completion: [L] bool -> [L] long in 0..K-1, K <= max_steps.

    A delimiter token ends its step (it belongs to the step before it); the tokens
    after the last delimiter form the final step. With n > max_steps raw steps,
    raw step j goes to merged step floor(j * max_steps / n): contiguous groups of
    consecutive steps, every merged step non-empty.
    """
    d = is_delim.long()
    raw = torch.cumsum(d, 0) - d  # delimiters strictly before t
    if raw.numel() == 0:
        return raw
    n = int(raw[-1]) + 1
    return raw if n <= max_steps else (raw * max_steps) // n


class HPRLVRCredit(TextSettings, CreditAssigner):
    """c_t = w_t (r - b_x) with w_t = JSD(causal, hindsight) / ln 2 and a per-prompt moving-average baseline.

    Args:
        step_delimiter, hindsight_template, separator, pass_text, fail_text: the method's text; None =
            the task's text for the role each reads (``text_roles``) in its plain layout, else the
            default given here (``credit/texts.py``).
            With a prompt format, the hindsight and separator follow the prompt's text in the user
            turn, which is re-rendered (``lightning_rlvr/prompts.py``).
        step_delimiter: text that ends a step [proposed: newline]. Every token whose
            decoded text contains it ends a step (plus ``scorer.encode(step_delimiter)``
            when that is a single token), so BPE tokens that merge a newline still count.
        max_steps: at most K steps per completion; more are merged into K contiguous groups [proposed: 8].
        hindsight_template: what follows the prompt in the hindsight context; ``{future}``
            is replaced by the token ids of steps k+1..K (EOS removed), ``{verdict}`` by
            ``pass_text``/``fail_text``, ``{feedback}`` by the verifier's message. Each
            text piece is encoded on its own [proposed].
        separator: text between the hindsight and the causal prefix [proposed].
        pass_text: the verdict of a passing completion [proposed].
        fail_text: the verdict of a failing completion [proposed].
        momentum: m of the baseline update b <- m b + (1 - m) r [proposed: 0.9].
        initial_baseline: the global mean before any reward is seen [proposed: 0.5].
        max_prompts: LRU bound of the baseline table (entries; ~170 B each) [proposed: 100_000].
    """

    # The causal view of every step is the policy on the rollout's own prompt: the update's own forwards
    # give it (``RLVRModule.fused_policy_pass``), so ``compare`` runs only the hindsight views. Without
    # it each step's view would run its causal prefix again (K views of one row: K student passes).
    uses_policy_pass = True

    def __init__(
        self,
        step_delimiter: str | None = None,
        max_steps: int = 8,
        hindsight_template: str | None = None,
        separator: str | None = None,
        pass_text: str | None = None,
        fail_text: str | None = None,
        momentum: float = 0.9,
        initial_baseline: float = 0.5,
        max_prompts: int = 100_000,
    ) -> None:
        super().__init__(scale_by_std=False)
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError("momentum must be in [0, 1]")
        if max_prompts < 1:
            raise ValueError("max_prompts must be >= 1")
        self.step_delimiter = step_delimiter
        self.hindsight_template = hindsight_template
        self.separator = separator
        self.pass_text = pass_text
        self.fail_text = fail_text
        self.check_texts({k: getattr(self, k) for k in self.text_defaults if getattr(self, k) is not None})
        self.max_steps = max_steps
        self.momentum = momentum
        self.initial_baseline = initial_baseline
        self.max_prompts = max_prompts
        self.baselines: OrderedDict[int, float] = OrderedDict()  # prompt key -> b_x, oldest first
        self.global_mean = initial_baseline
        self.global_count = 0
        self._delim_cache: tuple[int, str, Tensor] | None = None  # (id(tokenizer), delimiter, ids)

    text_roles = {
        "step_delimiter": (STEP_DELIMITER,),
        "hindsight_template": (HINDSIGHT,),
        "separator": (HINDSIGHT_SEPARATOR,),
        "pass_text": (PASS_TEXT,),
        "fail_text": (FAIL_TEXT,),
    }
    text_defaults = {
        "step_delimiter": "\n",
        "hindsight_template": "\nLater steps:\n{future}\nVerifier: {verdict}. {feedback}",
        "separator": "\nSolution:\n",
        "pass_text": "pass",
        "fail_text": "fail",
    }

    def check_texts(self, texts: dict) -> None:
        if "step_delimiter" in texts and not texts["step_delimiter"]:
            raise ValueError("step_delimiter must be a non-empty string")
        if "hindsight_template" in texts:
            template_pieces(texts["hindsight_template"])

    def literal_texts(self, texts: dict) -> dict[str, list[str]]:
        out = super().literal_texts(texts)
        pieces = template_pieces(texts["hindsight_template"])
        out["hindsight_template"] = [lit for lit, _ in pieces if lit]
        if not any(field == "verdict" for _, field in pieces):  # verdicts never shown: any text will do
            out.pop("pass_text"), out.pop("fail_text")
        return out

    # ------------------------------------------------------------------ steps and contexts
    def delimiter_ids(self, scorer: Scorer) -> Tensor:
        """Token ids that end a step: [D] (computed once per tokenizer)."""
        tok, delimiter = scorer.tokenizer, self.texts(scorer)["step_delimiter"]
        device = scorer.rollout.completion_ids.device
        if self._delim_cache is not None and self._delim_cache[:2] == (id(tok), delimiter):
            return self._delim_cache[2].to(device)
        ids = set()
        enc = scorer.encode(delimiter).tolist()
        if len(enc) == 1:
            ids.add(enc[0])
        vocab = tok.batch_decode([[i] for i in range(len(tok))])  # one decode of the vocabulary
        ids.update(i for i, text in enumerate(vocab) if delimiter in text)
        special = set(getattr(tok, "all_special_ids", []) or [])
        out = torch.tensor(sorted(ids - special), dtype=torch.long)
        self._delim_cache = (id(tok), delimiter, out)
        return out.to(device)

    def hindsight_context(
        self, prompt: Tensor, future: Tensor, verdict: str, feedback: str, encode, texts: dict
    ) -> Tensor:
        """Plain layout: [prompt ; template(future, verdict, feedback) ; separator] as 1-D ids."""
        parts = [prompt]
        for literal, field in template_pieces(texts["hindsight_template"]):
            if literal:
                parts.append(encode(literal))
            if field == "future":
                parts.append(future)
            elif field == "verdict":
                parts.append(encode(verdict))
            elif field == "feedback" and feedback:
                parts.append(encode(feedback))
        if texts["separator"]:
            parts.append(encode(texts["separator"]))
        return torch.cat([p.to(prompt.device, torch.long) for p in parts])

    @staticmethod
    def hindsight_text(prompt: str, future: str, verdict: str, feedback: str, texts: dict) -> str:
        """Prompt-format layout: the user turn's text, the prompt then the hindsight and the separator."""
        hindsight = fill(texts["hindsight_template"], future=future, verdict=verdict, feedback=feedback)
        return prompt + hindsight + texts["separator"]

    def views(
        self, rollout: Rollout, scorer: Scorer
    ) -> tuple[list[Tensor], list[int], list[tuple[int, int]]]:
        """Hindsight contexts, rows and (start, end) spans of every (row, step) view.

        Without a prompt format the context is built on ids (``hindsight_context``); with one, the
        hindsight goes in the user turn after the prompt's text and ``scorer.render`` re-renders it,
        so the causal prefix follows the assistant header as the completion followed it.
        """
        texts = self.texts(scorer)
        delim = self.delimiter_ids(scorer)  # [D]
        cache: dict[str, Tensor] = {}

        def encode(text: str) -> Tensor:
            if text not in cache:
                cache[text] = scorer.encode(text)
            return cache[text]

        contexts, rows, spans = [], [], []
        for i in range(rollout.num_rows):
            toks = rollout.completion_tokens(i)  # [L]
            if toks.numel() == 0:
                continue
            step = split_steps(self._step_ends(rollout, i, toks, delim), self.max_steps)  # [L]
            counts = torch.bincount(step)  # [K]
            ends = torch.cumsum(counts, 0).tolist()
            starts = [0] + ends[:-1]
            keep = (toks != rollout.eos_id) & (toks != rollout.pad_id)  # the future carries no EOS
            prompt = rollout.prompt_tokens(i)
            passed = bool(rollout.correct[i])  # the verifier's verdict
            verdict = texts["pass_text"] if passed else texts["fail_text"]
            feedback = rollout.feedback[i] if i < len(rollout.feedback) else ""
            for start, end in zip(starts, ends):
                future = toks[end:][keep[end:]]  # steps k+1..K
                if scorer.render is None:
                    contexts.append(self.hindsight_context(prompt, future, verdict, feedback, encode, texts))
                else:
                    text = self.hindsight_text(
                        rollout.problems[int(rollout.group[i])].prompt,
                        scorer.tokenizer.decode(future, skip_special_tokens=True),
                        verdict,
                        feedback,
                        texts,
                    )
                    contexts.append(scorer.encode(scorer.render(text)))
                rows.append(i)
                spans.append((start, end))
        return contexts, rows, spans

    @staticmethod
    def _step_ends(rollout: Rollout, row: int, toks: Tensor, delim: Tensor) -> Tensor:
        """[L] bool: tokens that end a step. Episodes: the last token of each action, so the hindsight
        of an action holds the observation that answered it and every later turn; else delimiters."""
        if rollout.turn_index is None:
            return torch.isin(toks, delim)
        m = rollout.loss_mask[row, : len(toks)].bool()  # [L]
        nxt = torch.cat([m[1:], m.new_zeros(1)])
        return m & ~nxt

    # ------------------------------------------------------------------ baseline table
    def _lookup(self, key: int) -> float:
        """b_x (inserting the global mean for a new prompt), marking it most recently used."""
        if key in self.baselines:
            self.baselines.move_to_end(key)
        else:
            self.baselines[key] = self.global_mean
            while len(self.baselines) > self.max_prompts:
                self.baselines.popitem(last=False)
        return self.baselines[key]

    def baselines_for(self, rollout: Rollout) -> tuple[Tensor, list[int]]:
        """The pre-update baseline of every row [N] and its prompt key."""
        keys = [prompt_key(rollout.problems[int(g)].prompt) for g in rollout.group.tolist()]
        values = [self._lookup(k) for k in keys]
        return torch.tensor(values, dtype=torch.float32, device=rollout.rewards.device), keys

    def update_baselines(self, keys: list[int], rewards: list[float]) -> None:
        """b_x <- m b_x + (1 - m) r per reward (in row order), then the global running mean."""
        m = self.momentum
        for key, r in zip(keys, rewards):
            self.baselines[key] = m * self._lookup(key) + (1.0 - m) * r
        for r in rewards:
            self.global_count += 1
            self.global_mean += (r - self.global_mean) / self.global_count

    # ------------------------------------------------------------------ credit
    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        if rollout.rewards is None:
            raise ValueError("HP-RLVR needs the verifier's rewards (rollout.rewards is None)")
        mask = rollout.completion_mask.float()  # [N, T]
        contexts, rows, spans = self.views(rollout, scorer)
        if rows:
            weights = scorer.compare(contexts, rows, normalized_jsd, spans=spans) * mask  # [N, T]
        else:
            weights = torch.zeros_like(mask)
        baseline, keys = self.baselines_for(rollout)  # [N], before this step's rewards
        rewards = rollout.rewards.float()  # [N]
        advantages = weights * (rewards - baseline)[:, None]  # [N, T]
        self.update_baselines(keys, rewards.tolist())
        n_tok = mask.sum().clamp(min=1.0)
        metrics = {
            "weight_mean": float(weights.sum() / n_tok),
            "baseline_mean": float(baseline.mean()),
            "frac_zero_grad": float(bool((advantages != 0).sum() == 0)),
            "steps_mean": len(rows) / max(rollout.num_rows, 1),
            "advantage_abs_mean": float(advantages.abs().sum() / n_tok),
            "prompts_tracked": float(len(self.baselines)),
        }
        return Credit(advantages=advantages, metrics=metrics)

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict:
        return {
            "keys": list(self.baselines.keys()),  # least recently used first
            "values": list(self.baselines.values()),
            "global_mean": self.global_mean,
            "global_count": self.global_count,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        keys, values = list(state_dict["keys"]), list(state_dict["values"])
        pairs = list(zip(keys, values))[-self.max_prompts :]  # keep the most recent under a smaller bound
        self.baselines = OrderedDict((int(k), float(v)) for k, v in pairs)
        self.global_mean = float(state_dict["global_mean"])
        self.global_count = int(state_dict["global_count"])
